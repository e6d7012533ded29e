"""Line breaks end sentences unless the text is evidently wrapped (voxflow.text.lines)."""

from __future__ import annotations

import pytest

from voxflow.text import normalize_paragraphs, normalize_text, segment_text, split_sentences
from voxflow.text.lines import end_sentence


def test_shopping_list_on_four_lines_is_four_sentences():
    # the example: one audible pause for four lines before
    text = "Shopping list:\nApples\nPears\nPlums"
    assert normalize_paragraphs(text) == ["Shopping list:", "Apples.", "Pears.", "Plums"]
    assert segment_text(text, 100) == ["Shopping list:", "Apples.", "Pears.", "Plums"]
    assert normalize_text(text) == "Shopping list: Apples. Pears. Plums"


@pytest.mark.parametrize(
    ("raw", "sentences"),
    [
        ("Roses are red\nViolets are blue", ["Roses are red.", "Violets are blue"]),
        ("We need:\neggs\nmilk\nbread", ["We need:", "eggs.", "milk.", "bread"]),
        ("Ingredients:\n2 eggs\n1 cup of flour", ["Ingredients:", "2 eggs.", "1 cup of flour"]),
        ("Done!\nNext?\nYes…\nFine;\nOK", ["Done!", "Next?", "Yes...", "Fine; OK"]),
        ('He said "hi"\nShe left', ['He said "hi".', "She left"]),
        ("Windows\r\nline\rends", ["Windows line ends"]),  # lower case: wrapped
        ("今日は\n晴れです", ["今日は。", "晴れです"]),
    ],
)
def test_each_line_is_a_sentence(raw, sentences):
    assert split_sentences(raw) == sentences


@pytest.mark.parametrize(
    ("raw", "sentences"),
    [
        # hard-wrapped prose: the next line starts in lower case, or the line ends with , ; - (
        ("The quick brown fox jumps over\nthe lazy dog and runs\naway.",
         ["The quick brown fox jumps over the lazy dog and runs away."]),
        ("Dear Ann,\nThanks for the note.\nBest,\nBob",
         ["Dear Ann, Thanks for the note.", "Best, Bob"]),
        ("A list of (\nthings) here.", ["A list of ( things) here."]),
        ("- a first item that\n  wraps onto two lines\n- second", [
            "a first item that wraps onto two lines.", "second"]),
    ],
)  # fmt: skip
def test_wrapped_lines_stay_one_sentence(raw, sentences):
    assert split_sentences(raw) == sentences


@pytest.mark.parametrize(
    ("block", "ended"),
    [
        ("Apples", "Apples."),
        ("Apples.", "Apples."),
        ("Why?", "Why?"),
        ("Note:", "Note:"),
        ("Hello,", "Hello."),
        ('He said "hi"', 'He said "hi".'),
        ('He said "hi."', 'He said "hi."'),
        ("(see above)", "(see above)."),
        ("नमस्ते।", "नमस्ते।"),
        ("北京", "北京。"),
    ],
)
def test_end_sentence(block, ended):
    assert end_sentence(block) == ended


def test_last_block_gets_no_period():
    assert normalize_paragraphs("One\n\nTwo") == ["One.", "Two"]
    assert normalize_text("No final punctuation") == "No final punctuation"


def test_flattened_lines_segment_like_the_lines():
    # (pysbd does not end a sentence at ":", so a "list:" line would join its first item)
    text = "Apples\nPears\nPlums\n\n# Notes\nBuy early"
    once = normalize_text(text)
    assert once == "Apples. Pears. Plums. Notes. Buy early"
    assert normalize_text(once) == once
    assert segment_text(once, 100) == segment_text(text, 100)
