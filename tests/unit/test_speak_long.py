"""`voxflow speak --long` on the tiny voice: a Markdown file through the job machinery in
process, and a run interrupted after its first segment that resumes to the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf
from killed_job import Interrupted, run_killed_after_first_segment

from voxflow.cli import main
from voxflow.jobs.store import JobFiles

BOOK = "# One\n\nThe first part is read. It has two sentences.\n\n# Two\n\nAnd a second part.\n"


@pytest.fixture
def argv(tiny_voice_dir: Path, tmp_path: Path) -> list[str]:
    book = tmp_path / "book.md"
    book.write_text(BOOK)
    return [
        "speak", "--long", "-f", str(book), "--seed", "3", "--no-progress",
        "--set", f"models.0.options.voices_dir={tiny_voice_dir}",
        "--set", "models.0.options.include_default_voice=false",
        "--set", "models.0.options.default_voice=tiny",
        "--set", "models.0.voice_aliases={}",
    ]


def test_speak_long_writes_the_whole_book_and_removes_its_job(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "book.wav"
    assert main([*argv, "-o", str(out)]) == 0
    audio, rate = sf.read(out)
    assert rate > 0 and len(audio) > rate // 10
    assert not Path(f"{out}.job").exists()
    assert f"wrote {out}:" in capsys.readouterr().err


def test_speak_long_resumes_to_the_bytes_of_an_uninterrupted_run(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    straight = tmp_path / "straight.wav"
    assert main([*argv, "-o", str(straight)]) == 0
    resumed = tmp_path / "resumed.wav"
    run_killed_after_first_segment(monkeypatch, [*argv, "-o", str(resumed)])
    assert not resumed.exists()
    assert len(JobFiles.load(Path(f"{resumed}.job")).done) == 1
    capsys.readouterr()
    assert main([*argv, "-o", str(resumed)]) == 0
    assert "resuming: 1 segments already done" in capsys.readouterr().err
    assert resumed.read_bytes() == straight.read_bytes()


def test_speak_long_refuses_a_job_folder_of_another_text(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "x.wav"
    monkeypatch.setattr(JobFiles, "write_segment", lambda *a: (_ for _ in ()).throw(Interrupted))
    with pytest.raises(Interrupted):
        main([*argv, "-o", str(out)])
    monkeypatch.undo()
    (tmp_path / "book.md").write_text("Another text altogether.")
    assert main([*argv, "-o", str(out)]) == 2
    assert "holds a job of another text or other options" in capsys.readouterr().err
