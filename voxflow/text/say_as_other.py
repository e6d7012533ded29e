"""SSML ``<say-as>`` for requests read in a language other than English.

English words inside a Japanese sentence are read as English by nobody: the Japanese front end
either spells them in katakana or drops them. So `spell_out` writes the content the way the
request's language writes it. `voxflow.text.say_as.expand_say_as` has already checked the
content (the same 400s in every language) before it calls this.

Japanese ("ja") is written for Kokoro's Japanese front end (OpenJTalk readings through misaki's
romanizer), which reads kanji numerals with their counters correctly (三月五日 "saŋɡaʦɨ
iʦɨka", 千二百三十四点五) but reads every run of ASCII digits as one cardinal, drops a lone
Latin letter, misreads "3月5日" ("saɴ ʦɨkʲi ɡoʥiʦɨ") and "1,234.5" (the decimals are lost),
and reads ten or more digits as an English error message. Hence:

=============================  ===================================  =========================
interpret-as                   Japanese                             any other language
=============================  ===================================  =========================
``cardinal``, ``number``       kanji numerals (num2words ``ja``):   as written
                               ``1234`` 千二百三十四, ``-5``
                               マイナス五, ``2.5`` 二点五
``ordinal``                    ``3`` 三番目 ("the third")           as written
``digits``                     ``1234`` "1 2 3 4" (one digit each)  "1 2 3 4"
``telephone``                  ``555-1234`` "5 5 5、1 2 3 4",       "5 5 5, 1 2 3 4"
                               ``+`` プラス
``characters``                 Latin letters by their katakana      characters separated by
                               names (``ABC`` "エー ビー シー"),    spaces
                               symbols by name (ハイフン, ドット),
                               digits and kana/kanji one by one
``date``                       year, month, day in kanji with       as written
                               counters, always in that order
                               (``3/5/2024`` 二千二十四年三月五日)
=============================  ===================================  =========================

A language other than these has no front end in voxflow yet; its rule is the minimal one that
keeps the content readable by a front end that reads digits: numbers and dates as written,
digit strings one digit at a time.
"""

from __future__ import annotations

import unicodedata
from decimal import Decimal

from num2words import num2words

from voxflow.errors import clip
from voxflow.text.say_as import (
    SayAsError,
    cardinal_value,
    date_fields,
    digit_string,
    ordinal_value,
    telephone_groups,
)

__all__ = ["JAPANESE_LETTER_NAMES", "spell_out"]

# The Latin letters' names as Japanese speakers say them (the usual katakana readings, e.g. in
# NHK's broadcast style: "ABC" エービーシー, "Z" ゼット).
JAPANESE_LETTER_NAMES = dict(
    zip(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "エー ビー シー ディー イー エフ ジー エイチ アイ ジェー ケー エル エム エヌ オー ピー "
        "キュー アール エス ティー ユー ブイ ダブリュー エックス ワイ ゼット".split(),
        strict=True,
    )
)
# Symbols named when spelled out in Japanese (the English rule's set); other punctuation is
# skipped.
_JAPANESE_SYMBOLS = {
    "-": "ハイフン", "_": "アンダーバー", ".": "ドット", "@": "アット", "/": "スラッシュ",
    "+": "プラス", "&": "アンド", "#": "シャープ", "*": "アスタリスク", "%": "パーセント",
}  # fmt: skip


def _kanji_number(value: int | Decimal) -> str:
    try:
        return num2words(value, lang="ja")
    except (ArithmeticError, NotImplementedError, ValueError) as exc:
        raise SayAsError(f"the number {clip(str(value))} is too large to read") from exc


def _japanese_characters(content: str) -> str:
    names = []
    for ch in content:
        if ch.isspace():
            continue
        plain = unicodedata.normalize("NFKC", ch)  # full-width "Ａ" is "A"
        if plain.isascii() and plain.isalpha():
            names.append(JAPANESE_LETTER_NAMES[plain.upper()])
        elif ch.isalnum():
            names.append(plain)
        elif plain in _JAPANESE_SYMBOLS:
            names.append(_JAPANESE_SYMBOLS[plain])
    return " ".join(names)


def _japanese_date(content: str, date_format: str | None) -> str:
    fields = date_fields(content, date_format)
    parts = []
    for letter, counter in (("y", "年"), ("m", "月"), ("d", "日")):
        if letter in fields:
            parts.append(_kanji_number(int(fields[letter])) + counter)
    return "".join(parts)


def _telephone(content: str, separator: str, plus: str) -> str:
    spoken = separator.join(" ".join(group) for group in telephone_groups(content))
    return f"{plus}{spoken}" if content.startswith("+") else spoken


def _japanese(interpret_as: str, content: str, date_format: str | None) -> str:
    if interpret_as in ("cardinal", "number"):
        return _kanji_number(cardinal_value(content))
    if interpret_as == "ordinal":
        return num2words(ordinal_value(content), lang="ja", to="ordinal")
    if interpret_as == "digits":
        return " ".join(digit_string(content))
    if interpret_as == "telephone":
        return _telephone(content, "、", "プラス ")
    if interpret_as == "date":
        return _japanese_date(content, date_format)
    return _japanese_characters(content)


def _as_written(interpret_as: str, content: str) -> str:
    if interpret_as == "digits":
        return " ".join(digit_string(content))
    if interpret_as == "telephone":
        return _telephone(content, ", ", "+")
    if interpret_as in ("characters", "spell-out", "verbatim"):
        return " ".join(ch for ch in content if not ch.isspace())
    return content


def spell_out(interpret_as: str, content: str, date_format: str | None, language: str) -> str:
    """The content of a checked ``<say-as>`` written for `language` (see the module table).

    Args:
        interpret_as: one of `voxflow.text.say_as.INTERPRETATIONS` (lower case).
        content: the element's text, whitespace collapsed.
        date_format: ``format`` for ``date``.
        language: a primary language subtag other than "en" ("ja", "fr", ...).
    Returns:
        Text for the language's front end.
    Raises:
        SayAsError: content that does not fit the interpretation (normally already refused).
    """
    if language == "ja":
        return _japanese(interpret_as, content, date_format)
    return _as_written(interpret_as, content)
