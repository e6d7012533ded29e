"""Incremental encoding for streamed HTTP responses."""

from __future__ import annotations

import numpy as np

from voxflow.audio.encode import pcm_bytes
from voxflow.audio.formats import check_format
from voxflow.audio.lametag import MP3_DECODER_DELAY, patch_encoder_delay
from voxflow.audio.resample import StreamResampler
from voxflow.audio.samples import check_sample_rate, check_samples
from voxflow.audio.sink import StreamSink
from voxflow.audio.wav import wav_header


class _PcmBackend:
    def push(self, x: np.ndarray) -> bytes:
        return pcm_bytes(x)

    def finish(self) -> bytes:
        return b""

    def close(self) -> None:
        pass


class _WavBackend(_PcmBackend):
    """Header with unknown sizes (0xFFFFFFFF) first, then raw frames."""

    def __init__(self, sample_rate: int) -> None:
        self._header: bytes | None = wav_header(sample_rate, None)

    def _take_header(self) -> bytes:
        header, self._header = self._header or b"", None
        return header

    def push(self, x: np.ndarray) -> bytes:
        return self._take_header() + pcm_bytes(x)

    def finish(self) -> bytes:
        return self._take_header()


class _AvBackend:
    def __init__(self, fmt: str, sample_rate: int, sink: StreamSink | None = None) -> None:
        from voxflow.audio.avcodec import AvEncoder  # PyAV: only for flac, mp3, aac, opus

        self._sink = sink or StreamSink()
        self._encoder = AvEncoder(fmt, sample_rate, self._sink)

    def push(self, x: np.ndarray) -> bytes:
        self._encoder.encode(x)
        return self._take(final=False)

    def finish(self) -> bytes:
        self._encoder.finish()
        return self._take(final=True)

    def close(self) -> None:
        self._encoder.abort()

    def _take(self, final: bool) -> bytes:
        return self._sink.take()


class _Mp3Backend(_AvBackend):
    """mp3 whose first (Xing/LAME) frame carries the encoder delay; see lametag."""

    def __init__(self, sample_rate: int) -> None:
        super().__init__("mp3", sample_rate, StreamSink(pretend_seekable=True))
        self._tag_done = False

    def _take(self, final: bool) -> bytes:
        if not self._tag_done:
            priming = self._encoder.priming_samples
            if priming is None and not final:
                return b""  # hold the header until the delay is known (first packet)
            if priming is not None:
                patch_encoder_delay(self._sink.pending, priming - MP3_DECODER_DELAY)
            self._tag_done = True
        return self._sink.take()


class StreamEncoder:
    """Encode one streamed response chunk by chunk.

    Concatenating the return values of every :meth:`push` and of :meth:`finish` gives a
    complete file: for ``pcm`` the same bytes as :func:`~voxflow.audio.encode.encode_audio`;
    for ``wav`` a 44-byte header with RIFF and data sizes 0xFFFFFFFF (length unknown)
    followed by the same sample bytes; for the codec formats a stream that decodes to
    the same audio, with the same length limits as the whole file except ``mp3``,
    which decodes up to ~600 samples (< 1152) long because its end padding cannot be
    signalled in advance (see :mod:`voxflow.audio.avcodec`). Bytes come out as soon as
    the codec and container have them, so clients can start playing before
    :meth:`finish`.
    """

    def __init__(self, fmt: str, sample_rate: int, out_rate: int | None = None) -> None:
        """Start a stream of ``fmt`` taking audio at ``sample_rate`` Hz.

        ``out_rate`` (Hz; None: ``sample_rate``) is the rate of the stream: the audio is
        resampled chunk by chunk with soxr, giving the same samples as
        :func:`~voxflow.audio.encode.encode_audio` does for the whole; soxr holds back the
        last ~40 ms of each chunk (its filter's delay) until the next chunk or :meth:`finish`.

        Raises:
            ValueError: unknown ``fmt`` (message lists the supported ones) or bad rate.
        """
        self.fmt = check_format(fmt)
        self.sample_rate = check_sample_rate(sample_rate)
        self.out_rate = self.sample_rate if out_rate is None else check_sample_rate(out_rate)
        self._resampler: StreamResampler | None = None
        if self.out_rate != self.sample_rate:
            self._resampler = StreamResampler(self.sample_rate, self.out_rate)
        self._done = False
        if self.fmt == "pcm":
            self._backend: _PcmBackend | _AvBackend = _PcmBackend()
        elif self.fmt == "wav":
            self._backend = _WavBackend(self.out_rate)
        elif self.fmt == "mp3":
            self._backend = _Mp3Backend(self.out_rate)
        else:
            self._backend = _AvBackend(self.fmt, self.out_rate)

    def push(self, samples: np.ndarray) -> bytes:
        """Encode the next chunk.

        Args:
            samples: float ``(N,)`` at ``sample_rate`` Hz, nominal range [-1, 1]; may be empty.

        Returns:
            Encoded bytes ready now; may be ``b""`` while the codec is buffering.

        Raises:
            ValueError: ``samples`` is not a 1-D floating point numpy array.
            RuntimeError: the stream was already finished or closed.
        """
        self._check_open()
        x = check_samples(samples)
        if self._resampler is not None:
            x = self._resampler.push(x)
        return self._backend.push(x)

    def finish(self) -> bytes:
        """Flush the codec and container and return the last bytes.

        Raises:
            RuntimeError: the stream was already finished or closed.
        """
        self._check_open()
        tail = b""
        if self._resampler is not None:
            tail = self._backend.push(self._resampler.flush())
        self._done = True
        return tail + self._backend.finish()

    def close(self) -> None:
        """Abandon the stream (e.g. the client went away) and free codec resources.

        Safe to call at any time, more than once; after it, push/finish raise.
        """
        if not self._done:
            self._done = True
            self._backend.close()

    def __enter__(self) -> StreamEncoder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError(f"{self.fmt} stream encoder is already finished")


def open_stream_encoder(fmt: str, sample_rate: int, out_rate: int | None = None) -> StreamEncoder:
    """Return a new :class:`StreamEncoder` for ``fmt`` taking audio at ``sample_rate`` Hz and
    delivering it at ``out_rate`` Hz (None: ``sample_rate``).

    Raises:
        ValueError: unknown ``fmt`` (message lists the supported ones) or bad rate.
    """
    return StreamEncoder(fmt, sample_rate, out_rate)
