"""English: comparison signs, equals signs and arrows, spelled out as words.

espeak-ng (en-us, piper-tts 1.8.0) drops ``<`` and ``>`` without a sound: ``If 5 < 6 and 7 >
3, fine.`` is read "if five six and seven three, fine", ``5<6`` "five six", ``x < 5`` "ex five".
It drops ``->`` and ``⇒`` too (``A -> B`` "A B") and reads ``→`` as "right arrow". It reads the
others, but unevenly: ``<=`` "less or equal" (no "to"), ``≤`` "less or equal to", ``≠`` "not
equal to", ``=`` "equals". So all of them are rewritten, one consistent reading:

=================  ==============================  ======================  ===================
sign               after a number, a single        after another word      before a number,
                   letter or ``)`` (``5 < 6``,     (``age > 18``)          nothing before it
                   ``x = 5``)                                              (``<5 ms``)
=================  ==============================  ======================  ===================
``<``              is less than                    less than               less than
``>``              is greater than                 greater than            more than
``<=`` ``≤``       is less than or equal to        less than or equal to   at most
``>=`` ``≥``       is greater than or equal to     greater than or         at least
                                                   equal to
``!=`` ``≠``       is not equal to                 not equal to            (left)
``=`` ``==``       equals                          equals                  (left)
=================  ==============================  ======================  ===================

Rules:

- Between two operands (infix): the sign has a space on both sides or on neither (``5 < 6``,
  ``x<5``; not ``I <3 you``). The operand before it is a number (optionally with a unit symbol:
  ``5 km < 6 km``; or a percentage, or money), a single letter, a closing bracket, or a word;
  the operand after it is a number (``-5``, ``.5``, ``$5``, ``50%``) or a single letter. At
  least one side must be a number, or both single letters (``x < y``): ``Settings > Privacy``
  (a menu path), ``List<T>`` and ``key=value`` are left. "is" is said only after a number, a
  letter or a bracket (``values < 5 are dropped`` reads "values less than 5 are dropped").
- Before a number with no operand before it (start of text, after a space or ``(``): ``<5 ms``
  "less than 5 ms", ``(>90%)`` "(more than 90%)", ``≥18`` "at least 18". Known limit: the
  emoticon ``I <3 you`` reads "I less than 3 you"; a ``<3`` that ends a sentence (``thanks
  <3``) is dropped as an emoticon.
- Arrows ``->``, ``-->``, ``=>``, ``→``, ``⟶``, ``⇒``, ``⟹`` between two words read "to"
  (``Paris -> London``, ``input → output``); one at the start or end of the text or next to
  punctuation (a bullet, a "next" link) is dropped. Leftward and two-way arrows are left.

Markup that looks like a tag (``<b>``, ``<custom>x</custom>``) is removed before these rules
(`voxflow.text.markdown`); a ``<`` followed by a space or digit is never a tag.
"""

from __future__ import annotations

import re

from voxflow.text.units import UNITS

__all__ = ["spell_arrows", "spell_comparisons"]

# sign -> (after a number/letter/bracket, after a word, before a number with nothing before)
_SIGNS: dict[str, tuple[str, str, str]] = {
    "<": ("is less than", "less than", "less than"),
    ">": ("is greater than", "greater than", "more than"),
    "<=": ("is less than or equal to", "less than or equal to", "at most"),
    ">=": ("is greater than or equal to", "greater than or equal to", "at least"),
    "!=": ("is not equal to", "not equal to", ""),
    "=": ("equals", "equals", ""),
}
_ALIASES = {"≤": "<=", "≦": "<=", "≥": ">=", "≧": ">=", "≠": "!=", "==": "="}
_SIGN = r"<=|>=|!=|==|[<>≤≦≥≧≠=]"

_NUMBER = r"[-+]?[$£€¥₹]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?|[-+]?\.\d+%?"
_UNIT_SYMBOLS = "|".join(sorted((re.escape(u) for u in UNITS), key=len, reverse=True))
# Operand before the sign: a number (with a unit symbol), a word or letter, a closing bracket.
_LEFT = (
    rf"(?:(?<![\w.,])(?P<num>{_NUMBER})(?:\s?(?:{_UNIT_SYMBOLS}))?(?![\w'])"
    r"|(?<![\w'])(?P<word>[^\W\d_][\w']*)|(?P<close>[)\]]))"
)
# Operand after the sign (not consumed, so chains work: "1 < x < 5").
_RIGHT = r"(?=(?P<rnum>" + _NUMBER + r")|(?P<rletter>[^\W\d_])(?![\w']))"
_INFIX_RE = re.compile(rf"{_LEFT}(?P<sp1>\s?)(?P<sign>{_SIGN})(?![<>=])(?P<sp2>\s?){_RIGHT}")
_PREFIX_RE = re.compile(rf"(?:^|(?<=[\s(\[]))(<=|>=|[<>≤≦≥≧])(?![<>=])\s?(?={_NUMBER})")
_HEART_RE = re.compile(r"(?:^|(?<=\s))<3+(?=\s*(?:[.!?,;:)]|$))")

_ARROW_RE = re.compile(r"\s*(?<![<=!-])(?:-{1,2}>|=>|[→⟶⇒⟹])(?![>=])\s*")


def _infix(m: re.Match[str]) -> str:
    sign = _ALIASES.get(m.group("sign"), m.group("sign"))
    if bool(m.group("sp1")) != bool(m.group("sp2")):
        return m.group(0)  # "I <3 you", "a >b": not spaced like a comparison
    word = m.group("word")
    letter_left = word is not None and len(word) == 1
    if m.group("rletter") is not None and not (letter_left or m.group("num")):
        return m.group(0)  # "List<T>", "Settings > Privacy", "key=value"
    if m.group("rnum") is None and m.group("num") is None and not letter_left:
        return m.group(0)
    math, prose, _ = _SIGNS[sign]
    left = m.group(0)[: m.start("sp1") - m.start()]
    return f"{left} {prose if word is not None and not letter_left else math} "


def _prefix(m: re.Match[str]) -> str:
    sign = _ALIASES.get(m.group(1), m.group(1))
    return _SIGNS[sign][2] + " "


def spell_comparisons(text: str) -> str:
    """``If 5 < 6 and 7 > 3`` -> ``If 5 is less than 6 and 7 is greater than 3``, ``x = 5``
    -> ``x equals 5``, ``latency <5 ms`` -> ``latency less than 5 ms`` (rules and readings in
    the module docstring). Text without these signs is returned unchanged."""
    if not any(ch in text for ch in "<>=≤≦≥≧≠"):
        return text
    text = _HEART_RE.sub("", text)
    text = _INFIX_RE.sub(_infix, text)
    return _PREFIX_RE.sub(_prefix, text)


def _arrow(m: re.Match[str]) -> str:
    before, after = m.string[: m.start()].rstrip(), m.string[m.end() :].lstrip()
    if not before or not after:
        return ""  # "→ Next step", "Next ->": a marker, not a relation
    if before[-1] in ".!?:;," or after[0] in ".!?:;,)":
        return " "  # "Done. → Next": a marker after punctuation
    return " to "


def spell_arrows(text: str) -> str:
    """``Paris -> London`` -> ``Paris to London``; a leading or trailing arrow is dropped
    (rules in the module docstring)."""
    if "->" not in text and "=>" not in text and not any(ch in text for ch in "→⟶⇒⟹"):
        return text
    return _ARROW_RE.sub(_arrow, text).strip()
