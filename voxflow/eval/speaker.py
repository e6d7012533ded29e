"""Speaker similarity: cosine of Resemblyzer (GE2E) speaker embeddings.

Each clip is resampled to 16 kHz with soxr, then Resemblyzer's own preprocessing (volume
normalization, long silences trimmed with webrtcvad) and `VoiceEncoder.embed_utterance` give a
unit-length 256-d embedding; the similarity of two clips is the cosine of their embeddings
(1 = same direction; clips of one speaker typically score above 0.8, different speakers lower).
The reference is one clip (``--ref``) or the mean of several clips' embeddings, renormalized.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voxflow.audio.resample import resample
from voxflow.eval.clips import audio_files, load_clip

ENCODER_SAMPLE_RATE = 16000


class SpeakerEncoder:
    """Resemblyzer's pretrained voice encoder on the CPU.

    Args:
        threads: PyTorch intra-op threads, set process-wide (`torch.set_num_threads`). One is
            plenty for this small LSTM, and more is far slower on a busy machine: measured on
            the 2-core CI machine under load, 0.07 s per clip with one thread, 2.5 s with two.
    Raises:
        ImportError: resemblyzer (or torch, librosa, webrtcvad) is not installed (`.[eval]`).
    """

    def __init__(self, threads: int = 1) -> None:
        import torch

        torch.set_num_threads(threads)
        with warnings.catch_warnings():  # resemblyzer imports a deprecated scipy namespace
            warnings.simplefilter("ignore", DeprecationWarning)
            from resemblyzer import VoiceEncoder, preprocess_wav
        self._preprocess = preprocess_wav
        self._encoder = VoiceEncoder(device="cpu", verbose=False)

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """(256,) float32 unit-length embedding of (N,) float32 audio at `sample_rate` Hz.

        Raises:
            ValueError: no speech left after silence trimming.
        """
        audio16 = resample(np.asarray(audio, np.float32), sample_rate, ENCODER_SAMPLE_RATE)
        speech = self._preprocess(audio16)
        if speech.size == 0:
            raise ValueError("no speech in the clip (all of it was trimmed as silence)")
        return self._encoder.embed_utterance(speech).astype(np.float32)

    def embed_file(self, path: Path | str) -> np.ndarray:
        audio, rate = load_clip(path)
        try:
            return self.embed(audio, rate)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors (0 when either is all zeros)."""
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norm) if norm else 0.0


def centroid(embeddings: list[np.ndarray]) -> np.ndarray:
    """The renormalized mean of unit embeddings: a speaker's reference from several clips."""
    mean = np.mean(embeddings, axis=0)
    return mean / np.linalg.norm(mean)


@dataclass
class FolderSimilarity:
    """Similarity of every clip of one folder to the reference: per clip, mean and min."""

    name: str
    clips: dict[str, float] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.clips.values()))) if self.clips else float("nan")

    @property
    def min(self) -> float:
        return min(self.clips.values()) if self.clips else float("nan")

    def to_dict(self) -> dict:
        return {"name": self.name, "mean": self.mean, "min": self.min, "clips": self.clips}


def embed_folder(encoder: SpeakerEncoder, folder: Path | str) -> dict[str, np.ndarray]:
    """Clip name -> embedding, for every audio clip of `folder`."""
    return {path.name: encoder.embed_file(path) for path in audio_files(folder)}


def similarity_to(reference: np.ndarray, name: str,
                  embeddings: dict[str, np.ndarray]) -> FolderSimilarity:
    return FolderSimilarity(name, {clip: cosine(reference, e) for clip, e in embeddings.items()})
