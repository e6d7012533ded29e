"""Sample-rate conversion with soxr (whole signal or streamed in chunks)."""

from __future__ import annotations

import numpy as np
import soxr

from voxflow.audio.samples import check_sample_rate, check_samples

QUALITY = "HQ"


def resample(samples: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Resample mono audio with soxr ("HQ" quality).

    Args:
        samples: shape ``(N,)``, floating dtype.
        from_hz: sample rate of ``samples``, Hz.
        to_hz: wanted sample rate, Hz.

    Returns:
        float32 array of shape ``(M,)`` with ``M ~= N * to_hz / from_hz``; a float32 copy
        of the input when the rates are equal.

    Raises:
        ValueError: ``samples`` is not a 1-D float array, or a rate is not a positive int.
    """
    x = check_samples(samples)
    src, dst = check_sample_rate(from_hz), check_sample_rate(to_hz)
    if src == dst:
        return x.copy()
    if x.size == 0:
        return np.zeros(0, dtype=np.float32)
    return np.asarray(soxr.resample(x, src, dst, quality=QUALITY), dtype=np.float32)


class StreamResampler:
    """Chunked resampling; the concatenated output equals :func:`resample` of the whole."""

    def __init__(self, from_hz: int, to_hz: int) -> None:
        """Create a resampler from ``from_hz`` to ``to_hz`` (Hz).

        Raises:
            ValueError: a rate is not a positive int.
        """
        src, dst = check_sample_rate(from_hz), check_sample_rate(to_hz)
        self._soxr = soxr.ResampleStream(src, dst, 1, dtype="float32", quality=QUALITY)

    def push(self, samples: np.ndarray) -> np.ndarray:
        """Resample the next float32 ``(N,)`` chunk; returns the float32 output ready so far."""
        x = check_samples(samples)
        return np.asarray(self._soxr.resample_chunk(x, last=False), dtype=np.float32)

    def flush(self) -> np.ndarray:
        """Return the remaining float32 output; call once, at the end."""
        empty = np.zeros(0, dtype=np.float32)
        return np.asarray(self._soxr.resample_chunk(empty, last=True), dtype=np.float32)
