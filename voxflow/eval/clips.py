"""Audio clips on disk: finding them in a folder, reading them, matching them to texts.

A clip for text number ``i`` (counting the non-blank lines of a sentences file from 0) has a
name that starts with ``i``: ``000.wav``, ``007_0031.wav``. Several clips may say the same text.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
_LEADING_INDEX = re.compile(r"^(\d+)")


def audio_files(folder: Path | str) -> list[Path]:
    """The audio files of `folder` (by suffix, see `AUDIO_SUFFIXES`), sorted by name.

    Raises:
        ValueError: not a folder, or no audio file in it.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
    if not files:
        raise ValueError(f"no audio clips ({', '.join(AUDIO_SUFFIXES)}) in {folder}")
    return files


def numbered_clips(folder: Path | str) -> list[tuple[int, Path]]:
    """(text index, path) of every clip of `folder`.

    Raises:
        ValueError: as `audio_files`, or a clip name that does not start with a number.
    """
    clips = []
    for path in audio_files(folder):
        match = _LEADING_INDEX.match(path.stem)
        if match is None:
            raise ValueError(f"clip {path.name} does not start with the index of its text "
                             "(e.g. 000.wav for the first line)")
        clips.append((int(match.group(1)), path))
    return clips


def load_clip(path: Path | str) -> tuple[np.ndarray, int]:
    """(N,) float32 mono samples (channels averaged) and the sample rate (Hz) of an audio file.

    Raises:
        ValueError: the file cannot be read as audio.
    """
    import soundfile as sf

    try:
        audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (OSError, RuntimeError, sf.LibsndfileError) as exc:
        raise ValueError(f"cannot read audio {path}: {exc}") from None
    return audio.mean(axis=1).astype(np.float32), int(rate)


def write_clip(path: Path | str, audio: np.ndarray, sample_rate: int) -> None:
    """Write (N,) float32 audio as a 16-bit PCM WAV file."""
    import soundfile as sf

    sf.write(str(path), np.asarray(audio, np.float32), sample_rate, subtype="PCM_16")
