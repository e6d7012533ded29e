"""Scoring used by `voxflow eval` and `bench compare --quality`, without ASR or embeddings:
word error counts after normalization, clip naming, identity classes and SNR, cosine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from voxflow.eval.clips import numbered_clips, write_clip
from voxflow.eval.identity import compare_folders, snr_db
from voxflow.eval.speaker import centroid, cosine
from voxflow.eval.wer import WerReport, score


def test_score_normalizes_both_sides_the_same_way():
    c = score("000.wav", 0, "The bakery opens at 6:45, and it's busy.",
              "the bakery opens at six forty-five and its busy")
    assert (c.errors, c.words, c.wer) == (0, 10, 0.0)


def test_score_counts_substitutions_deletions_and_insertions():
    c = score("x.wav", 0, "one two three four", "one too three four five")
    assert (c.errors, c.words) == (2, 4)  # "too" for "two", "five" inserted
    assert c.wer == 0.5
    assert score("x.wav", 0, "one two", "").errors == 2


def test_overall_rate_weighs_clips_by_their_words():
    short = score("a.wav", 0, "yes", "no")  # 1 error in 1 word
    long = score("b.wav", 1, "a b c d e f g h i", "a b c d e f g h i")  # 0 in 9
    report = WerReport([short, long])
    assert report.wer == pytest.approx(0.1)
    assert report.to_dict()["clips"][0]["wer"] == 1.0


def test_clip_names_must_start_with_the_text_index(tmp_path):
    tone = np.zeros(160, np.float32)
    for name in ("000.wav", "002_0007.wav", "001.flac"):
        write_clip(tmp_path / name, tone, 16000)
    (tmp_path / "notes.txt").write_text("not audio")
    assert [(i, p.name) for i, p in numbered_clips(tmp_path)] == [
        (0, "000.wav"), (1, "001.flac"), (2, "002_0007.wav")]
    write_clip(tmp_path / "take.wav", tone, 16000)
    with pytest.raises(ValueError, match="take.wav does not start with the index"):
        numbered_clips(tmp_path)
    with pytest.raises(ValueError, match="is not a folder"):
        numbered_clips(tmp_path / "missing")


def test_snr_db():
    a = np.ones(100, np.float32)
    assert snr_db(a, a) == math.inf
    assert snr_db(a, a * 1.1) == pytest.approx(20.0)  # noise power = 1% of the signal's
    with pytest.raises(ValueError, match="equal lengths"):
        snr_db(a, a[:50])


def test_identity_classes_of_two_folders(tmp_path):
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal(800)).astype(np.float32)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for folder in (a, b):
        write_clip(folder / "000.wav", x, 8000)  # identical bytes
    write_clip(a / "001.wav", x, 8000)
    write_clip(b / "001.wav", x[:700], 8000)  # shorter
    write_clip(a / "002.wav", x, 8000)
    write_clip(b / "002.wav", x + np.float32(0.001), 8000)  # same length, small offset
    write_clip(a / "003.wav", x, 8000)  # only in a
    pair = compare_folders("a", a, "b", b)
    assert [p.kind for p in pair.pairs] == ["identical", "different_length", "same_length"]
    assert pair.pairs[2].snr_db == pytest.approx(40.0, abs=0.5)
    assert pair.only_in_a == ["003.wav"] and pair.only_in_b == []
    assert pair.summary() == ("a vs b: 1 identical, 1 different length, 1 same length "
                              f"(median SNR {pair.pairs[2].snr_db:.1f} dB); unpaired: 1 + 0")


def test_cosine_and_centroid():
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert cosine(e1, e1) == 1.0 and cosine(e1, e2) == 0.0
    assert cosine(e1, np.zeros(2)) == 0.0
    assert np.allclose(centroid([e1, e2]), [math.sqrt(0.5)] * 2)
