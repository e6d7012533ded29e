"""Word error rate of synthesized clips against the texts they should say.

Clips are matched to texts by number (`voxflow.eval.clips`: ``000.wav`` says the first non-blank
line of the sentences file, ``007_0031.wav`` the eighth). Each clip is transcribed
(`voxflow.eval.asr.WhisperTranscriber`), then reference and transcript are normalized the same
way (`voxflow.eval.normalize`: case, punctuation, numbers as words) and aligned word by word
with jiwer.

Per clip: word error rate = (substitutions + deletions + insertions) / reference words. Overall:
the same over all clips together (errors summed over reference words summed), not the mean of
the per-clip rates, so a long clip weighs more than a short one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from voxflow.eval.clips import load_clip, numbered_clips
from voxflow.eval.normalize import normalize_for_wer

Transcriber = Callable[[np.ndarray, int], str]
"""``transcribe((N,) float32 audio, sample rate Hz) -> text``."""


@dataclass(frozen=True)
class ClipWer:
    """One clip: its text (raw and normalized), what ASR heard (normalized), and the counts."""

    clip: str
    index: int
    text: str
    reference: str
    hypothesis: str
    errors: int
    words: int

    @property
    def wer(self) -> float:
        return self.errors / self.words if self.words else float(self.errors > 0)


@dataclass(frozen=True)
class WerReport:
    clips: list[ClipWer]

    @property
    def errors(self) -> int:
        return sum(c.errors for c in self.clips)

    @property
    def words(self) -> int:
        return sum(c.words for c in self.clips)

    @property
    def wer(self) -> float:
        """Overall word error rate (see the module docstring); NaN with no clips."""
        return self.errors / self.words if self.words else float("nan")

    def to_dict(self) -> dict:
        return {"wer": self.wer, "errors": self.errors, "words": self.words,
                "normalization": "voxflow.eval.normalize.normalize_for_wer",
                "clips": [{**asdict(c), "wer": c.wer} for c in self.clips]}


def read_sentences(path: Path | str) -> list[str]:
    """The non-blank lines of a UTF-8 file, stripped.

    Raises:
        ValueError: unreadable, or no text in it.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    sentences = [line.strip() for line in lines if line.strip()]
    if not sentences:
        raise ValueError(f"{path} has no text")
    return sentences


def score(clip: str, index: int, text: str, heard: str) -> ClipWer:
    """Word errors of transcript `heard` against `text`, both normalized."""
    import jiwer

    reference, hypothesis = normalize_for_wer(text), normalize_for_wer(heard)
    if not reference:
        return ClipWer(clip, index, text, reference, hypothesis, len(hypothesis.split()), 0)
    out = jiwer.process_words(reference, hypothesis)
    errors = out.substitutions + out.deletions + out.insertions
    words = out.substitutions + out.deletions + out.hits
    return ClipWer(clip, index, text, reference, hypothesis, errors, words)


def evaluate_dir(folder: Path | str, sentences: list[str], transcribe: Transcriber) -> WerReport:
    """Transcribe every clip of `folder` and score it against its sentence.

    Raises:
        ValueError: as `numbered_clips` and `load_clip`, or a clip index past the last sentence.
    """
    clips = numbered_clips(folder)
    for index, path in clips:  # all checked before the first (slow) transcription
        if index >= len(sentences):
            raise ValueError(f"clip {path.name} is for text {index}, but the sentences file "
                             f"has {len(sentences)} texts (0..{len(sentences) - 1})")
    results = []
    for index, path in clips:
        audio, rate = load_clip(path)
        results.append(score(path.name, index, sentences[index], transcribe(audio, rate)))
    return WerReport(results)


def wer_table(report: WerReport) -> str:
    """Per-clip lines (rate, clip, and what was heard when it differs) and the overall rate."""
    lines = []
    for c in report.clips:
        lines.append(f"{c.wer:6.3f}  {c.clip}")
        if c.errors:
            lines.append(f"        said:  {c.reference}\n        heard: {c.hypothesis}")
    lines.append(f"overall word error rate {report.wer:.4f} ({report.errors} errors in "
                 f"{report.words} words, {len(report.clips)} clips)")
    return "\n".join(lines)
