"""Deadline cuts of Kokoro segments (`voxflow.models.kokoro.pieces`) and the run pace they are
sized with (`voxflow.models.kokoro.pace`)."""

from __future__ import annotations

import numpy as np
import pytest

from voxflow.models.kokoro.frontend import TokenSegment
from voxflow.models.kokoro.pace import FIXED_TOKENS, RunPace
from voxflow.models.kokoro.pieces import cut_index, split_segment
from voxflow.models.words import PlacedWord, SpokenWord

# "ab cd, ef gh ij." as one token per character; words at positions (pad first) 1-3, 4-7, ...
PHONEMES = "ab cd, ef gh ij."


def segment(phonemes: str = PHONEMES, cut: bool = False, offset_s: float = 0.0) -> TokenSegment:
    ids = np.arange(1, len(phonemes) + 1, dtype=np.int64)
    spans, start = [], 0
    for word in phonemes.split(" "):
        spans.append((start + 1, start + len(word.rstrip(",.")) + 1))
        start += len(word) + 1
    words = tuple(PlacedWord(a, b, 10 * i, 10 * i + 2) for i, (a, b) in enumerate(spans))
    spoken = tuple(SpokenWord((0, i), "w", a, b) for i, (a, b) in enumerate(spans))
    return TokenSegment("text", "en-us", phonemes, ids, spoken, words, cut, offset_s)


def test_the_cut_prefers_punctuation_while_its_head_is_at_least_half_the_largest():
    # spaces at 2, 6, 9 and 12: the comma's head (6 tokens) is half the largest (12)
    assert cut_index(PHONEMES, most=13, least=2) == 6
    assert cut_index(PHONEMES, most=5, least=2) == 2  # "ab": the only head that fits
    # a punctuation head may reach past `most`: "ab cd," (6) within reach 6, not within 5
    assert cut_index(PHONEMES, most=5, least=2, reach=6) == 6
    assert cut_index(PHONEMES, most=5, least=2, reach=5) == 2
    phone = "kˈɔl fˈIv fˈIv fˈIv, wˈʌn tˈu θɹˈi fˈɔɹ tədˈA."  # "Call 555-1234 today."
    assert phone[:cut_index(phone, most=16, least=12, reach=22)] == "kˈɔl fˈIv fˈIv fˈIv,"
    assert phone[:cut_index(phone, most=16, least=12)] == "kˈɔl fˈIv fˈIv"
    long = "ab cd, ef gh ij kl mn op qr st uv."
    assert cut_index(long, most=30, least=2) == 30  # the comma's head, 6 of 30, is too small


def test_both_sides_keep_the_fewest_tokens_or_there_is_no_cut():
    plain = "ab cd ef gh ij"  # spaces at 2, 5, 8, 11
    assert cut_index(plain, most=14, least=3) == 8  # heads "ab" and tails "ij" too short
    assert cut_index(plain, most=14, least=1) == 11
    assert cut_index(plain, most=4, least=3) == 5  # no head of 3..4 tokens: the next, 5
    assert cut_index(plain, most=4, least=6) is None  # "ab cd ef" leaves "gh ij" (5)
    assert cut_index("abcdefgh", most=4, least=1) is None  # no space
    assert cut_index(",, ab", most=2, least=1) is None  # a head with nothing to say


def test_split_keeps_every_token_and_shifts_the_tails_words():
    whole = segment(offset_s=0.5)
    head, tail = split_segment(whole, 6)
    assert head.phonemes == "ab cd," and tail.phonemes == "ef gh ij."
    assert np.array_equal(np.concatenate([head.token_ids, [0], tail.token_ids]),
                          np.concatenate([whole.token_ids[:6], [0], whole.token_ids[7:]]))
    assert [(w.id_start, w.id_end) for w in head.words] == [(1, 3), (4, 6)]
    assert [(w.id_start, w.id_end) for w in tail.words] == [(1, 3), (4, 6), (7, 9)]
    # the tail's first word is the third input word: its text span is kept
    assert [w.text_start for w in tail.words] == [20, 30, 40]
    assert [w.key for w in tail.spoken] == [(0, 2), (0, 3), (0, 4)]
    # each tail word is the same phonemes as before the cut
    for before, after in zip(whole.words[2:], tail.words, strict=True):
        assert (whole.phonemes[before.id_start - 1: before.id_end - 1]
                == tail.phonemes[after.id_start - 1: after.id_end - 1])
    assert head.cut and not tail.cut
    assert head.offset_s == tail.offset_s == 0.5  # the stage adds the head's audio


def test_a_tail_keeps_its_segments_cut_flag():
    _, tail = split_segment(segment(cut=True), 12)
    assert tail.phonemes == "ij." and tail.cut


@pytest.mark.parametrize("at", [0, 1, len(PHONEMES) - 1, 99])
def test_a_cut_outside_an_inner_space_is_refused(at):
    with pytest.raises(ValueError, match="cannot cut 16 phonemes"):
        split_segment(segment(), at)


def test_pace_starts_shared_by_level_and_follows_each_level():
    pace = RunPace(weight=0.5, start=0.02)
    assert pace.seconds(7, runs=1) == pytest.approx((7 + FIXED_TOKENS) * 0.02)
    assert pace.seconds(7, runs=2) == pytest.approx((7 + FIXED_TOKENS) * 0.04)
    assert pace.seconds_per_token(9) == pace.seconds_per_token(4) == pytest.approx(0.08)
    pace.observe(87, 3.0, runs=1)  # 0.03 s per token: halfway from 0.02
    assert pace.seconds_per_token(1) == pytest.approx(0.025)
    assert pace.seconds_per_token(2) == pytest.approx(0.04)  # another level: unchanged
    pace.observe(0, 1.0, runs=1)  # nothing rendered: ignored
    assert pace.seconds_per_token(1) == pytest.approx(0.025)


def test_tokens_within_inverts_the_prediction():
    pace = RunPace(start=0.025)
    assert pace.tokens_within(1.0, runs=1) == 40 - FIXED_TOKENS
    assert pace.seconds(pace.tokens_within(1.0, runs=1), runs=1) <= 1.0
    assert pace.tokens_within(0.2, runs=1) == 0  # not even the fixed part
    assert pace.tokens_within(-1.0, runs=1) == 0


@pytest.mark.parametrize(("weight", "start"), [(0.0, 0.02), (1.5, 0.02), (0.5, 0.0)])
def test_pace_settings_are_checked(weight, start):
    with pytest.raises(ValueError, match="must be"):
        RunPace(weight=weight, start=start)
