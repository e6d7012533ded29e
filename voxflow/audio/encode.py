"""Whole-file encoding of mono float audio to each of :data:`FORMATS`."""

from __future__ import annotations

import numpy as np

from voxflow.audio.formats import check_format
from voxflow.audio.resample import resample
from voxflow.audio.samples import check_sample_rate, check_samples, to_int16
from voxflow.audio.sink import FileSink
from voxflow.audio.wav import wav_header

__all__ = ["encode_audio", "pcm_bytes", "to_int16"]


def pcm_bytes(samples: np.ndarray) -> bytes:
    """Raw 16-bit little-endian PCM of float ``(N,)`` samples (2*N bytes), see :func:`to_int16`.

    Raises:
        ValueError: ``samples`` is not a 1-D floating point numpy array.
    """
    return to_int16(samples).astype("<i2", copy=False).tobytes()


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str,
                 out_rate: int | None = None) -> bytes:
    """Encode a whole mono signal as one complete file.

    Args:
        samples: float ``(N,)``, nominal range [-1, 1] (clipped); ``N`` may be 0.
        sample_rate: rate of ``samples`` in Hz.
        out_rate: rate of the file in Hz (resampled with soxr, :mod:`voxflow.audio.resample`,
            the same samples as :class:`~voxflow.audio.stream.StreamEncoder` gives in chunks);
            None: ``sample_rate``. A rate the codec does not take is the codec's fallback
            (:func:`voxflow.audio.avcodec.codec_rate`); callers check it first
            (:func:`voxflow.audio.rates.check_requested_rate`).
        fmt: one of :data:`voxflow.audio.formats.FORMATS`:
            ``pcm`` raw 16-bit LE mono; ``wav`` 44-byte header with exact RIFF/data
            sizes + 16-bit PCM; ``flac``/``mp3``/``aac``/``opus`` via PyAV (see
            :mod:`voxflow.audio.avcodec` for codecs, bitrates, rate handling and the
            decoded length of each; ``aac`` decodes 0..1023 samples long, its first
            1024 samples less exact because the encoder's priming packet is dropped).

    Returns:
        The file's bytes. Empty input gives a valid empty ``wav``/``pcm``/``flac``; for
        the lossy formats it gives just the container header (``aac``: no bytes).

    Raises:
        ValueError: unknown ``fmt``; ``samples`` not a 1-D float array; bad ``sample_rate``.
    """
    fmt = check_format(fmt)
    rate = check_sample_rate(sample_rate)
    x = check_samples(samples)
    if out_rate is not None and check_sample_rate(out_rate) != rate:
        x, rate = resample(x, rate, out_rate), out_rate
    if fmt == "pcm":
        return pcm_bytes(x)
    if fmt == "wav":
        data = pcm_bytes(x)
        return wav_header(rate, len(data)) + data
    from voxflow.audio.avcodec import AvEncoder  # PyAV: only for flac, mp3, aac, opus

    sink = FileSink()
    encoder = AvEncoder(fmt, rate, sink)
    try:
        encoder.encode(x)
        encoder.finish()
    except BaseException:
        encoder.abort()
        raise
    return sink.getvalue()


def wav_with_comment(samples: np.ndarray, sample_rate: int, comment: str) -> bytes:
    """A 16-bit PCM mono WAV like `encode_audio` (same samples), plus a LIST/INFO chunk whose
    ICMT (comment) is `comment`, written by libsndfile (soundfile's ``comment``).

    Args:
        samples: float ``(N,)``, nominal range [-1, 1] (clipped, as `pcm_bytes`).
        sample_rate: Hz.
        comment: text for ICMT (e.g. that the audio is noise from random weights).
    Raises:
        ValueError: ``samples`` not a 1-D float array; bad ``sample_rate``.
    """
    import io

    import soundfile

    rate = check_sample_rate(sample_rate)
    pcm = to_int16(check_samples(samples)).astype("<i2", copy=False)
    out = io.BytesIO()
    with soundfile.SoundFile(out, "w", rate, 1, "PCM_16", format="WAV") as f:
        f.comment = comment
        f.write(pcm)
    return out.getvalue()
