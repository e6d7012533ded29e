"""Input words and the alignment of normalized tokens back to them (voxflow.text.offsets)."""

from __future__ import annotations

from voxflow.text.offsets import align, input_words


def words(text: str, ssml: bool = False) -> list[str]:
    return [text[a:b] for a, b in input_words(text, ssml)]


def test_input_words_keep_abbreviations_and_currency_and_drop_outer_punctuation():
    text = '  Dr. Smith paid $5.50 on 3/4. "Really?" (U.S., e.g. 50%) -- ok'
    assert words(text) == ["Dr.", "Smith", "paid", "$5.50", "on", "3/4", "Really", "U.S.",
                           "e.g.", "50%", "ok"]


def test_input_words_skip_tags_and_pause_markers_keeping_offsets():
    ssml = '<speak>Hi <break time="1s"/><emphasis>there</emphasis>.</speak>'
    spans = input_words(ssml, ssml=True)
    assert [ssml[a:b] for a, b in spans] == ["Hi", "there"]
    assert words("one [pause:1s] two") == ["one", "two"]


def test_align_maps_expansions_to_the_word_they_came_from():
    written = ["Dr.", "Smith", "paid", "$5.50", "on", "3/4"]
    spoken = "Doctor Smith paid 5 dollars and 50 cents on 3/4.".split()
    ranges = align(written, spoken)
    assert [written[a] for a, _ in ranges] == [
        "Dr.", "Smith", "paid", "$5.50", "$5.50", "$5.50", "$5.50", "$5.50", "on", "3/4"]


def test_align_joins_unmatched_spoken_tokens_to_the_previous_one():
    ranges = align(["hello", "world"], ["uh", "hello", "extra", "world"])
    assert ranges == [(0, 1), (0, 1), (0, 1), (1, 2)]


def test_align_covers_several_written_words_with_one_spoken_token():
    assert align(["a", "b", "c"], ["a", "x", "c"]) == [(0, 1), (1, 2), (2, 3)]
    assert align(["w1", "w2", "end"], ["joined", "end"]) == [(0, 2), (2, 3)]
