"""Output identity: are two runs' clips the same audio, and if not, how far apart?

Clips of two folders are paired by file name. Each pair is one of:
- ``identical``: the files are byte for byte the same;
- ``different_length``: the decoded sample counts differ (no sample-wise comparison is fair);
- ``same_length``: same number of samples, bytes differ; `snr_db` says how close:
  ``10 log10(sum(a^2) / sum((a - b)^2))`` with the first folder's clip as the signal
  (infinite when the samples are equal and only the headers differ).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from voxflow.eval.clips import audio_files, load_clip


@dataclass(frozen=True)
class ClipPair:
    clip: str
    kind: str
    samples_a: int
    samples_b: int
    snr_db: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """SNR of `test` against `reference` (same length), in dB; inf when equal.

    Raises:
        ValueError: the lengths differ.
    """
    if reference.shape != test.shape:
        raise ValueError(f"SNR needs equal lengths, got {reference.size} and {test.size}")
    ref = reference.astype(np.float64)
    noise = float(np.sum((ref - test.astype(np.float64)) ** 2))
    if noise == 0.0:
        return math.inf
    signal = float(np.sum(ref ** 2))
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def compare_clips(a: Path, b: Path) -> ClipPair:
    """Classify the pair (see the module docstring)."""
    audio_a, _ = load_clip(a)
    audio_b, _ = load_clip(b)
    if a.read_bytes() == b.read_bytes():
        return ClipPair(a.name, "identical", audio_a.size, audio_b.size)
    if audio_a.size != audio_b.size:
        return ClipPair(a.name, "different_length", audio_a.size, audio_b.size)
    return ClipPair(a.name, "same_length", audio_a.size, audio_b.size, snr_db(audio_a, audio_b))


@dataclass(frozen=True)
class FolderPair:
    """Clip-by-clip comparison of folder `a` with folder `b` (clips in both)."""

    a: str
    b: str
    pairs: list[ClipPair]
    only_in_a: list[str]
    only_in_b: list[str]

    def counts(self) -> dict[str, int]:
        kinds = ("identical", "different_length", "same_length")
        return {k: sum(p.kind == k for p in self.pairs) for k in kinds}

    def median_snr_db(self) -> float:
        snrs = [p.snr_db for p in self.pairs if p.snr_db is not None]
        return float(np.median(snrs)) if snrs else float("nan")

    def summary(self) -> str:
        c = self.counts()
        line = (f"{self.a} vs {self.b}: {c['identical']} identical, {c['different_length']} "
                f"different length, {c['same_length']} same length")
        if c["same_length"]:
            line += f" (median SNR {self.median_snr_db():.1f} dB)"
        if self.only_in_a or self.only_in_b:
            line += f"; unpaired: {len(self.only_in_a)} + {len(self.only_in_b)}"
        return line

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "counts": self.counts(),
                "median_snr_db": self.median_snr_db(),
                "pairs": [p.to_dict() for p in self.pairs],
                "only_in_a": self.only_in_a, "only_in_b": self.only_in_b}


def compare_folders(name_a: str, a: Path | str, name_b: str, b: Path | str) -> FolderPair:
    """Pair the clips of folders `a` and `b` by name and classify each pair.

    Raises:
        ValueError: a folder is missing or has no audio clips, or a clip cannot be read.
    """
    files_a = {p.name: p for p in audio_files(a)}
    files_b = {p.name: p for p in audio_files(b)}
    shared = sorted(files_a.keys() & files_b.keys())
    return FolderPair(
        name_a, name_b, [compare_clips(files_a[n], files_b[n]) for n in shared],
        sorted(files_a.keys() - files_b.keys()), sorted(files_b.keys() - files_a.keys()),
    )
