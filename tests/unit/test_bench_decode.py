"""Incremental decoders: samples come out as bytes arrive, headers and framing never count."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from voxflow.audio.encode import encode_audio, pcm_bytes
from voxflow.audio.wav import wav_header
from voxflow.bench.decode import (
    DecodeError,
    StreamError,
    WavDecoder,
    make_decoder,
)

RATE = 22050


def tone(seconds: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def feed_in_pieces(decoder, data: bytes, size: int) -> list[int]:
    """Feed `data` `size` bytes at a time; returns the samples each feed produced, then finish."""
    counts = [decoder.feed(data[i:i + size]).size for i in range(0, len(data), size)]
    return [*counts, decoder.finish().size]


def test_pcm_keeps_an_odd_byte_for_the_next_read():
    data = pcm_bytes(tone())
    decoder = make_decoder("pcm", RATE)
    counts = feed_in_pieces(decoder, data, 101)  # odd piece size: samples split across reads
    assert sum(counts) == len(data) // 2
    assert counts[0] == 50


def test_pcm_ending_mid_sample_is_a_decode_error():
    decoder = make_decoder("pcm", RATE)
    decoder.feed(b"\x01\x02\x03")
    with pytest.raises(DecodeError):
        decoder.finish()


def test_wav_header_produces_no_samples_and_gives_the_rate():
    audio = tone()
    data = wav_header(RATE, None) + pcm_bytes(audio)  # a streamed WAV (unknown sizes)
    decoder = WavDecoder()
    assert decoder.feed(data[:44]).size == 0
    assert decoder.sample_rate == RATE
    out = decoder.feed(data[44:])
    assert out.size == audio.size
    assert np.abs(out - audio).max() < 1e-4


def test_wav_split_inside_the_header_and_with_extra_chunks():
    # A LIST chunk before data, as some writers emit; fed three bytes at a time.
    body = pcm_bytes(tone(0.05))
    fmt = wav_header(RATE, len(body))[12:36]
    extra = b"LIST" + (4).to_bytes(4, "little") + b"INFO"
    data = b"RIFF" + (4 + len(fmt) + len(extra) + 8 + len(body)).to_bytes(4, "little") + \
        b"WAVE" + fmt + extra + b"data" + len(body).to_bytes(4, "little") + body
    counts = feed_in_pieces(WavDecoder(), data, 3)
    assert sum(counts) == len(body) // 2


def test_wav_rejects_other_bodies():
    with pytest.raises(DecodeError, match="RIFF"):
        WavDecoder().feed(b'{"error": "not audio at all"}')
    with pytest.raises(DecodeError, match="header"):
        decoder = WavDecoder()
        decoder.feed(b"RIFF")
        decoder.finish()


def sse(*events: dict) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)


def test_sse_deltas_decode_and_done_is_required():
    audio = pcm_bytes(tone(0.1))
    half = len(audio) // 2 + 1  # odd split: the pcm decoder carries a byte across events
    body = sse({"type": "speech.audio.delta", "audio": base64.b64encode(audio[:half]).decode()},
               {"type": "speech.audio.delta", "audio": base64.b64encode(audio[half:]).decode()},
               {"type": "speech.audio.done", "usage": {}})
    counts = feed_in_pieces(make_decoder("pcm", RATE, sse=True), body, 7)
    assert sum(counts) == len(audio) // 2

    no_done = make_decoder("pcm", RATE, sse=True)
    no_done.feed(body[: body.rindex(b"data: ")])
    with pytest.raises(DecodeError, match="without speech.audio.done"):
        no_done.finish()
    cut = make_decoder("pcm", RATE, sse=True)
    cut.feed(body[: body.rindex(b"data: ") - 20])
    with pytest.raises(DecodeError, match="middle of an event"):
        cut.finish()


def test_sse_error_event_raises_stream_error():
    decoder = make_decoder("pcm", RATE, sse=True)
    with pytest.raises(StreamError, match="boom"):
        decoder.feed(sse({"type": "error", "error": {"message": "boom"}}))


@pytest.mark.parametrize("fmt", ["flac", "mp3"])
def test_compressed_formats_decode_incrementally_to_about_the_right_length(fmt):
    audio = tone(0.5)
    data = encode_audio(audio, RATE, fmt)
    decoder = make_decoder(fmt, RATE)
    counts = feed_in_pieces(decoder, data, 1500)
    assert decoder.sample_rate == RATE
    assert abs(sum(counts) - audio.size) <= 1152
    assert counts[-1] > 0  # the held-back frame comes out at the end
