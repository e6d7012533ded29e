"""Incremental decoders: response body bytes in, audio samples out, as the bytes arrive.

Each decoder's `feed(data)` returns the float32 samples that `data` completed (possibly none:
a header, half a sample, SSE framing), and `finish()` returns what is left at the end of the
body and checks that nothing is dangling. Counting samples, not bytes, is what makes time to
first audio exclude headers and framing.

- ``pcm``: 16-bit little-endian mono; an odd byte waits for its partner.
- ``wav``: RIFF header parsed (any chunk order; the sizes of a streamed WAV are ignored), then as
  pcm. The sample rate comes from the header.
- compressed (``mp3``, ``flac``, ``aac``, ``opus``): the bytes so far are decoded again with PyAV
  on each feed and the samples beyond those already reported are returned, holding back one
  codec frame until the end (a partial frame may decode short). This costs client CPU that grows
  with the body; prefer pcm for timing.
- `SseDecoder` wraps one of the above for ``stream_format: "sse"`` bodies.
"""

from __future__ import annotations

import base64
import io
import json
import struct

import numpy as np

PCM_SCALE = 32767.0
_HOLD_BACK_SAMPLES = 2048  # longer than one mp3 (1152), aac (1024) or opus (960) frame
_CONTAINERS = {"mp3": "mp3", "flac": "flac", "aac": "aac", "opus": "ogg"}


class DecodeError(Exception):
    """The body is not valid audio of the expected format."""


class StreamError(Exception):
    """The server reported an error inside a streamed (SSE) body."""


def pcm16_to_float(data: bytes) -> np.ndarray:
    """16-bit little-endian PCM bytes (even length) -> (N,) float32 in [-1, 1]."""
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / PCM_SCALE


class PcmDecoder:
    """Raw 16-bit little-endian mono PCM at a known `sample_rate` (Hz)."""

    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate
        self._rest = b""

    def feed(self, data: bytes) -> np.ndarray:
        data = self._rest + data
        cut = len(data) - len(data) % 2
        self._rest = data[cut:]
        return pcm16_to_float(data[:cut])

    def finish(self) -> np.ndarray:
        if self._rest:
            raise DecodeError("pcm body ends in the middle of a sample")
        return np.zeros(0, np.float32)


class WavDecoder:
    """A 16-bit PCM mono WAV; `sample_rate` is 0 until the header has been read."""

    def __init__(self) -> None:
        self.sample_rate = 0
        self._head = b""
        self._pcm: PcmDecoder | None = None

    def feed(self, data: bytes) -> np.ndarray:
        if self._pcm is not None:
            return self._pcm.feed(data)
        self._head += data
        parsed = _parse_wav_header(self._head)
        if parsed is None:
            return np.zeros(0, np.float32)
        self.sample_rate, offset = parsed
        self._pcm = PcmDecoder(self.sample_rate)
        rest, self._head = self._head[offset:], b""
        return self._pcm.feed(rest)

    def finish(self) -> np.ndarray:
        if self._pcm is None:
            raise DecodeError("wav body ends before its header is complete")
        return self._pcm.finish()


def _parse_wav_header(head: bytes) -> tuple[int, int] | None:
    """(sample rate, offset of the first sample) once `head` holds the header, else None.

    Raises:
        DecodeError: not RIFF/WAVE, or not 16-bit PCM mono.
    """
    if len(head) < 12:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise DecodeError("body is not a RIFF/WAVE file")
    pos, rate = 12, 0
    while len(head) >= pos + 8:
        kind, size = head[pos:pos + 4], struct.unpack("<I", head[pos + 4:pos + 8])[0]
        if kind == b"data":
            if not rate:
                raise DecodeError("wav data chunk before its fmt chunk")
            return rate, pos + 8
        if len(head) < pos + 8 + size:
            return None
        if kind == b"fmt ":
            fmt_tag, channels, rate = struct.unpack("<HHI", head[pos + 8:pos + 16])
            bits = struct.unpack("<H", head[pos + 22:pos + 24])[0]
            if (fmt_tag, channels, bits) != (1, 1, 16):
                raise DecodeError(f"wav is not 16-bit PCM mono (format {fmt_tag}, "
                                  f"{channels} channels, {bits} bits)")
        pos += 8 + size + size % 2
    return None


class CompressedDecoder:
    """mp3, flac, aac (ADTS) or opus (Ogg), decoded with PyAV; see the module docstring."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.sample_rate = 0
        self._data = bytearray()
        self._reported = 0

    def feed(self, data: bytes) -> np.ndarray:
        self._data += data
        try:
            audio = self._decode()
        except DecodeError:  # not enough bytes to probe yet
            return np.zeros(0, np.float32)
        return self._take(audio, len(audio) - _HOLD_BACK_SAMPLES)

    def finish(self) -> np.ndarray:
        audio = self._decode()
        return self._take(audio, len(audio))

    def _take(self, audio: np.ndarray, upto: int) -> np.ndarray:
        if upto <= self._reported:
            return np.zeros(0, np.float32)
        new = audio[self._reported:upto]
        self._reported = upto
        return new

    def _decode(self) -> np.ndarray:
        import av

        try:
            box = av.open(io.BytesIO(bytes(self._data)), mode="r", format=_CONTAINERS[self.fmt])
            with box:
                frames = [f.to_ndarray() for f in box.decode(audio=0)]
                self.sample_rate = box.streams.audio[0].codec_context.sample_rate
        except (av.FFmpegError, IndexError) as exc:
            raise DecodeError(f"cannot decode {self.fmt}: {exc}") from None
        if not frames:
            return np.zeros(0, np.float32)
        audio = np.concatenate([f.reshape(f.shape[0], -1)[0] for f in frames])
        if audio.dtype == np.int16:
            return audio.astype(np.float32) / PCM_SCALE
        return audio.astype(np.float32)


class SseDecoder:
    """``data: {json}`` events: `speech.audio.delta` bytes go to `inner`; an error event raises."""

    def __init__(self, inner):
        self.inner = inner
        self._line = b""
        self.done = False

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    def feed(self, data: bytes) -> np.ndarray:
        self._line += data
        *lines, self._line = self._line.split(b"\n")
        out = [self._event(line.strip()) for line in lines if line.startswith(b"data:")]
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def finish(self) -> np.ndarray:
        if self._line.strip():
            raise DecodeError("event stream ended in the middle of an event")
        if not self.done:
            raise DecodeError("event stream ended without speech.audio.done")
        return self.inner.finish()

    def _event(self, line: bytes) -> np.ndarray:
        try:
            event = json.loads(line[5:])
        except ValueError:
            raise DecodeError(f"malformed server-sent event: {line[:80]!r}") from None
        kind = event.get("type")
        if kind == "speech.audio.delta":
            return self.inner.feed(base64.b64decode(event.get("audio", "")))
        if kind == "speech.audio.done":
            self.done = True
        elif kind == "error":
            raise StreamError(str(event.get("error", {}).get("message", "error event")))
        return np.zeros(0, np.float32)


def make_decoder(fmt: str, sample_rate: int, sse: bool = False):
    """A decoder for a body of audio format `fmt` (pcm needs `sample_rate` in Hz)."""
    inner: PcmDecoder | WavDecoder | CompressedDecoder
    if fmt == "pcm":
        inner = PcmDecoder(sample_rate)
    elif fmt == "wav":
        inner = WavDecoder()
    elif fmt in _CONTAINERS:
        inner = CompressedDecoder(fmt)
    else:
        raise ValueError(f"no decoder for audio format {fmt!r}")
    return SseDecoder(inner) if sse else inner
