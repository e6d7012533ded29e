"""English normalization of Roman numerals after titles and names (voxflow.text.roman)."""

from __future__ import annotations

import pytest

from voxflow.text import normalize_text
from voxflow.text.roman import to_cardinal_words, to_ordinal_words


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # after a title word: a cardinal
        ("World War II ended.", "World War Two ended."),
        ("World War I began.", "World War One began."),
        ("Read Chapter IV, Part III, Book II, Act V and Volume XII.",
         "Read Chapter Four, Part Three, Book Two, Act Five and Volume Twelve."),
        ("See chapter iv and Vol. II.", "See chapter four and Volume Two."),
        ("Part I is short.", "Part One is short."),
        ("Super Bowl LVII, Title IX and Stage IV cancer.",
         "Super Bowl Fifty-Seven, Title Nine and Stage Four cancer."),
        ("World War II-era tanks.", "World War Two-era tanks."),
        # after a ruler's name: a regnal ordinal
        ("Henry VIII had six wives.", "Henry the Eighth had six wives."),
        ("Elizabeth II met Louis XIV.", "Elizabeth the Second met Louis the Fourteenth."),
        ("Pope John Paul II spoke.", "Pope John Paul the Second spoke."),
        ("Henry VIII's wives.", "Henry the Eighth's wives."),
        ("Elizabeth I was crowned.", "Elizabeth the First was crowned."),
        ("King Zog I and John Smith III.", "King Zog the First and John Smith the Third."),
        # after another capitalised word: a sequel, a cardinal
        ("Rocky III and Final Fantasy VII.", "Rocky Three and Final Fantasy Seven."),
        ("Grand Theft Auto V.", "Grand Theft Auto Five."),
    ],
)  # fmt: skip
def test_numerals_in_context(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I am here and I'm sure I'll go.",  # the pronoun, also sentence-initial
        "Did I? Yes, I did.",
        "Elizabeth I think so.",  # a word only the pronoun takes follows
        "MIX, CIVIL, DIV, LID, MI.",  # upper-case words that are (or look like) numerals
        "The MIX and DIV tags in Washington DC.",
        "Generation X and Malcolm X.",  # X only after titles and rulers
        "Jane V. Doe pressed Ctrl V.",  # an initial and a key
        "Give an IV drip.",  # after a lower-case word
        "See Appendix C.",  # single C, D, L, M are letters
        "We met at part mix.",  # lower case: only i, v, x numerals after a title
        "He met Smith. VIII was the score.",  # a sentence ends before the numeral
    ],
)
def test_words_and_pronoun_stay(text):
    assert normalize_text(text) == text


def test_numerals_not_rewritten_outside_english():
    assert normalize_text("Heinrich VIII. und der Zweite Weltkrieg II.", lang="de") == (
        "Heinrich VIII. und der Zweite Weltkrieg II."
    )


@pytest.mark.parametrize(
    ("n", "cardinal", "ordinal"),
    [(1, "one", "first"), (8, "eight", "eighth"), (12, "twelve", "twelfth"),
     (20, "twenty", "twentieth"), (23, "twenty-three", "twenty-third"),
     (39, "thirty-nine", "thirty-ninth")],
)  # fmt: skip
def test_number_words(n, cardinal, ordinal):
    assert to_cardinal_words(n) == cardinal
    assert to_ordinal_words(n) == ordinal


def test_large_cardinals():
    assert to_cardinal_words(399) == "three hundred ninety-nine"
    assert to_cardinal_words(1999) == "one thousand nine hundred ninety-nine"
