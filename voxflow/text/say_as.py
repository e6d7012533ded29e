"""SSML ``<say-as>``: the content of one element spelled out in the request's language.

`expand_say_as(interpret_as, content, date_format, language)` spells the content out for the
language the request is read in (`voxflow.text.say_as_other` for languages other than
English, and None for the content as written, which is what the language is decided from).
In English it returns words that the English normalization (`voxflow.text.normalize`)
leaves as they are (no digits, no symbols), so the run that holds them keeps
``normalize=True``. Content that does not fit the interpretation raises
`SayAsError` (a `ValueError`); the SSML parser turns it into a 400 that names the element's
line and column.

=============================  ========================  =======================================
interpret-as                   content                   English words
=============================  ========================  =======================================
``characters``, ``spell-out``  any text                  ``ABC`` -> "eh B C", ``R2`` -> "R two"
(``verbatim``)
``cardinal``, ``number``       ``1234``, ``-5``,         num2words: "one thousand two hundred
                               ``1,234.5``               and thirty-four", "minus five"
``ordinal``                    ``3``, ``3rd``, ``21st``  "third", "twenty-first"
``digits``                     ``123``                   "one two three"
``date`` (``format``)          ``3/5/2024`` (``mdy``)    "March fifth, twenty twenty-four"
``telephone``                  ``555-1234``              "five five five, one two three four"
=============================  ========================  =======================================

Letters are read by their English names. espeak-ng (the G2P of both families' English) reads a
lone ``A`` between other letters as the article ("uh": ``B A C`` -> /biː ɐ siː/), so the letter
A is written ``eh``, which it reads /eɪ/ everywhere. Whitespace is skipped; a few symbols are
named ("dash", "dot", ...); other punctuation is skipped.

Years are read in pairs (1999 "nineteen ninety-nine", 2024 "twenty twenty-four", 1905
"nineteen oh five", 1900 "nineteen hundred"), except 2000-2009 and 1000-1009 ("two thousand
five"), the way English speakers say them. Two-digit years read as a pair ("24" "twenty-four",
"05" "oh five"). Every date format is read month first, American style, whatever the order
of the fields in the text (``format`` only says how to read the digits).
"""

from __future__ import annotations

import calendar
import re
from decimal import Decimal, InvalidOperation

from num2words import num2words

from voxflow.errors import clip, echo

__all__ = [
    "DATE_FORMATS",
    "INTERPRETATIONS",
    "SayAsError",
    "cardinal_value",
    "date_fields",
    "digit_string",
    "expand_say_as",
    "ordinal_value",
    "telephone_groups",
]

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# Symbols named when spelled out; other punctuation is skipped.
_SYMBOL_WORDS = {
    "-": "dash", "_": "underscore", ".": "dot", "@": "at", "/": "slash", "+": "plus",
    "&": "and", "#": "hash", "*": "star", "%": "percent",
}  # fmt: skip

DATE_FORMATS = ("mdy", "dmy", "ymd", "md", "dm", "ym", "my", "d", "m", "y")

_CARDINAL_RE = re.compile(r"([+-]?)((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)")
_ORDINAL_RE = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th)?", re.IGNORECASE)
_DATE_RE = re.compile(r"\d+(?:[/.\- ]\d+)*")
_TELEPHONE_RE = re.compile(r"\+?[\d().\-/ ]+")


class SayAsError(ValueError):
    """The content does not fit the interpretation; the message says why, in a sentence."""


def _cardinal_words(value: int | Decimal) -> str:
    """num2words' English reading without its grouping commas (a comma is a pause)."""
    try:
        return num2words(value).replace(",", "")
    except (ArithmeticError, NotImplementedError, ValueError) as exc:
        raise SayAsError(f"the number {clip(str(value))} is too large to read") from exc


def _characters(content: str) -> str:
    words = []
    for ch in content:
        if ch.isspace():
            continue
        if ch.isascii() and ch.isdigit():
            words.append(DIGIT_WORDS[int(ch)])
        elif ch in "aA":
            words.append("eh")
        elif ch.isalnum():
            words.append(ch.upper())
        elif ch in _SYMBOL_WORDS:
            words.append(_SYMBOL_WORDS[ch])
    if not words:
        raise SayAsError(f"{echo(content)} has no letters or digits to spell out")
    return " ".join(words)


def cardinal_value(content: str) -> int | Decimal:
    """The number a ``cardinal`` content stands for ("-1,234.5" -> Decimal("-1234.5")).

    Raises:
        SayAsError: not digits with an optional sign, thousands commas and decimals.
    """
    m = _CARDINAL_RE.fullmatch(content)
    if not m:
        raise SayAsError(
            f"{echo(content)} is not a number (digits with an optional sign, thousands commas "
            "and decimals, like -1,234.5)"
        )
    try:
        value = Decimal(m.group(2).replace(",", ""))
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise SayAsError(f"{echo(content)} is not a number") from exc
    if m.group(1) == "-" and value != 0:
        value = -value
    return value if "." in m.group(2) else int(value)


def _cardinal(content: str) -> str:
    return _cardinal_words(cardinal_value(content))


def ordinal_value(content: str) -> int:
    """The whole number of an ``ordinal`` content ("21st" -> 21).

    Raises:
        SayAsError: not a whole number with an optional English suffix.
    """
    m = _ORDINAL_RE.fullmatch(content)
    if not m:
        raise SayAsError(f"{echo(content)} is not an ordinal (a whole number like 3 or 3rd)")
    return int(m.group(1).replace(",", ""))


def _ordinal(content: str) -> str:
    value = ordinal_value(content)
    try:
        return num2words(value, to="ordinal").replace(",", "")
    except (ArithmeticError, NotImplementedError, ValueError) as exc:
        raise SayAsError(f"the ordinal {clip(content)} is too large to read") from exc


def digit_string(content: str) -> str:
    """The digits of a ``digits`` content, spaces removed ("12 34" -> "1234").

    Raises:
        SayAsError: anything but ASCII digits and spaces, or nothing.
    """
    chars = "".join(content.split())
    if not chars or not (chars.isascii() and chars.isdigit()):
        raise SayAsError(f"{echo(content)} is not a string of digits 0-9")
    return chars


def _digits(content: str) -> str:
    return " ".join(DIGIT_WORDS[int(d)] for d in digit_string(content))


def telephone_groups(content: str) -> list[str]:
    """The digit groups of a ``telephone`` content ("+1 (555) 010" -> ["1", "555", "010"]).

    Raises:
        SayAsError: characters other than digits, spaces, ``( ) . - /`` and a leading ``+``.
    """
    if not _TELEPHONE_RE.fullmatch(content) or not any(c.isdigit() for c in content):
        raise SayAsError(
            f"{echo(content)} is not a telephone number (digits grouped by spaces, dashes, dots, "
            "slashes or parentheses, with an optional leading +)"
        )
    return re.findall(r"\d+", content)


def _telephone(content: str) -> str:
    groups = telephone_groups(content)
    words = ", ".join(" ".join(DIGIT_WORDS[int(d)] for d in group) for group in groups)
    return f"plus {words}" if content.startswith("+") else words


def year_words(digits: str) -> str:
    """A year as English speakers say it, from its digits (see the module docstring)."""
    year = int(digits)
    if len(digits) == 2:
        return f"oh {DIGIT_WORDS[year]}" if year < 10 else _cardinal_words(year)
    if len(digits) != 4 or year < 1000:
        return _cardinal_words(year)
    century, rest = divmod(year, 100)
    if year % 1000 < 10:  # 2000-2009, 1000-1009: "two thousand five"
        thousands = f"{_cardinal_words(year // 1000)} thousand"
        return f"{thousands} {_cardinal_words(year % 1000)}" if year % 1000 else thousands
    if rest == 0:
        return f"{_cardinal_words(century)} hundred"
    if rest < 10:
        return f"{_cardinal_words(century)} oh {DIGIT_WORDS[rest]}"
    return f"{_cardinal_words(century)} {_cardinal_words(rest)}"


def date_fields(content: str, date_format: str | None) -> dict[str, str]:
    """The fields of a numeric date by letter (``m``, ``d``, ``y``) -> their digits, checked
    (month 1-12, day within the month; format default ``mdy``).

    Raises:
        SayAsError: an unknown format, the wrong number of fields, a month or day out of range.
    """
    fmt = (date_format or "mdy").lower()
    if fmt not in DATE_FORMATS:
        raise SayAsError(f"date format {echo(date_format)} is not one of {', '.join(DATE_FORMATS)}")
    numbers = re.findall(r"\d+", content)
    if not _DATE_RE.fullmatch(content) or len(numbers) != len(fmt):
        raise SayAsError(
            f"{echo(content)} is not a date of format '{fmt}' ({len(fmt)} numbers separated by "
            "'/', '-', '.' or a space)"
        )
    fields = dict(zip(fmt, numbers, strict=True))
    month = int(fields.get("m", "1"))
    if not 1 <= month <= 12:
        raise SayAsError(f"{echo(content)} has month {month}, not 1 to 12")
    # Without a four-digit year, February has 29 days (a leap year allows the most).
    year = int(fields["y"]) if len(fields.get("y", "")) == 4 else 2000
    last = calendar.monthrange(year, month)[1] if "m" in fields else 31
    if "d" in fields and not 1 <= int(fields["d"]) <= last:
        raise SayAsError(f"{echo(content)} has day {int(fields['d'])}, not 1 to {last}")
    return fields


def _date(content: str, date_format: str | None) -> str:
    fields = date_fields(content, date_format)
    month = calendar.month_name[int(fields["m"])] if "m" in fields else ""
    day = num2words(int(fields["d"]), to="ordinal") if "d" in fields else ""
    year = year_words(fields["y"]) if "y" in fields else ""
    if not month:
        return f"the {day}" if day else year
    spoken = f"{month} {day}" if day else month
    if year:
        return f"{spoken}, {year}" if day else f"{spoken} {year}"
    return spoken


_EXPANDERS = {
    "characters": _characters,
    "spell-out": _characters,
    "verbatim": _characters,
    "cardinal": _cardinal,
    "number": _cardinal,
    "ordinal": _ordinal,
    "digits": _digits,
    "telephone": _telephone,
}
INTERPRETATIONS = (*_EXPANDERS, "date")


def expand_say_as(
    interpret_as: str, content: str, date_format: str | None = None, language: str | None = "en"
) -> str:
    """The words to speak for ``<say-as interpret-as=... format=...>content</say-as>``.

    Args:
        interpret_as: one of `INTERPRETATIONS` (lower case).
        content: the element's text; leading, trailing and repeated whitespace is ignored.
        date_format: ``format`` for ``date`` (one of `DATE_FORMATS`, default ``mdy``);
            ignored by the other interpretations.
        language: the tag of the language the request is read in; only its primary subtag
            counts. "en" (the default): English words. Another: `voxflow.text.say_as_other`
            (Japanese forms for "ja", else the content nearly as written). None: the content
            as written (whitespace collapsed), for deciding the request's language.

    Returns:
        In English, words, letters and punctuation (``,``) only: no digits.

    Raises:
        SayAsError: an unknown interpretation, or content that does not fit it (letters for
            ``cardinal``, month 13 for ``date``, ...).
    """
    text = " ".join(content.split())
    if not text:
        raise SayAsError("the element is empty")
    if interpret_as not in INTERPRETATIONS:
        raise SayAsError(
            f"interpret-as '{interpret_as}' is not supported (supported: "
            f"{', '.join(INTERPRETATIONS)})"
        )
    # The English reading checks the content for every language, so a fault is the same 400.
    words = _date(text, date_format) if interpret_as == "date" else _EXPANDERS[interpret_as](text)
    if language is None:
        return text
    primary = language.strip().lower().replace("_", "-").split("-")[0]
    if primary == "en":
        return words
    from voxflow.text.say_as_other import spell_out  # imports this module's parsers

    return spell_out(interpret_as, text, date_format, primary)
