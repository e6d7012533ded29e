"""Reading audio the way the clients do, and the comparisons every conformance check makes.

Durations are always the client's own reading of what it received: raw PCM at the rate the
client assumes (it reads no header), a WAV by its header, an MP3 by decoding it (PyAV, the
FFmpeg that LiveKit and most players use). Each is compared with the duration of a whole WAV of
the same text from the same server (`Reference`), within `TOLERANCE`: a 22,050 Hz voice
delivered as 24 kHz PCM is 8.1% short, so 3% catches a wrong rate while staying clear of the
models' own variation (see `Reference`). An MP3 may also play up to one MPEG-1 frame longer
(`MP3_FRAME_SAMPLES`, see `codec_allowance_s`).
"""

from __future__ import annotations

import io
import statistics
import struct
from dataclasses import dataclass

import av
import httpx

TOLERANCE = 0.03

# One text per model: Piper is fast and its durations vary from request to request (the
# stochastic duration predictor of VITS; about 1.1% standard deviation at this length), so its
# text is long enough for that to shrink; Kokoro is deterministic but slower, and an unseeded
# streamed request may be cut at a sentence's middle where its first audio would be late (a
# deadline cut adds a pause and re-rendered padding, see README.md), so its text is three short
# sentences that are each too short to cut.
TEXTS = {
    "piper": "Welcome to the conformance check of this speech server. Every client should "
             "hear the same words at the same speed and pitch, whatever format it asks for.",
    "kokoro": "Hello from voxflow. This is a test. The rate must be right.",
}
NATIVE_RATES = {"piper": 22050, "kokoro": 24000}
# How many whole WAVs make a reference, and how many times a check runs the client: Piper's
# durations are averaged (a single pair of draws differs by more than 3% about once in 150),
# Kokoro's are the same every time.
# (16 whole WAVs and 3 client draws: the two means differ with a standard deviation of about
# 0.75% of the length, so 3% is 4 of them).
REFERENCE_DRAWS = {"piper": 16, "kokoro": 1}
CLIENT_DRAWS = {"piper": 3, "kokoro": 1}
MODELS = ("piper", "kokoro")
# Samples in an MPEG-1 Layer III frame. A streamed MP3 cannot carry its end padding (the
# LAME tag is sent before the end is known), so it decodes up to one frame long
# (voxflow/audio/avcodec.py); LiveKit's decoder of an SSE-carried MP3 plays a little more
# still (Kokoro, deterministic: 4.656 s against the WAV's 4.620 s, 864 samples at 24 kHz,
# where FFmpeg on the same bytes gives 4.634 s). Within one such frame is the codec, not
# the server.
MP3_FRAME_SAMPLES = 1152


def codec_allowance_s(response_format: str, model: str) -> float:
    """Seconds a client's reading of `response_format` from `model` may exceed the WAV's on
    top of TOLERANCE: one MP3 frame at the voice's rate for mp3, 0 for wav and pcm."""
    return MP3_FRAME_SAMPLES / NATIVE_RATES[model] if response_format == "mp3" else 0.0


@dataclass(frozen=True)
class Wav:
    """What a WAV header says, and the duration it gives the data that follows."""

    format_tag: int
    channels: int
    rate: int
    bits: int
    riff_size: int
    data_size_field: int
    data_bytes: int

    @property
    def seconds(self) -> float:
        """Data bytes over bytes per second (the sizes in the header are not trusted: a
        streamed WAV says 0xFFFFFFFF, unknown)."""
        return self.data_bytes / (self.rate * self.channels * self.bits // 8)


def parse_wav(data: bytes) -> Wav:
    """Walk the RIFF chunks as a streaming player does: fmt, then everything after the data
    chunk's header is audio (its size may be 0xFFFFFFFF for a streamed file)."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", f"not a WAV: {data[:12]!r}"
    riff_size = struct.unpack("<I", data[4:8])[0]
    pos, fmt = 12, None
    while pos + 8 <= len(data):
        chunk_id, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if chunk_id == b"fmt ":
            fmt = struct.unpack("<HHIIHH", data[pos + 8:pos + 24])
        elif chunk_id == b"data":
            assert fmt is not None, "data chunk before fmt"
            tag, channels, rate, _, _, bits = fmt
            body = len(data) - pos - 8
            return Wav(tag, channels, rate, bits, riff_size, size,
                       body if size == 0xFFFFFFFF else min(size, body))
        pos += 8 + size + (size & 1)
    raise AssertionError("WAV without a data chunk")


def is_mp3(data: bytes) -> bool:
    """An ID3 tag or an MPEG audio frame sync at the start, as a browser sniffs it."""
    return data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0)


def decoded_seconds(data: bytes) -> tuple[float, int]:
    """(seconds, sample rate) of an encoded file (MP3, Ogg, FLAC...) decoded by FFmpeg."""
    with av.open(io.BytesIO(data)) as container:
        samples, rate = 0, 0
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    assert rate, "no audio frames decoded"
    return samples / rate, rate


def assert_duration(seconds: float, reference: float, what: str,
                    allowance_s: float = 0.0) -> None:
    """`seconds` within TOLERANCE of `reference`, or up to `allowance_s` (the codec's own
    padding, `codec_allowance_s`) over its upper bound, with both in the message."""
    ratio = seconds / reference
    print(f"duration {what}: {seconds:.3f} s, whole WAV {reference:.3f} s, ratio {ratio:.4f}")
    if seconds > reference:  # the codec's padding only ever adds
        ratio = max(1.0, (seconds - allowance_s) / reference)
    assert abs(ratio - 1) <= TOLERANCE, (
        f"{what}: the client plays {seconds:.3f} s, a whole WAV of the same text is "
        f"{reference:.3f} s (ratio {ratio:.3f} after {allowance_s:.3f} s of codec padding, "
        f"allowed 1 +- {TOLERANCE}): "
        f"{'a wrong sample rate?' if abs(ratio - 1) > 0.06 else ''}")


def assert_openai_error(response: httpx.Response, status: int, message_part: str) -> dict:
    """The response is `status` with OpenAI's `{"error": {message, type, param, code}}` and
    a message containing `message_part`; returns the error object."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert message_part in error["message"], error
    return error


class Reference:
    """Durations of whole WAVs (`"response_format": "wav", "stream": false`, read from the
    header) of `TEXTS[model]` with voice `alloy`, from the server under test; the mean of
    `REFERENCE_DRAWS[model]` requests, computed once per model."""

    def __init__(self, url: str):
        self.url = url
        self._seconds: dict[str, float] = {}

    def seconds(self, model: str) -> float:
        """The reference duration of `model`'s text, in seconds."""
        if model not in self._seconds:
            draws = []
            for _ in range(REFERENCE_DRAWS[model]):
                response = httpx.post(
                    f"{self.url}/v1/audio/speech", timeout=120,
                    json={"model": model, "voice": "alloy", "input": TEXTS[model],
                          "response_format": "wav", "stream": False})
                assert response.status_code == 200, response.text
                assert response.headers["content-type"] == "audio/wav"
                wav = parse_wav(response.content)
                assert (wav.format_tag, wav.channels, wav.bits) == (1, 1, 16), wav
                assert wav.rate == NATIVE_RATES[model], wav
                assert wav.data_size_field == wav.data_bytes, "a whole WAV has exact sizes"
                draws.append(wav.seconds)
            self._seconds[model] = statistics.mean(draws)
        return self._seconds[model]
