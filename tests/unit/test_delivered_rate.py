"""The rate a response is delivered at (issue 38 item 1): OpenAI's 24 kHz pcm by default, the
`sample_rate` extension, and encoders that resample chunk by chunk to the same bytes as whole."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import soundfile as sf

from voxflow.audio import content_type, encode_audio, open_stream_encoder, resample, to_int16
from voxflow.audio.rates import (
    OPENAI_PCM_RATE_HZ,
    check_requested_rate,
    delivered_rate,
    format_rates,
)

LAME_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def speechlike(rate: int, seconds: float = 1.3) -> np.ndarray:
    """A 180 Hz tone with harmonics and a little noise, float32 (N,) at `rate` Hz."""
    t = np.arange(int(rate * seconds)) / rate
    rng = np.random.default_rng(rate)
    x = sum(0.3 / k * np.sin(2 * np.pi * 180 * k * t) for k in range(1, 6))
    return (x + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def test_pcm_defaults_to_openais_24khz_and_the_rest_to_the_models_rate():
    assert OPENAI_PCM_RATE_HZ == 24000
    assert delivered_rate("pcm", 22050) == 24000
    assert delivered_rate("pcm", 24000) == 24000
    assert delivered_rate("pcm", 22050, "native") == 22050
    for fmt in ("wav", "flac", "mp3", "aac"):
        assert delivered_rate(fmt, 22050) == delivered_rate(fmt, 22050, "native") == 22050
    assert delivered_rate("opus", 22050) == 48000  # libopus takes no 22,050 Hz: its fallback
    assert delivered_rate("opus", 24000) == 24000
    assert delivered_rate("mp3", 22050, 16000) == 16000


def test_the_rates_each_format_takes():
    assert format_rates("pcm") is format_rates("wav") is format_rates("flac") is None
    assert format_rates("mp3") == LAME_RATES
    assert format_rates("aac") == LAME_RATES  # FFmpeg's aac table, 7,350 and above 48k cut
    assert format_rates("opus") == (8000, 12000, 16000, 24000, 48000)


@pytest.mark.parametrize(("fmt", "value"), [
    ("pcm", None), ("pcm", "native"), ("pcm", 8000), ("wav", 48000), ("flac", 44100),
    ("wav", 11111), ("mp3", 22050), ("aac", 11025), ("opus", 16000),
])
def test_accepted_rates_come_back_unchanged(fmt, value):
    assert check_requested_rate(fmt, value) == value


@pytest.mark.parametrize(("fmt", "value", "message"), [
    ("pcm", 7999, '7999 Hz is outside 8000 to 48000; or send "native" for the model\'s own rate'),
    ("wav", 96000, '96000 Hz is outside 8000 to 48000; or send "native" for the model\'s own'),
    ("opus", 22050, "opus cannot be encoded at 22050 Hz; it takes 8000, 12000, 16000, 24000, "
     "48000"),
    ("mp3", 23000, "mp3 cannot be encoded at 23000 Hz; it takes 8000, 11025, 12000, 16000, "
     "22050, 24000, 32000, 44100, 48000"),
    ("pcm", "24000", 'sample_rate must be an integer (Hz) or "native"'),
    ("pcm", 24000.0, 'sample_rate must be an integer (Hz) or "native"'),
    ("pcm", True, 'sample_rate must be an integer (Hz) or "native"'),
    ("pcm", "Native", 'sample_rate must be an integer (Hz) or "native"'),
])
def test_refused_rates_say_why(fmt, value, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        check_requested_rate(fmt, value)


def test_pcm_content_type_names_its_rate():
    assert content_type("pcm", 24000) == "audio/pcm;rate=24000"
    assert content_type("pcm") == "audio/pcm"
    assert content_type("wav", 24000) == "audio/wav"  # a header carries it


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac", "opus", "aac"])
@pytest.mark.parametrize(("native", "out"), [(22050, 24000), (24000, 16000), (22050, 48000)])
def test_resampled_stream_equals_the_resampled_whole_file(fmt, native, out):
    if fmt == "opus" and out not in format_rates("opus"):
        pytest.skip("a rate opus does not take is refused before encoding")
    x = speechlike(native)
    whole = encode_audio(x, native, fmt, out)
    encoder = open_stream_encoder(fmt, native, out)
    chunks = [x[i : i + 2911] for i in range(0, x.size, 2911)]  # ~0.13 s, not a divisor
    streamed = b"".join([encoder.push(c) for c in chunks] + [encoder.finish()])
    if fmt == "wav":  # a streamed WAV's sizes are unknown (0xFFFFFFFF); the samples are equal
        assert streamed[44:] == whole[44:] and streamed[24:28] == whole[24:28]
    elif fmt == "flac":  # STREAMINFO's totals are only known to the whole file
        assert streamed[42:] == whole[42:]
    else:
        assert streamed == whole


def test_pcm_at_another_rate_is_the_soxr_resample_and_keeps_the_duration():
    x = speechlike(22050)
    pcm = encode_audio(x, 22050, "pcm", 24000)
    want = to_int16(resample(x, 22050, 24000)).astype("<i2").tobytes()
    assert pcm == want
    assert abs(len(pcm) // 2 - x.size * 24000 / 22050) <= 1


@pytest.mark.parametrize(("fmt", "out"), [("wav", 8000), ("flac", 16000), ("mp3", 16000),
                                          ("aac", 44100), ("opus", 12000)])
def test_files_at_another_rate_say_it_and_last_as_long(fmt, out):
    x = speechlike(22050)
    data = encode_audio(x, 22050, fmt, out)
    if fmt in ("wav", "flac"):
        info = sf.info(io.BytesIO(data))
        assert info.samplerate == out and abs(info.frames - x.size * out / 22050) <= 1
        return
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        n = sum(frame.samples for frame in container.decode(stream))
        decoded_rate = stream.codec_context.sample_rate
    # opus decodes at 48 kHz whatever it was encoded at; one codec frame of slack
    assert decoded_rate == (48000 if fmt == "opus" else out)
    assert abs(n / decoded_rate - x.size / 22050) < 1152 / out
