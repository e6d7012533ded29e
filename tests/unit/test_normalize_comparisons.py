"""Comparison and equals signs and arrows are read as words (voxflow.text.comparisons)."""

from __future__ import annotations

import pytest

from voxflow.text import normalize_paragraphs, normalize_text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the QA example: espeak dropped both signs ("if five six and seven three, fine")
        ("If 5 < 6 and 7 > 3, fine.", "If 5 is less than 6 and 7 is greater than 3, fine."),
        ("Check 5<6 and 7>3.", "Check 5 is less than 6 and 7 is greater than 3."),
        ("So 5 <= 6, 7 >= 3, 5 ≤ 6 and 7 ≥ 3.",
         "So 5 is less than or equal to 6, 7 is greater than or equal to 3, 5 is less than or "
         "equal to 6 and 7 is greater than or equal to 3."),
        ("Also 5 ≠ 6, 5 != 6, 2 + 2 = 4 and 2+2==4.",
         "Also 5 is not equal to 6, 5 is not equal to 6, 2 + 2 equals 4 and 2+2 equals 4."),
        # single-letter variables, chains, negative and leading-decimal numbers, brackets
        ("Let x = 5, x < y and 1 < x < 5.",
         "Let x equals 5, x is less than y and 1 is less than x is less than 5."),
        ("Then p < .05, x > -2 and (a + b) = 3.",
         "Then p is less than 0.05, x is greater than -2 and (a + b) equals 3."),
        # units and money keep their readings
        ("So 5 km < 6 km and 10% > 5%.",
         "So 5 kilometers is less than 6 kilometers and 10% is greater than 5%."),
        ("Pay x < $5.", "Pay x is less than 5 dollars."),
        # after a word: no "is"
        ("Values < 5 are dropped and age >= 18 is required.",
         "Values less than 5 are dropped and age greater than or equal to 18 is required."),
        # before a number with nothing before it: a quantity
        ("Latency <5 ms (>90%), ≥18 years, ≤ 3 days.",
         "Latency less than 5 milliseconds (more than 90%), at least 18 years, at most 3 days."),
    ],
)  # fmt: skip
def test_comparison_and_equals_signs_are_read_as_words(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Fly Paris -> London, then A → B and x => y.",
         "Fly Paris to London, then A to B and x to y."),
        ("Map input --> output ⇒ done.", "Map input to output to done."),
        # a marker at the start or end, or after punctuation, is dropped
        ("→ Next step. Done. → Read more ->", "Next step. Done. Read more"),
    ],
)  # fmt: skip
def test_rightward_arrows_read_to(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Go to Settings > Privacy > Location.",  # a menu path: no number on either side
        "Use List<T> and Map<K, V> with key=value.",
        "Swap a <-> b and a <=> b.",  # two-way arrows and the spaceship are left
    ],
)
def test_signs_without_numbers_or_variables_are_left(text):
    assert normalize_text(text) == text


def test_heart_emoticon_at_a_sentence_end_is_dropped():
    assert normalize_text("Thanks <3. See you <3") == "Thanks. See you"


def test_comparisons_are_english_only():
    assert normalize_text("Wenn 5 < 6 ist.", lang="de") == "Wenn 5 < 6 ist."


def test_comparison_in_a_list_item_is_not_a_tag():
    assert normalize_paragraphs("Rules:\n- 1 < 2\n- <b>x</b> > 3") == [
        "Rules:",
        "1 is less than 2.",
        "x is greater than 3",
    ]
