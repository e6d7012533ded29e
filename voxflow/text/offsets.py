"""Where each spoken word came from in the request's `input`: code point spans for timestamps.

The normalizer (`voxflow.text.normalize`) rewrites text freely ("$5.50" -> "5 dollars and 50
cents", "Dr." -> "Doctor", markup dropped), so it keeps no offsets. Instead the spoken tokens
(whitespace-separated words of the normalized segments, in reading order) are aligned to the
input's words afterwards:

1. `input_words` splits the input into words: maximal runs of non-space characters, outer
   punctuation stripped ("(hello," -> "hello"), a leading currency sign kept ("$5"), a
   trailing period kept for abbreviations ("Dr.", "U.S.", "e.g."). SSML tags and ``[pause:..]``
   markers are blanked first (same length, so offsets stay those of the input).
2. `align` matches the two word lists by their letters and digits, lower-cased
   (`difflib.SequenceMatcher`, no junk heuristic): equal words pair one to one; a replaced
   stretch ("Dr." / "Doctor", "$5.50" / "5 dollars and 50 cents") pairs its spoken words with
   the input words in proportion, so all of an expansion maps to the one word it came from;
   spoken words with no input counterpart join the previous spoken word's input words.

Limits: a word the expansion shares with the input nearby ("and" in "$5.50 and $3") can be
matched to the wrong side; the span is then still an input word, and times stay in order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher

__all__ = ["align", "input_words", "word_key"]

_TAG_RE = re.compile(r"<[^>]*>")
_PAUSE_RE = re.compile(r"\[\s*pause\s*:[^\]]*\]", re.IGNORECASE)
_LEAD_KEEP = "$£€¥₹#@+-"
_TRAIL_KEEP = "%°"
# Abbreviations whose period belongs to the word (`voxflow.text.normalize` expands most).
_ABBREVIATIONS = frozenset(
    "dr mr mrs ms prof gen capt col lt sgt rev gov sen rep pres mt st jr sr vs etc inc ltd co "
    "no nos fig figs vol ch chap sec eq pp jan feb mar apr jun jul aug sep sept oct nov dec"
    .split()
)


def word_key(word: str) -> str:
    """The letters and digits of `word`, lower-cased: what two spellings must share to match."""
    return "".join(ch for ch in word.lower() if ch.isalnum())


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """(start, end) of the word inside the non-space run text[start:end], outer punctuation
    stripped; start == end when nothing word-like is left."""
    while start < end and not (text[start].isalnum() or text[start] in _LEAD_KEEP):
        start += 1
    while start < end and not (text[end - 1].isalnum() or text[end - 1] in _TRAIL_KEEP):
        end -= 1
    if start < end and end < len(text) and text[end] == ".":
        core = text[start:end]
        if "." in core or core.lower() in _ABBREVIATIONS:
            end += 1
    return start, end


def input_words(text: str, ssml: bool = False) -> list[tuple[int, int]]:
    """Code point spans (start, end) of the words of a request's `input`, in order.

    Args:
        text: the request's `input`, as sent.
        ssml: True when it is SSML: tags are not words.
    Returns:
        Non-empty, non-overlapping spans; ``text[start:end]`` is the word as typed.
    """
    blanked = _PAUSE_RE.sub(_blank, _TAG_RE.sub(_blank, text) if ssml else text)
    spans = []
    for m in re.finditer(r"\S+", blanked):
        start, end = _trim(blanked, m.start(), m.end())
        if start < end:
            spans.append((start, end))
    return spans


def align(written: Sequence[str], spoken: Sequence[str]) -> list[tuple[int, int]]:
    """For each spoken token, the input words it speaks, as a range of indices into `written`.

    Args:
        written: the input's words (`input_words`' spans, as text).
        spoken: the normalized text's tokens in reading order.
    Returns:
        One (first, last + 1) index range per spoken token, never empty, first indices
        non-decreasing; [] when `written` is empty.
    """
    if not written:
        return []
    a = [word_key(w) for w in written]
    b = [word_key(w) for w in spoken]
    ranges: list[tuple[int, int] | None] = [None] * len(b)
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(j2 - j1):
                ranges[j1 + k] = (i1 + k, i1 + k + 1)
        elif tag == "replace":
            ni, nj = i2 - i1, j2 - j1
            for k in range(nj):
                lo = i1 + k * ni // nj
                hi = max(i1 + (k + 1) * ni // nj, lo + 1)
                ranges[j1 + k] = (lo, hi)
    # spoken tokens with no written counterpart join their neighbour (previous, else next)
    previous: tuple[int, int] | None = None
    for j, r in enumerate(ranges):
        if r is None:
            ranges[j] = previous
        else:
            previous = r
    following = next((r for r in ranges if r is not None), (0, 1))
    return [r if r is not None else following for r in ranges]
