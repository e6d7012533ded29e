"""PyAV (FFmpeg) encode + mux pipeline for flac, mp3, aac and opus.

Settings per format (mono):

=====  =========  ===========  =========  =====================================
fmt    container  codec        bitrate    notes
=====  =========  ===========  =========  =====================================
flac   flac       flac         lossless   s16 input, exactly the WAV samples
mp3    mp3        libmp3lame   64 kb/s    CBR; 22.05/24 kHz are native (MPEG-2)
aac    adts       aac (LC)     64 kb/s    ADTS so it can stream; priming packet dropped
opus   ogg        libopus      32 kb/s    VBR target; 8/12/16/24/48 kHz native
=====  =========  ===========  =========  =====================================

A sample rate the codec cannot take (e.g. 22,050 Hz for opus) is resampled with soxr
to :data:`FALLBACK_RATE_HZ`; no samples are dropped. Output is bit-exact
(``fflags=+bitexact``), so the same input always gives the same bytes.

Decoded length vs. input (FFmpeg decoder, measured at 22,050 and 24,000 Hz):

- flac: exact, whole and streamed.
- mp3: whole file exact (the Xing/LAME frame carries delay and padding). Streamed:
  the LAME tag carries the delay (see :mod:`voxflow.audio.lametag`) but not the end
  padding, so it decodes 0..622 samples long (< 1 MPEG-1 frame of 1152).
- opus: exact at the codec rate (Ogg pre-skip and end granule); decoders output
  48 kHz.
- aac: ``N + (-N % 1024)``, i.e. 0..1023 samples long (end padding of the last
  frame), whole and streamed; see below. Very short ADTS files (1-2 frames) can fail
  FFmpeg's format probe unless the reader is told the format is aac.

AAC priming. FFmpeg's aac encoder delays its output by exactly one frame, 1024
samples (``initial_padding``; PyAV does not expose it and ``codec_context.delay`` reads
0, but the first packet's pts is -1024). Packet ``k`` (pts ``1024*(k-1)``) decodes to
input ``[1024*(k-1), 1024*k)``, so packet 0 decodes to 1024 samples of silence. MP4
would signal that with an edit list, ADTS (the only AAC container that streams over
plain HTTP) has no field for it and decoders play it, which made aac decode 1024..2047
samples long: more than the one codec frame the product allows. So the encoder's
first packet, whose whole duration is before time 0, is not written
(:attr:`AvSpec.drop_priming`), in the whole-file and the streamed path alike (both
go through :class:`AvEncoder`); no input samples are dropped or resampled.

Cost: packet 0's MDCT window also covers input ``[0, 1024)``, and the decoder needs
its second half to cancel the time-domain aliasing of packet 1's first half. Without
it, the first 1024 decoded samples (46 ms at 22,050 Hz) are the input faded in from
zero and aliased; the error there is of the order of the input itself. Measured
(error RMS over those 1024 samples, kept -> dropped packet): a 0.5 sine starting at
sample 0, -20 -> -11 dBFS (SNR 11 -> 2 dB); after 50 ms of silence, bit-identical;
Piper joe utterances starting near silent (-62..-79 dBFS), unchanged within 1 dB;
one starting on an "s" (-21.5 dBFS), -31 -> -28 dBFS. In exchange the decoded output
starts with the input instead of a frame of silence. Samples from 1024 on decode
exactly as before, except that the decoder's perceptual-noise-substitution random
generator is one frame's draws behind, so noise-filled bands get other (equally
valid) noise for a while; SNR after sample 1024 changed by at most 0.04 dB.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import av
import numpy as np

from voxflow.audio.resample import StreamResampler
from voxflow.audio.samples import to_float, to_int16

FALLBACK_RATE_HZ = 48_000
OGG_PAGE_MS = 100  # an Ogg page is flushed to the client at least every 100 ms of audio


@dataclass(frozen=True)
class AvSpec:
    """How one format is produced with PyAV."""

    container: str
    codec: str
    sample_fmt: str  # PyAV sample format fed to the encoder
    bit_rate: int | None  # bits/s; None for lossless
    container_options: dict[str, str] = field(default_factory=dict)
    # Drop the packets that hold only encoder priming (aac; see module docstring).
    drop_priming: bool = False


AV_SPECS: dict[str, AvSpec] = {
    "flac": AvSpec("flac", "flac", "s16", None, {"metadata_header_padding": "0"}),
    "mp3": AvSpec("mp3", "libmp3lame", "fltp", 64_000),
    "aac": AvSpec("adts", "aac", "fltp", 64_000, drop_priming=True),
    "opus": AvSpec("ogg", "libopus", "flt", 32_000, {"page_duration": str(OGG_PAGE_MS * 1000)}),
}


def codec_rate(fmt: str, sample_rate: int) -> int:
    """Sample rate (Hz) the encoder for ``fmt`` runs at for input at ``sample_rate`` Hz."""
    rates = av.codec.Codec(AV_SPECS[fmt].codec, "w").audio_rates
    if not rates or sample_rate in rates:
        return sample_rate
    return FALLBACK_RATE_HZ


class AvEncoder:
    """Encode mono float32 audio into one container, written to a file-like ``sink``."""

    def __init__(self, fmt: str, sample_rate: int, sink: Any) -> None:
        """Open the container and write its header to ``sink``.

        Args:
            fmt: one of :data:`AV_SPECS`.
            sample_rate: input rate, Hz (already validated).
            sink: file-like object with ``write`` (and ``seek``/``tell`` if seekable).
        """
        self._spec = AV_SPECS[fmt]
        self.rate = codec_rate(fmt, sample_rate)
        self._resampler = None
        if self.rate != sample_rate:
            self._resampler = StreamResampler(sample_rate, self.rate)
        options = {**self._spec.container_options, "fflags": "+bitexact"}
        self._container = av.open(sink, "w", format=self._spec.container, options=options)
        try:
            stream = self._container.add_stream(self._spec.codec, rate=self.rate, layout="mono")
            assert isinstance(stream, av.audio.stream.AudioStream)
            self._stream = stream
            self._stream.codec_context.format = self._spec.sample_fmt
            if self._spec.bit_rate:
                self._stream.bit_rate = self._spec.bit_rate
            self._container.start_encoding()
        except Exception:
            self._container.close()
            raise
        self._pts = 0
        self.priming_samples: int | None = None  # from the first packet, at self.rate

    def encode(self, samples: np.ndarray) -> None:
        """Encode float32 ``(N,)`` samples at the input rate; output goes to the sink."""
        if self._resampler is not None:
            samples = self._resampler.push(samples)
        self._encode_frame(samples)

    def finish(self) -> None:
        """Flush resampler and encoder, write the trailer and close the container."""
        if self._resampler is not None:
            self._encode_frame(self._resampler.flush())
        self._mux(self._stream.encode(None))
        self._container.close()

    def abort(self) -> None:
        """Release FFmpeg resources without flushing the encoder."""
        try:
            self._container.close()
        except Exception:  # nothing useful to do with a failed close
            pass

    def _encode_frame(self, samples: np.ndarray) -> None:
        if samples.size == 0:
            return
        if self._spec.sample_fmt == "s16":
            data = to_int16(samples)[np.newaxis]
        else:
            data = to_float(samples)[np.newaxis]
        frame = av.AudioFrame.from_ndarray(data, format=self._spec.sample_fmt, layout="mono")
        frame.sample_rate = self.rate
        frame.time_base = Fraction(1, self.rate)
        frame.pts = self._pts
        self._pts += samples.size
        self._mux(self._stream.encode(frame))

    def _mux(self, packets: Iterable[av.Packet]) -> None:
        for packet in packets:
            if self.priming_samples is None and packet.pts is not None:
                self.priming_samples = -int(packet.pts * packet.time_base * self.rate)
            if self._spec.drop_priming and _ends_by_time_zero(packet):
                continue
            self._container.mux(packet)


def _ends_by_time_zero(packet: av.Packet) -> bool:
    """True if all of ``packet``'s samples are encoder priming (before the input starts)."""
    pts, duration = packet.pts, packet.duration
    return pts is not None and duration is not None and duration > 0 and pts + duration <= 0
