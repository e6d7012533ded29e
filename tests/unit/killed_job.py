"""`voxflow speak --long` killed right after its first segment, for the resume tests."""

from __future__ import annotations

import pytest

from voxflow.cli import main
from voxflow.jobs.store import JobFiles


class Interrupted(Exception):
    """Stands for a kill after the first segment."""


def run_killed_after_first_segment(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    """Run ``voxflow argv`` until its first segment file is written, then stop it as a kill
    would (`Interrupted`); segment writes are real again afterwards."""
    real_write = JobFiles.write_segment

    def write_then_die(self, chapter, segment, samples, words=None):
        real_write(self, chapter, segment, samples, words)
        raise Interrupted

    monkeypatch.setattr(JobFiles, "write_segment", write_then_die)
    with pytest.raises(Interrupted):
        main(argv)
    monkeypatch.setattr(JobFiles, "write_segment", real_write)
