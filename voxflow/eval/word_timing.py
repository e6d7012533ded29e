"""Word timestamps checked against Whisper's: the absolute error of each word boundary.

Whisper tiny.en (`voxflow.eval.asr`) transcribes a clip with ``word_timestamps=True``
(faster-whisper: cross-attention alignment, then DTW); our words and Whisper's are compared by
their letters and digits, lower-cased (`voxflow.text.offsets.word_key`), aligned in order with
`difflib.SequenceMatcher`; only words equal on both sides count. Each matched word gives two
errors, |start - start'| and |end - end'|, in seconds. Whisper's own boundaries are not exact
(tens of ms), so the figure bounds ours from above.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher

import numpy as np

from voxflow.audio.resample import resample
from voxflow.eval.asr import ASR_SAMPLE_RATE, EDGE_PAD_S
from voxflow.text.offsets import word_key

Timed = tuple[str, float, float]
"""A word and its start and end, seconds from the clip's first sample."""


def whisper_words(model, audio: np.ndarray, sample_rate: int) -> list[Timed]:
    """Whisper's words of (N,) float32 `audio` with their times (padding removed).

    Args:
        model: a faster-whisper ``WhisperModel`` (`voxflow.eval.asr.WhisperTranscriber.model`).
    """
    audio16 = resample(np.asarray(audio, np.float32), sample_rate, ASR_SAMPLE_RATE)
    pad = np.zeros(int(EDGE_PAD_S * ASR_SAMPLE_RATE), np.float32)
    segments, _ = model.transcribe(np.concatenate([pad, audio16, pad]), beam_size=1,
                                   language="en", word_timestamps=True)
    return [(w.word.strip(), w.start - EDGE_PAD_S, w.end - EDGE_PAD_S)
            for s in segments for w in (s.words or [])]


def boundary_errors(ours: Sequence[Timed], theirs: Sequence[Timed]) -> list[float]:
    """Absolute start and end errors (seconds) of the words equal on both sides."""
    a = [word_key(w) for w, _, _ in ours]
    b = [word_key(w) for w, _, _ in theirs]
    errors = []
    for block in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            _, s1, e1 = ours[block.a + k]
            _, s2, e2 = theirs[block.b + k]
            errors.extend([abs(s1 - s2), abs(e1 - e2)])
    return errors
