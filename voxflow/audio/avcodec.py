"""PyAV (FFmpeg) encode + mux pipeline for flac, mp3, aac and opus.

Settings per format (mono):

=====  =========  ===========  =========  =====================================
fmt    container  codec        bitrate    notes
=====  =========  ===========  =========  =====================================
flac   flac       flac         lossless   s16 input, exactly the WAV samples
mp3    mp3        libmp3lame   64 kb/s    CBR; 22.05/24 kHz are native (MPEG-2)
aac    adts       aac (LC)     64 kb/s    ADTS so it can stream
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
- aac: ADTS has no field for the encoder delay, so decoders output FFmpeg's 1024
  priming samples (near silence) first and the last frame is padded: the output is
  ``1024 + (-N % 1024)`` samples longer, i.e. 1024..2047, more than one AAC frame.
  Very short ADTS files (1-2 frames) can fail FFmpeg's format probe unless the
  reader is told the format is aac.
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


AV_SPECS: dict[str, AvSpec] = {
    "flac": AvSpec("flac", "flac", "s16", None, {"metadata_header_padding": "0"}),
    "mp3": AvSpec("mp3", "libmp3lame", "fltp", 64_000),
    "aac": AvSpec("adts", "aac", "fltp", 64_000),
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
            self._stream = self._container.add_stream(
                self._spec.codec, rate=self.rate, layout="mono"
            )
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
            self._container.mux(packet)
