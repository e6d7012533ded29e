"""Validation of sample arrays and the float -> 16-bit PCM conversion rule."""

from __future__ import annotations

import operator

import numpy as np

MAX_SAMPLE_RATE_HZ = 768_000


def check_samples(samples: np.ndarray) -> np.ndarray:
    """Validate mono float audio and return it as a contiguous float32 array.

    Args:
        samples: shape ``(N,)``, any floating dtype, nominal range [-1, 1]. ``N`` may be 0.

    Returns:
        float32 array of shape ``(N,)`` (the input itself when it already qualifies).

    Raises:
        ValueError: ``samples`` is not a numpy array, not 1-D, or not floating point.
    """
    if not isinstance(samples, np.ndarray):
        raise ValueError(f"samples must be a numpy array, got {type(samples).__name__}")
    if samples.ndim != 1:
        raise ValueError(f"samples must be 1-D mono audio of shape (N,), got {samples.shape}")
    if not np.issubdtype(samples.dtype, np.floating):
        raise ValueError(f"samples must be floating point in [-1, 1], got dtype {samples.dtype}")
    return np.ascontiguousarray(samples, dtype=np.float32)


def check_sample_rate(sample_rate: int) -> int:
    """Return ``sample_rate`` (Hz) as an ``int``.

    Raises:
        ValueError: not an integer, or outside 1..768,000 Hz.
    """
    if isinstance(sample_rate, bool):
        raise ValueError(f"sample_rate must be an integer number of Hz, got {sample_rate!r}")
    try:
        rate = operator.index(sample_rate)
    except TypeError:
        raise ValueError(
            f"sample_rate must be an integer number of Hz, got {sample_rate!r}"
        ) from None
    if not 1 <= rate <= MAX_SAMPLE_RATE_HZ:
        raise ValueError(f"sample_rate must be 1..{MAX_SAMPLE_RATE_HZ} Hz, got {rate}")
    return rate


def to_float(samples: np.ndarray) -> np.ndarray:
    """Return float32 ``(N,)`` samples with NaN -> 0 and values clipped to [-1, 1].

    This is what the lossy encoders receive, so they see the same clipping as
    :func:`to_int16`.

    Raises:
        ValueError: as :func:`check_samples`.
    """
    x = check_samples(samples)
    return np.clip(np.nan_to_num(x, nan=0.0), -1.0, 1.0).astype(np.float32, copy=False)


def to_int16(samples: np.ndarray) -> np.ndarray:
    """Convert float audio to 16-bit PCM.

    Rule, applied to each sample on its own (so converting chunks and concatenating
    gives exactly the same result as converting the whole signal):
    the value is taken as float32, NaN becomes 0, it is clipped to [-1, 1], multiplied
    by 32767 (in float64, so exactly) and rounded to the nearest integer (``numpy.rint``;
    an exact .5 cannot arise from a float32 input). So 1.0 -> 32767, -1.0 -> -32767,
    +-inf -> +-32767; -32768 is never produced.

    Args:
        samples: shape ``(N,)``, floating dtype.

    Returns:
        int16 array of shape ``(N,)``.

    Raises:
        ValueError: ``samples`` is not a 1-D floating point numpy array.
    """
    x = check_samples(samples).astype(np.float64)
    x = np.clip(np.nan_to_num(x, nan=0.0), -1.0, 1.0)
    return np.rint(x * 32767.0).astype(np.int16)
