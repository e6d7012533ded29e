"""Silent stretches in a clip, for tests that check pauses: 10 ms frames whose RMS is more than
40 dB below the clip's loudest frame count as silent."""

from __future__ import annotations

import numpy as np

FRAME_S = 0.01
SILENCE_DB = -40.0


def silent_runs(audio: np.ndarray, rate: int) -> list[tuple[float, float]]:
    """(start_s, length_s) of every run of silent frames in `audio` ((N,) float32), in order."""
    frame = int(rate * FRAME_S)
    n = audio.size // frame
    rms = np.sqrt(np.mean(np.square(audio[: n * frame].reshape(n, frame)), axis=1))
    silent = rms < rms.max() * 10 ** (SILENCE_DB / 20)
    runs, start = [], None
    for i, s in enumerate([*silent, False]):
        if s and start is None:
            start = i
        elif not s and start is not None:
            runs.append((start * FRAME_S, (i - start) * FRAME_S))
            start = None
    return runs


def leading_silence_s(audio: np.ndarray, rate: int) -> float:
    """Seconds of silence before the first sounding frame."""
    runs = silent_runs(audio, rate)
    return runs[0][1] if runs and runs[0][0] == 0 else 0.0


def longest_inner_pause_s(audio: np.ndarray, rate: int) -> float:
    """The longest silent run that has sound on both sides."""
    runs = silent_runs(audio, rate)
    total = audio.size / rate
    inner = [length for start, length in runs if start > 0 and start + length < total - 0.011]
    return max(inner, default=0.0)
