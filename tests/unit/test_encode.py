"""Unit tests for voxflow.audio: 16-bit conversion, whole-file and streamed encoders.

Decoding is done with PyAV (FFmpeg). Durations are compared in samples at the input
rate; "frame" below means one codec frame (mp3 1152, aac 1024, opus 20 ms).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct

import av
import numpy as np
import pytest
import soundfile as sf

from voxflow.audio import (
    FORMATS,
    StreamEncoder,
    content_type,
    encode_audio,
    open_stream_encoder,
    resample,
    to_int16,
)
from voxflow.audio.avcodec import AV_SPECS, AvEncoder, codec_rate
from voxflow.audio.lametag import MP3_DECODER_DELAY, patch_encoder_delay
from voxflow.audio.resample import StreamResampler

RATES = (22_050, 24_000)
CODEC_FORMATS = ("flac", "mp3", "opus", "aac")
AAC_PRIMING = 1024  # FFmpeg's AAC encoder delay (one frame), dropped because ADTS can't signal it
LAME_DELAY = 576  # LAME's encoder delay, written in the mp3 LAME tag


@functools.cache
def signal(rate: int, seconds: float = 2.5) -> np.ndarray:
    """220 Hz sine at 0.5 plus a little noise, float32 (N,)."""
    t = np.arange(int(rate * seconds)) / rate
    noise = 0.01 * np.random.default_rng(rate).standard_normal(t.size)
    return (0.5 * np.sin(2 * np.pi * 220 * t) + noise).astype(np.float32)


def decode(data: bytes, fmt: str | None = None) -> tuple[np.ndarray, int]:
    """Decode a whole file with PyAV: (float32 or int16 samples (N,), sample rate Hz).

    ``fmt`` names the container for files too short for FFmpeg's probe (1-frame aac).
    """
    with av.open(io.BytesIO(data), format=fmt) as container:
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
        rate = container.streams.audio[0].codec_context.sample_rate
    return np.concatenate(frames), rate


def stream(fmt: str, rate: int, samples: np.ndarray, chunk: int) -> list[bytes]:
    """Push ``samples`` in chunks of ``chunk``; returns every push's bytes, then finish's."""
    enc = open_stream_encoder(fmt, rate)
    parts = [enc.push(samples[i : i + chunk]) for i in range(0, samples.size, chunk)]
    return [*parts, enc.finish()]


@functools.cache
def encoded(fmt: str, rate: int) -> tuple[bytes, bytes]:
    """(whole-file bytes, streamed bytes in 0.1 s chunks) of signal(rate)."""
    x = signal(rate)
    return encode_audio(x, rate, fmt), b"".join(stream(fmt, rate, x, rate // 10))


def extra_samples(data: bytes, rate: int) -> float:
    """Decoded duration minus input duration, in samples at the input rate."""
    y, decoded_rate = decode(data)
    return y.size * rate / decoded_rate - signal(rate).size


def snr_db(reference: np.ndarray, decoded: np.ndarray) -> float:
    """Signal-to-noise ratio of ``decoded`` against ``reference`` (same length), dB."""
    ref = reference.astype(np.float64)
    return float(10 * np.log10((ref @ ref) / np.sum((ref - decoded) ** 2)))


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    n = min(a.size, b.size)
    a, b = a[:n].astype(np.float64), b[:n].astype(np.float64)
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


# --- formats -----------------------------------------------------------------


def test_formats_and_content_types():
    assert FORMATS == ("wav", "pcm", "flac", "mp3", "opus", "aac")
    assert [content_type(f) for f in FORMATS] == [
        "audio/wav",
        "audio/pcm",
        "audio/flac",
        "audio/mpeg",
        "audio/ogg",
        "audio/aac",
    ]


@pytest.mark.parametrize(
    "call",
    [
        content_type,
        lambda f: encode_audio(signal(24_000), 24_000, f),
        lambda f: open_stream_encoder(f, 24_000),
    ],
)
@pytest.mark.parametrize("fmt", ["ogg", "WAV", "", None])
def test_unknown_format_is_named_and_supported_ones_listed(call, fmt):
    with pytest.raises(ValueError) as err:
        call(fmt)
    assert repr(fmt) in str(err.value)
    assert "wav, pcm, flac, mp3, opus, aac" in str(err.value)


# --- to_int16 ----------------------------------------------------------------


def test_to_int16_rule():
    x = np.array(
        [
            0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            2.0,
            -3.0,
            np.nan,
            np.inf,
            -np.inf,
            0.3 / 32767,
            0.7 / 32767,
            -0.7 / 32767,
            1.6 / 32767,
        ],
        dtype=np.float32,
    )
    expected = [0, 32767, -32767, 16384, -16384, 32767, -32767, 0, 32767, -32767, 0, 1, -1, 2]
    got = to_int16(x)
    assert got.dtype == np.int16
    assert got.tolist() == expected


def test_to_int16_is_elementwise_so_chunks_equal_whole():
    x = np.random.default_rng(0).uniform(-1.2, 1.2, 10_001).astype(np.float32)
    chunks = np.concatenate([to_int16(x[i : i + 977]) for i in range(0, x.size, 977)])
    np.testing.assert_array_equal(chunks, to_int16(x))
    # float64 input is taken as float32 first
    np.testing.assert_array_equal(to_int16(x.astype(np.float64)), to_int16(x))


@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 10), np.float32), np.zeros(10, np.int16), np.zeros(3, bool), [0.0, 0.1]],
)
def test_bad_samples_rejected_everywhere(bad):
    with pytest.raises(ValueError):
        to_int16(bad)
    for fmt in FORMATS:
        with pytest.raises(ValueError):
            encode_audio(bad, 24_000, fmt)
        with open_stream_encoder(fmt, 24_000) as enc, pytest.raises(ValueError):
            enc.push(bad)


@pytest.mark.parametrize("rate", [0, -1, 22_050.0, True, "24000", 10_000_000])
def test_bad_sample_rate_rejected(rate):
    with pytest.raises(ValueError):
        encode_audio(signal(24_000), rate, "wav")
    with pytest.raises(ValueError):
        open_stream_encoder("mp3", rate)


# --- pcm / wav ---------------------------------------------------------------


@pytest.mark.parametrize("rate", RATES)
def test_pcm_is_int16_le_and_streamed_equals_whole(rate):
    x = signal(rate)
    whole = encode_audio(x, rate, "pcm")
    assert len(whole) == 2 * x.size
    np.testing.assert_array_equal(np.frombuffer(whole, "<i2"), to_int16(x))
    for chunk in (777, rate):
        assert b"".join(stream("pcm", rate, x, chunk)) == whole
    assert b"".join(stream("pcm", rate, x[:300], 1)) == whole[:600]


def parse_wav_header(data: bytes) -> tuple:
    return struct.unpack("<4sI4s4sIHHIIHH4sI", data[:44])


@pytest.mark.parametrize("rate", RATES)
def test_whole_wav_has_exact_sizes(rate):
    x = signal(rate)
    data = encode_audio(x, rate, "wav")
    assert len(data) == 44 + 2 * x.size
    assert parse_wav_header(data) == (
        b"RIFF",
        36 + 2 * x.size,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        rate,
        2 * rate,
        2,
        16,
        b"data",
        2 * x.size,
    )
    y, sr = sf.read(io.BytesIO(data), dtype="int16")
    assert sr == rate
    np.testing.assert_array_equal(y, to_int16(x))


@pytest.mark.parametrize("rate", RATES)
def test_streamed_wav_unknown_sizes_then_same_frames(rate):
    x = signal(rate)
    whole = encode_audio(x, rate, "wav")
    parts = stream("wav", rate, x, 1000)
    data = b"".join(parts)
    header = parse_wav_header(data)
    assert header[1] == 0xFFFFFFFF and header[-1] == 0xFFFFFFFF
    assert header[2:-1] == parse_wav_header(whole)[2:-1]
    assert data[44:] == whole[44:]
    assert len(parts[0]) == 44 + 2000  # header comes with the first chunk
    assert parts[-1] == b""


def test_empty_audio():
    empty = np.zeros(0, np.float32)
    assert encode_audio(empty, 24_000, "pcm") == b""
    wav = encode_audio(empty, 24_000, "wav")
    assert len(wav) == 44 and parse_wav_header(wav)[1] == 36 and parse_wav_header(wav)[-1] == 0
    assert sf.info(io.BytesIO(wav)).frames == 0
    assert open_stream_encoder("pcm", 24_000).finish() == b""
    unknown = b"\xff\xff\xff\xff"
    streamed_header = wav[:4] + unknown + wav[8:40] + unknown
    assert open_stream_encoder("wav", 24_000).finish() == streamed_header
    enc = open_stream_encoder("wav", 24_000)
    assert enc.push(empty) == streamed_header
    assert enc.finish() == b""
    flac = encode_audio(empty, 24_000, "flac")
    assert flac_streaminfo(flac) == (24_000, 0)
    for fmt in ("mp3", "opus", "aac"):
        assert isinstance(encode_audio(empty, 24_000, fmt), bytes)  # must not raise
    for fmt in CODEC_FORMATS:
        enc = open_stream_encoder(fmt, 22_050)
        assert isinstance(enc.push(empty) + enc.finish(), bytes)


# --- stream encoder lifecycle -------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_push_and_finish_after_finish_raise(fmt):
    enc = StreamEncoder(fmt, 24_000)
    enc.push(signal(24_000)[:2400])
    enc.finish()
    with pytest.raises(RuntimeError):
        enc.push(signal(24_000)[:10])
    with pytest.raises(RuntimeError):
        enc.finish()
    closed = StreamEncoder(fmt, 24_000)
    closed.close()
    closed.close()
    with pytest.raises(RuntimeError):
        closed.push(signal(24_000)[:10])


# --- codec formats: durations -------------------------------------------------


def flac_streaminfo(data: bytes) -> tuple[int, int]:
    """(sample rate Hz, total samples) from a FLAC file's STREAMINFO block."""
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0
    packed = int.from_bytes(data[8 + 10 : 8 + 18], "big")
    return packed >> 44, packed & ((1 << 36) - 1)


@pytest.mark.parametrize("rate", RATES)
def test_flac_is_lossless_and_exact(rate):
    whole, streamed = encoded("flac", rate)
    for data in (whole, streamed):
        y, decoded_rate = decode(data)
        assert decoded_rate == rate
        np.testing.assert_array_equal(y, to_int16(signal(rate)))
    assert flac_streaminfo(whole) == (rate, signal(rate).size)
    assert flac_streaminfo(streamed) == (rate, 0)  # 0 = unknown length, allowed by FLAC


@pytest.mark.parametrize("rate", RATES)
def test_mp3_duration_whole_exact_stream_within_one_frame(rate):
    whole, streamed = encoded("mp3", rate)
    assert extra_samples(whole, rate) == 0  # Xing/LAME tag: delay and padding trimmed
    # Streamed: the delay is in the tag, the end padding cannot be known in advance.
    # At 22.05/24 kHz (MPEG-2) an mp3 frame is 576 samples, tighter than the 1152 rule;
    # without the LAME-tag delay this would be 794 / 1103.
    assert 0 <= extra_samples(streamed, rate) < 576
    for data in (whole, streamed):  # starts aligned with the input: delay removed
        y, _ = decode(data)
        assert correlation(y, signal(rate)) > 0.99


@pytest.mark.parametrize("rate", RATES)
def test_opus_duration_exact_at_48k(rate):
    x = signal(rate)
    expected = resample(x, rate, 48_000)
    for data in encoded("opus", rate):
        y, decoded_rate = decode(data)
        assert decoded_rate == 48_000
        assert y.size == expected.size  # pre-skip and end trimming applied
        assert abs(y.size / 48_000 - x.size / rate) * 1000 < 20
        assert correlation(y, expected) > 0.99


def adts_frames(data: bytes) -> list[bytes]:
    """Split an ADTS stream into its frames (13-bit frame length in each header)."""
    frames, at = [], 0
    while at < len(data):
        assert data[at] == 0xFF and data[at + 1] & 0xF6 == 0xF0  # syncword, layer 0
        length = int.from_bytes(data[at + 3 : at + 6], "big") >> 5 & 0x1FFF
        frames.append(data[at : at + length])
        at += length
    return frames


def sine_wave(rate: int, n: int, silent_ms: float = 0) -> np.ndarray:
    """signal()'s 220 Hz sine + noise, n samples, the first ``silent_ms`` set to 0."""
    x = np.resize(signal(rate), n)
    x[: int(rate * silent_ms / 1000)] = 0
    return x


# Lengths around and on frame boundaries, and the 2.5 s signal(): 55,125 / 60,000.
AAC_LENGTHS = (1, 500, 1023, 1024, 1025, 2048, 3000, 5120, None)


@pytest.mark.parametrize("n", AAC_LENGTHS)
@pytest.mark.parametrize("rate", RATES)
def test_aac_decodes_within_one_frame_whole_and_streamed(rate, n):
    """The encoder's priming packet is dropped, so only the last frame's end padding
    remains: N + (-N % 1024), always less than one frame (1024) over."""
    x = signal(rate) if n is None else sine_wave(rate, n)
    whole = encode_audio(x, rate, "aac")
    for chunk in (700, rate // 10):
        assert b"".join(stream("aac", rate, x, chunk)) == whole
    y, decoded_rate = decode(whole, "aac")
    assert decoded_rate == rate
    assert abs(y.size - x.size) < 1024
    assert y.size == x.size + (-x.size) % 1024
    assert len(adts_frames(whole)) == -(-x.size // 1024)  # one frame per 1024 input samples


@pytest.mark.parametrize("rate", RATES)
def test_aac_drops_exactly_the_priming_packet(rate, monkeypatch):
    """FFmpeg's aac delay is one whole frame (first packet pts -1024), and the output is
    the encoder's own ADTS frames less the first: no input samples are dropped."""
    x = signal(rate)
    encoder = AvEncoder("aac", rate, io.BytesIO())
    encoder.encode(x)
    encoder.finish()
    assert encoder.priming_samples == AAC_PRIMING
    dropped = encode_audio(x, rate, "aac")
    monkeypatch.setitem(AV_SPECS, "aac", dataclasses.replace(AV_SPECS["aac"], drop_priming=False))
    kept = encode_audio(x, rate, "aac")
    assert adts_frames(kept)[1:] == adts_frames(dropped)
    y_kept, _ = decode(kept)
    assert y_kept.size == AAC_PRIMING + x.size + (-x.size) % 1024  # what ADTS used to give


@pytest.mark.parametrize("rate", RATES)
def test_aac_starts_aligned_with_the_input(rate):
    """Decoded sample i is input sample i: a signal that starts loud correlates from 0."""
    x = signal(rate)
    for data in encoded("aac", rate):
        y, _ = decode(data)
        assert correlation(y, x) > 0.99
        assert correlation(y[1024:], x[1024:]) > 0.99


@pytest.mark.parametrize("rate", RATES)
def test_aac_quality_of_silent_start(rate):
    """TTS audio starts (near) silent; there losing the priming packet costs nothing.

    Measured with FFmpeg 8 / PyAV 18.1: x[1024:] SNR 43.4 dB at 22,050 Hz and 40.1 dB at
    24,000 Hz (identical to keeping the packet); first 1024 samples within 3e-4 of 0.
    One sample out of alignment, this 220 Hz sine would score about 23 dB.
    """
    x = sine_wave(rate, int(rate * 2.5), silent_ms=50)
    y, _ = decode(encode_audio(x, rate, "aac"))
    assert np.abs(y[:1024]).max() < 2e-3
    assert snr_db(x[1024:], y[1024 : x.size]) > 34


def test_opus_rate_handling():
    assert codec_rate("opus", 24_000) == 24_000
    assert codec_rate("opus", 22_050) == 48_000
    assert codec_rate("mp3", 22_050) == 22_050 and codec_rate("aac", 22_050) == 22_050
    for rate in RATES:
        head = encoded("opus", rate)[0]
        at = head.index(b"OpusHead")
        assert struct.unpack("<I", head[at + 12 : at + 16])[0] == codec_rate("opus", rate)


# --- codec formats: streaming ------------------------------------------------


@pytest.mark.parametrize("fmt", CODEC_FORMATS)
def test_streaming_emits_bytes_before_finish(fmt):
    rate = 24_000
    parts = stream(fmt, rate, np.tile(signal(rate), 2)[: 3 * rate], rate // 2)
    pushes, total = parts[:-1], sum(map(len, parts))
    assert pushes[0] or pushes[1]  # audio within the first second of input
    assert sum(map(len, pushes)) > 0.75 * total


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("fmt", ["opus", "aac"])
def test_streamed_bytes_equal_whole_file(fmt, rate):
    whole, streamed = encoded(fmt, rate)
    assert streamed == whole


@pytest.mark.parametrize("rate", RATES)
def test_streamed_flac_and_mp3_differ_from_whole_only_in_header(rate):
    for fmt, header_end in (("flac", 8 + 34), ("mp3", 20 + 576)):
        whole, streamed = encoded(fmt, rate)
        assert len(streamed) == len(whole)
        assert streamed[header_end:] == whole[header_end:]
        assert streamed[:header_end] != whole[:header_end]


def test_output_is_deterministic():
    x = signal(22_050)
    assert encode_audio(x, 22_050, "opus") == encode_audio(x, 22_050, "opus")


# --- mp3 LAME tag --------------------------------------------------------------


def lame_delay_padding(data: bytes) -> tuple[int, int]:
    at = data.index(b"Lavf", 20)
    value = int.from_bytes(data[at + 21 : at + 24], "big")
    return value >> 12, value & 0xFFF


@pytest.mark.parametrize("rate", RATES)
def test_lame_tag_patch_reproduces_ffmpeg(rate):
    whole, streamed = encoded("mp3", rate)
    assert lame_delay_padding(whole)[0] == LAME_DELAY
    assert lame_delay_padding(streamed) == (LAME_DELAY, 0)
    # Blank FFmpeg's delay and CRC, patch them back: must give FFmpeg's bytes again.
    at = whole.index(b"Lavf", 20)
    buf = bytearray(whole)
    buf[at + 21] = 0
    buf[at + 22] &= 0x0F
    buf[at + 34 : at + 36] = b"\0\0"
    assert patch_encoder_delay(buf, LAME_DELAY)
    assert bytes(buf) == whole


def test_lame_tag_patch_leaves_other_data_alone():
    for data in (b"", b"ID3", bytes(300), encode_audio(signal(24_000), 24_000, "aac")[:400]):
        buf = bytearray(data)
        assert not patch_encoder_delay(buf, LAME_DELAY)
        assert buf == data
    assert MP3_DECODER_DELAY == 529


# --- resample ----------------------------------------------------------------


def test_resample_length_dtype_and_content():
    x = signal(22_050)
    y = resample(x, 22_050, 48_000)
    assert y.dtype == np.float32 and y.size == 120_000
    t = np.arange(y.size) / 48_000
    ref = resample(0.5 * np.sin(2 * np.pi * 220 * np.arange(x.size) / 22_050), 22_050, 48_000)
    assert np.abs(ref[1000:-1000] - 0.5 * np.sin(2 * np.pi * 220 * t[1000:-1000])).max() < 1e-3
    same = resample(x, 24_000, 24_000)
    np.testing.assert_array_equal(same, x)
    assert same is not x
    assert resample(np.zeros(0, np.float32), 22_050, 48_000).size == 0
    with pytest.raises(ValueError):
        resample(x.reshape(1, -1), 22_050, 48_000)


def test_stream_resampler_chunks_equal_whole():
    x = signal(22_050)[:40_009]
    rs = StreamResampler(22_050, 48_000)
    chunked = np.concatenate(
        [rs.push(x[i : i + 1237]) for i in range(0, x.size, 1237)] + [rs.flush()]
    )
    np.testing.assert_array_equal(chunked, resample(x, 22_050, 48_000))


@pytest.mark.parametrize("fmt", ["mp3", "aac", "opus"])
def test_measured_bitrate_matches_spec(fmt):
    rate = 24_000
    whole, _ = encoded(fmt, rate)
    kbps = len(whole) * 8 / (signal(rate).size / rate) / 1000
    assert AV_SPECS[fmt].bit_rate / 1000 == pytest.approx(kbps, rel=0.15)
