"""One job on disk: a folder with its plan, its state and its audio, segment by segment.

Layout of ``<jobs.directory>/<job id>/``:
- ``plan.json``: the options and the chapters' segments; written once, atomically.
- ``job.json``: state, error and the model's sample rate; replaced atomically on each change.
- ``c0000-s00000.f32``: one finished segment's samples (float32 little-endian, mono), written
  to a temporary file, fsynced and renamed.
- ``manifest.txt``: one line ``chapter segment samples`` per finished segment, appended and
  fsynced only after the segment's file is in place. A torn last line (a crash mid-write) is
  ignored, so a segment counts as done only once its file and its line are both on disk; the
  runner resumes at the first segment not in the manifest.

Writes follow the saved voices' pattern (`voxflow.models.cosyvoice3.saved_voices`): a hidden
temporary file beside the target, fsynced, `os.replace`d, then the folder fsynced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voxflow.jobs.chapters import Chapter

STATES = ("queued", "running", "done", "failed", "cancelled")
"""A job's states; ``done``, ``failed`` and ``cancelled`` are final."""
FINAL = frozenset(("done", "failed", "cancelled"))


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (temporary file, fsync, rename, dir fsync).

    Raises:
        OSError: the write failed (the temporary file is removed).
    """
    temp = path.with_name(f".{path.name}.tmp")
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """fsync a folder, so a rename in it survives a power cut (a no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def segment_seed(job_seed: int, chapter: int, segment: int) -> int:
    """The seed of a job's segment: a pure function of the job's seed and the segment's place
    (0 to 2**63-1), so a resumed job synthesizes each segment exactly as an uninterrupted one."""
    digest = hashlib.sha256(f"{job_seed}:{chapter}:{segment}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class JobFiles:
    """A job's folder and what is on disk in it.

    Attributes:
        root: the job's folder.
        options: the speech options (`model`, `voice`, `response_format`, `speed`, `seed`,
            `sample_rate`, `instructions`, `language`, and `lexicon` where one is named);
            `seed` always set (drawn at creation).
        chapters: the plan.
        state, error: see `STATES`; `error` the OpenAI error dict of a failed job.
        sample_rate: the model's rate in Hz once the first segment is done, else None.
        done: finished segments, ``(chapter, segment) -> samples``.
    """

    root: Path
    options: dict[str, Any]
    chapters: list[Chapter]
    state: str = "queued"
    error: dict[str, Any] | None = None
    sample_rate: int | None = None
    created: float = 0.0
    done: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The job id (its folder's name)."""
        return self.root.name

    @classmethod
    def create(cls, root: Path, options: dict[str, Any], chapters: list[Chapter],
               created: float) -> JobFiles:
        """Make the folder `root` (must not exist) and write the plan and the state.

        Raises:
            FileExistsError, OSError.
        """
        root.mkdir(parents=False)
        job = cls(root, options, chapters, created=created)
        plan = {"options": options, "created": created,
                "chapters": [{"title": c.title, "segments": list(c.segments)}
                             for c in chapters]}
        write_atomic(root / "plan.json", json.dumps(plan).encode())
        job.save()
        return job

    @classmethod
    def load(cls, root: Path) -> JobFiles:
        """Read a job folder back (the manifest's torn last line ignored).

        Raises:
            OSError, ValueError: no such job or its files are not a job's.
        """
        plan = json.loads((root / "plan.json").read_text())
        meta = json.loads((root / "job.json").read_text())
        chapters = [Chapter(c["title"], tuple(c["segments"])) for c in plan["chapters"]]
        job = cls(root, plan["options"], chapters, meta["state"], meta.get("error"),
                  meta.get("sample_rate"), plan.get("created", 0.0))
        job.done = read_manifest(root / "manifest.txt")
        return job

    def save(self) -> None:
        """Write ``job.json`` (state, error, sample rate) atomically."""
        meta = {"state": self.state, "error": self.error, "sample_rate": self.sample_rate}
        write_atomic(self.root / "job.json", json.dumps(meta).encode())

    def segment_path(self, chapter: int, segment: int) -> Path:
        """The file of segment `segment` of chapter `chapter`."""
        return self.root / f"c{chapter:04d}-s{segment:05d}.f32"

    def write_segment(self, chapter: int, segment: int, samples: np.ndarray,
                      words: list[list] | None = None) -> None:
        """Store a finished segment: its words (when timed) and its samples (each file
        atomically), then its manifest line (fsynced).

        Args:
            samples: ``(N,)`` float32 mono at `sample_rate`.
            words: ``[start_s, end_s, text]`` per word, seconds from the segment's start.
        """
        if words is not None:
            write_atomic(self.words_path(chapter, segment), json.dumps(words).encode())
        data = np.ascontiguousarray(samples, dtype="<f4").tobytes()
        write_atomic(self.segment_path(chapter, segment), data)
        with open(self.root / "manifest.txt", "a", encoding="ascii") as f:
            f.write(f"{chapter} {segment} {len(samples)}\n")
            f.flush()
            os.fsync(f.fileno())
        self.done[(chapter, segment)] = len(samples)

    def words_path(self, chapter: int, segment: int) -> Path:
        """The word timings file of a segment (JSON ``[[start_s, end_s, text], ...]``)."""
        return self.root / f"c{chapter:04d}-s{segment:05d}.words.json"

    def read_words(self, chapter: int, segment: int) -> list[list]:
        """A finished segment's words (``[]`` where the model did not time them)."""
        path = self.words_path(chapter, segment)
        return json.loads(path.read_text()) if path.is_file() else []

    def read_chapter(self, chapter: int) -> np.ndarray:
        """Chapter `chapter`'s finished segments joined, float32 ``(N,)``."""
        parts = [np.fromfile(self.segment_path(chapter, s), dtype="<f4")
                 for s in range(len(self.chapters[chapter].segments))
                 if (chapter, s) in self.done]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def pending(self) -> list[tuple[int, int]]:
        """The segments not yet done, in order: ``(chapter, segment)``."""
        return [(c, s) for c, chapter in enumerate(self.chapters)
                for s in range(len(chapter.segments)) if (c, s) not in self.done]

    @property
    def total_chars(self) -> int:
        """Characters in all segments."""
        return sum(c.chars for c in self.chapters)

    @property
    def done_chars(self) -> int:
        """Characters in the finished segments."""
        return sum(len(self.chapters[c].segments[s]) for c, s in self.done)

    @property
    def audio_samples(self) -> int:
        """Samples in the finished segments."""
        return sum(self.done.values())

    def disk_bytes(self) -> int:
        """Bytes the job's files take."""
        return folder_bytes(self.root)

    def remove(self) -> None:
        """Delete the job's folder."""
        shutil.rmtree(self.root, ignore_errors=True)


def folder_bytes(root: Path) -> int:
    """Bytes of the files directly in `root` (0 if it is gone)."""
    total = 0
    try:
        for entry in os.scandir(root):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0
    return total


def read_manifest(path: Path) -> dict[tuple[int, int], int]:
    """The finished segments a manifest lists, ``(chapter, segment) -> samples``; a last line
    without its newline (torn by a crash) and malformed lines are skipped."""
    done: dict[tuple[int, int], int] = {}
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return done
    for line in text.split("\n")[:-1]:  # the part after the last newline is torn
        parts = line.split()
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            done[(int(parts[0]), int(parts[1]))] = int(parts[2])
    return done
