"""Long-form jobs without a server: the chapter and segment cut, the segment files and their
manifest (a torn last line), the per-segment seeds and the quota."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from voxflow.config import JobsSettings
from voxflow.jobs.captions import CaptionWord, webvtt
from voxflow.jobs.chapters import Chapter, split_chapters, split_segments
from voxflow.jobs.manager import JobManager, QuotaExceededError
from voxflow.jobs.runner import caption_text
from voxflow.jobs.store import JobFiles, read_manifest, segment_seed


def test_chapters_start_at_headings_outside_code_fences() -> None:
    text = "Opening line.\n\n# One\n\nFirst.\n\n```\n# not a heading\n```\n\n## Two ##\nSecond."
    chapters = split_chapters(text, 400)
    assert [c.title for c in chapters] == ["", "One", "Two"]
    assert chapters[1].segments == ("# One\n\nFirst.\n\n```\n# not a heading\n```",)
    assert chapters[2].segments == ("## Two ##\nSecond.",)


def test_text_without_headings_is_one_untitled_chapter_and_blank_is_none() -> None:
    assert split_chapters("Just text.", 400) == [Chapter("", ("Just text.",))]
    assert split_chapters(" \n\n \n", 400) == []


def test_segments_join_paragraphs_that_fit_and_cut_long_ones_at_sentences() -> None:
    assert split_segments("Aa.\n\nBb.\n\nCc.", 9) == ["Aa.\n\nBb.", "Cc."]
    assert split_segments("One two. Three four. Five.", 12) == ["One two.", "Three four.",
                                                                "Five."]
    assert split_segments("abcdefghij klm", 5) == ["abcde", "fghij", "klm"]


def test_segment_seeds_depend_only_on_job_seed_and_place() -> None:
    assert segment_seed(7, 0, 1) == segment_seed(7, 0, 1)
    seeds = {segment_seed(7, c, s) for c in range(3) for s in range(3)}
    assert len(seeds) == 9
    assert all(0 <= s < 2**63 for s in seeds)
    assert segment_seed(8, 0, 1) != segment_seed(7, 0, 1)


def make_job(root: Path) -> JobFiles:
    chapters = [Chapter("", ("a b c", "d e")), Chapter("Two", ("f",))]
    return JobFiles.create(root / "job_x", {"model": "m", "voice": "v", "seed": 1,
                                            "speed": 1.0}, chapters, 5.0)


def test_segments_and_manifest_reload_and_resume_at_the_first_missing(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.write_segment(0, 0, np.array([0.5, -0.25], np.float32))
    again = JobFiles.load(job.root)
    assert again.done == {(0, 0): 2}
    assert again.pending() == [(0, 1), (1, 0)]
    assert again.done_chars == 5 and again.total_chars == 9
    assert again.read_chapter(0).tolist() == [0.5, -0.25]
    assert again.state == "queued" and again.created == 5.0


def test_a_torn_manifest_line_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / "manifest.txt"
    path.write_text("0 0 100\n0 1 5")  # the crash cut "0 1 50\n"
    assert read_manifest(path) == {(0, 0): 100}
    path.write_text("0 0 100\nxx\n")
    assert read_manifest(path) == {(0, 0): 100}


def test_quota_full_refuses_new_jobs_with_507(tmp_path: Path) -> None:
    settings = JobsSettings(enabled=True, directory=tmp_path, disk_quota_bytes=1000)

    async def scenario() -> None:
        manager = JobManager(settings, engine=None)  # type: ignore[arg-type]
        job = manager.create("Some text.", {"model": "m", "voice": "v", "speed": 1.0})
        assert isinstance(job.options["seed"], int)  # drawn once, kept for a resume
        job.write_segment(0, 0, np.zeros(300, np.float32))  # 1,200 bytes
        with pytest.raises(QuotaExceededError) as caught:
            manager.create("More text.", {"model": "m", "voice": "v", "speed": 1.0})
        assert caught.value.status == 507
        assert caught.value.code == "quota_exceeded"

    asyncio.run(scenario())


def test_jobs_enabled_needs_a_directory() -> None:
    with pytest.raises(ValueError, match="jobs.enabled needs jobs.directory"):
        JobsSettings(enabled=True)


def test_webvtt_cues_break_at_sentence_ends_and_word_counts() -> None:
    words = [CaptionWord(0.0, 0.4, "Hello"), CaptionWord(0.5, 0.9, "there."),
             *[CaptionWord(1.0 + i, 1.5 + i, f"w{i}") for i in range(9)]]
    assert webvtt(words) == "\n".join([
        "WEBVTT", "",
        "00:00:00.000 --> 00:00:00.900", "Hello there.", "",
        "00:00:01.000 --> 00:00:08.500", "w0 w1 w2 w3 w4 w5 w6 w7", "",
        "00:00:09.000 --> 00:00:09.500", "w8", "",
    ])
    assert webvtt([]) == "WEBVTT\n"
    assert webvtt([CaptionWord(3723.25, 3724.0, "late")]).splitlines()[2] == (
        "01:02:03.250 --> 01:02:04.000")


def test_segment_words_are_kept_beside_the_samples(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.write_segment(0, 0, np.zeros(4, np.float32), [[0.0, 0.1, "a"]])
    job.write_segment(0, 1, np.zeros(4, np.float32))
    assert JobFiles.load(job.root).read_words(0, 0) == [[0.0, 0.1, "a"]]
    assert job.read_words(0, 1) == []


def test_caption_words_keep_their_trailing_punctuation() -> None:
    text = 'He said "yes." Then, **bold** words'
    assert caption_text(text, 9, 12) == 'yes."'
    assert caption_text(text, 15, 19) == "Then,"
    assert caption_text(text, 23, 27) == "bold"
