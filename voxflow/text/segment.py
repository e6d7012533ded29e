"""Sentence splitting and length-capped segmentation of request text.

All lengths are in characters, i.e. Unicode code points (``len(str)``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import NamedTuple

import pysbd
import pysbd.languages

from voxflow.text.normalize import has_speakable_content, normalize_paragraphs

__all__ = [
    "MIN_FIRST_MAX_CHARS",
    "MIN_MAX_CHARS",
    "cut_within",
    "last_pause_end",
    "Segment",
    "segment_pieces",
    "segment_text",
    "sentence_spans",
    "split_sentences",
]

MIN_MAX_CHARS = 20
MIN_FIRST_MAX_CHARS = 10

# Clause boundaries, where a long sentence is cut first: after clause punctuation (optionally
# followed by closing quotes/brackets) that is followed by a space, or after CJK punctuation
# followed directly by the next character (those scripts write no space). Em dashes are already
# ", " after normalization. "." is not here: after "U.S." or "e.g." it is no boundary.
_CLOSE = "\"')\\]}»」』"
_CLAUSE_RE = re.compile(
    rf"(?:[,;:!?]|\.\.\.)[{_CLOSE}]*(?=\s)"  # "a, b"  'he said," and'
    rf"|[、。][{_CLOSE}]*"  # ideographic comma / full stop
    rf"|[,;:!?][{_CLOSE}]*(?=[\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff])"  # NFKC'd "，" + CJK
)


def _pysbd_language(lang: str) -> str:
    code = re.split(r"[-_]", lang.lower(), maxsplit=1)[0]
    return code if code in pysbd.languages.LANGUAGE_CODES else "en"


def _is_boundary(text: str, pos: int) -> bool:
    """A sentence boundary needs a space after it, except after CJK sentence punctuation
    (those scripts use none). pysbd occasionally splits elsewhere, e.g. inside "4....hello" or
    between "!?" and a symbol; such splits are ignored."""
    if pos >= len(text) or text[pos].isspace() or text[pos - 1] in "。｡":
        return True
    return text[pos - 1] in ".!?" and text[pos] >= "\u3000"


# pysbd's cost grows with the square of the text length (100k characters in one paragraph take
# seconds), so long paragraphs go through it in windows: boundaries found well inside a window
# are kept and the next window starts at the last of them.
_WINDOW = 2000
_MARGIN = 300


def _pysbd_bounds(text: str, lang: str) -> list[int]:
    """End offsets of the sentences pysbd finds in ``text`` (only those that are real
    boundaries, see :func:`_is_boundary`). A new Segmenter per call: pysbd keeps per-call state
    on the instance (not thread-safe), and constructing one costs microseconds."""
    segmenter = pysbd.Segmenter(language=_pysbd_language(lang), clean=False)
    bounds = []
    cursor = 0
    for sentence in segmenter.segment(text):
        sentence = sentence.strip()
        found = text.find(sentence, cursor) if sentence else -1
        if found >= 0:
            cursor = found + len(sentence)
            if _is_boundary(text, cursor):
                bounds.append(cursor)
    return bounds


def _sentence_spans(paragraph: str, lang: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the sentences in ``paragraph``; together they cover it.

    pysbd's output is only used to place boundaries, by finding each sentence in order; any
    text pysbd altered or dropped stays inside the span it falls in, so nothing is lost or
    repeated. A sentence running past a whole window (about 1,700 characters without a
    sentence end) is ended at its last space inside the window.
    """
    bounds: list[int] = []
    offset = 0
    while len(paragraph) - offset > _WINDOW:
        limit = offset + _WINDOW - _MARGIN
        window = paragraph[offset : offset + _WINDOW]
        safe = [offset + b for b in _pysbd_bounds(window, lang) if offset + b <= limit]
        if not safe:
            space = paragraph.rfind(" ", offset + 1, limit)
            safe = [space if space > offset else limit]
        bounds.extend(safe)
        offset = safe[-1]
    bounds.extend(offset + b for b in _pysbd_bounds(paragraph[offset:], lang))
    spans = []
    start = 0
    for end in [*bounds, len(paragraph)]:
        if end > start:
            spans.append((start, end))
            start = end
    return spans


def _merge_unspeakable(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Attach spans with nothing to say ("...", a stray quote) to the previous span, or to the
    next one when there is no previous; a paragraph with nothing speakable yields []."""
    merged: list[tuple[int, int]] = []
    pending_start: int | None = None
    for start, end in spans:
        if has_speakable_content(text[start:end]):
            merged.append((pending_start if pending_start is not None else start, end))
            pending_start = None
        elif merged:
            merged[-1] = (merged[-1][0], end)
        elif pending_start is None:
            pending_start = start
    return merged


def sentence_spans(text: str, *, lang: str = "en") -> list[tuple[int, int]]:
    """Spans (start, end) of the sentences of one paragraph of `text` as written, found as the
    front end finds them (pysbd boundaries, spans with nothing speakable attached to a
    neighbour), without normalizing: offsets index `text` itself. For text that arrives in
    pieces (`voxflow.text.incremental`): every span but the last is a complete sentence.

    Args:
        text: raw text (no normalization is applied; a line break may end a sentence).
        lang: language whose pysbd rules apply (see :func:`split_sentences`).
    Returns:
        Spans in order, consecutive (each starts where the one before ended); ``[]`` when
        nothing in `text` is speakable.
    """
    return _merge_unspeakable(text, _sentence_spans(text, lang))


# A period that ends a word (before a space or the end), for `last_pause_end`; the clause
# boundaries of _CLAUSE_RE stand beside it. "U.S." counts too: only a text that went quiet
# mid-sentence is cut there.
_PERIOD_END_RE = re.compile(rf"\.[{_CLOSE}]*(?=\s)")


def last_pause_end(text: str) -> int | None:
    """End offset of the last clause or sentence punctuation in `text` (``, ; : ! ? ...``,
    CJK ``、。``, a word-final ``.``) followed by whitespace or the end of `text`, or None when
    there is none: where text that stopped arriving mid-sentence can be spoken up to.
    """
    padded = text + " "
    ends = [m.end() for regex in (_CLAUSE_RE, _PERIOD_END_RE) for m in regex.finditer(padded)]
    ends = [end for end in ends if 0 < end <= len(text) and has_speakable_content(text[:end])]
    return max(ends) if ends else None


def cut_within(text: str, limit: int) -> int:
    """End offset of the longest first piece of `text` (which starts with a non-space and is
    longer than `limit`) of at most `limit` characters, cut as :func:`segment_text` cuts a long
    sentence: at its last clause boundary, else its last space, else mid-word.

    Raises:
        ValueError: `limit` < 1 or `text` is not longer than `limit`.
    """
    if limit < 1 or len(text) <= limit:
        raise ValueError(f"cut_within needs a text longer than limit >= 1, got {len(text)} "
                         f"characters and limit {limit}")
    return _cut(text, 0, limit, _last_speakable(text, 0, len(text)))


def split_sentences(text: str, *, lang: str = "en") -> list[str]:
    """Normalize ``text`` and split it into sentences.

    Args:
        text: raw text; it is normalized first with
            :func:`voxflow.text.normalize.normalize_paragraphs` (idempotent, so already
            normalized text is fine).
        lang: language of the text; picks pysbd's rules (``"en-US"`` -> ``"en"``; languages
            pysbd does not know use English rules) and the normalizer's English rules.

    Returns:
        Sentences in order, stripped, each with at least one letter or digit. Boundaries come
        from pysbd (Golden Rules based; keeps "Dr. Smith", "e.g.", "U.S.", "3.5", "6:45"
        together) and from paragraph/list/heading breaks (never joined across). A
        punctuation-only sentence is attached to its neighbour. No length cap: see
        :func:`segment_text`.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    sentences = []
    for paragraph in normalize_paragraphs(text, lang=lang):
        for start, end in _merge_unspeakable(paragraph, _sentence_spans(paragraph, lang)):
            sentences.append(paragraph[start:end].strip())
    return sentences


# ---------------------------------------------------------------------------------------------
# Cutting long sentences
# ---------------------------------------------------------------------------------------------


def _is_speakable_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LN"


def _first_speakable(s: str, start: int, stop: int) -> int:
    for i in range(start, stop):
        if _is_speakable_char(s[i]):
            return i
    return stop


def _last_speakable(s: str, start: int, stop: int) -> int:
    for i in range(stop - 1, start - 1, -1):
        if _is_speakable_char(s[i]):
            return i
    return start - 1


def _clause_cut(s: str, start: int, bound: int, shortest: int = 0) -> int | None:
    """Last clause boundary ending in (first speakable char, bound] that leaves a piece of at
    least `shortest` characters."""
    first = max(_first_speakable(s, start, bound), start + shortest - 1)
    best = None
    for m in _CLAUSE_RE.finditer(s, start, min(len(s), bound + 1)):
        if first < m.end() <= bound:
            best = m.end()
    return best


def _space_cut(s: str, start: int, bound: int) -> int | None:
    """Last space in (first speakable char, bound]."""
    pos = s.rfind(" ", start + 1, bound + 1)
    return pos if pos > _first_speakable(s, start, bound) else None


def _hard_cut(s: str, start: int, bound: int) -> int:
    """Cut a too-long word at bound, moved back so a combining mark or joiner stays with its
    base character (normalization bounds marks per base, so this always finds a base)."""
    end = bound
    while end > start + 1 and (unicodedata.category(s[end])[0] == "M" or s[end] in "\u200c\u200d"):
        end -= 1
    return end


def _cut(s: str, start: int, limit: int, last: int, shortest_clause: int = 0) -> int:
    """End index of the next piece s[start:end] (length <= limit), given that the span runs
    past start + limit, s[start] is not a space and ``last`` is the index of the span's last
    letter or digit: clause punctuation first (a clause piece of at least `shortest_clause`
    characters), then a space, then mid-word. Clause and space cuts that leave letters or
    digits for the rest are preferred, so the rest is not punctuation only."""
    limit_end = start + limit
    bounds = [limit_end]
    if start < last < limit_end:
        bounds.insert(0, last)
    for bound in bounds:
        end = _clause_cut(s, start, bound, shortest_clause)
        if end is None:
            end = _space_cut(s, start, bound)
        if end is not None:
            return end
    return _hard_cut(s, start, limit_end)


@dataclass
class _Piece:
    para: int
    start: int
    end: int
    cap: int
    cut: bool = False  # ends inside its sentence (cut at a clause, a space or mid-word)


def _split_span(paragraph: str, para: int, start: int, end: int, caps: _Caps) -> list[_Piece]:
    pieces: list[_Piece] = []
    stop = len(paragraph[start:end].rstrip()) + start
    last = _last_speakable(paragraph, start, stop)
    while True:
        while start < stop and paragraph[start].isspace():
            start += 1
        if start >= stop:
            return pieces
        cap = caps.next()
        clause = caps.first_clause()
        if clause is not None and stop - start > clause:
            # the request's first piece: its first clause(s), if one ends within the clause
            # cap and leaves letters or digits for the rest
            clause_end = _clause_cut(paragraph, start, min(start + min(clause, cap), last))
            if clause_end is not None:
                pieces.append(_Piece(para, start, clause_end, cap, cut=True))
                caps.took(clause_end - start)
                start = clause_end
                continue
        if stop - start <= cap:
            pieces.append(_Piece(para, start, stop, cap))
            caps.took(stop - start)
            return pieces
        cut = _cut(paragraph, start, cap, last, caps.shortest_clause(cap))
        pieces.append(_Piece(para, start, cut, cap, cut=True))
        caps.took(cut - start)
        start = cut


class _Caps:
    """Hands out the cap for each successive piece: first_max_chars once, then max_chars;
    with `growth`, each later cap is `growth` times the piece before it (at least the first
    cap, at most max_chars); `first_clause_chars` for the first piece only."""

    def __init__(self, max_chars: int, first_max_chars: int | None,
                 growth: float | None = None, first_clause_chars: int | None = None) -> None:
        self._first = min(first_max_chars, max_chars) if first_max_chars else max_chars
        self._max = max_chars
        self._growth = growth
        self._cap = self._first
        self._clause: int | None = first_clause_chars

    def next(self) -> int:
        return self._cap

    def first_clause(self) -> int | None:
        """The clause cap while no piece has been made yet, else None."""
        return self._clause

    def shortest_clause(self, cap: int) -> int:
        """Growing caps: a clause cut must keep half the cap, so a piece is not one word."""
        return cap // 2 if self._growth is not None else 0

    def took(self, chars: int) -> None:
        """The piece just made has `chars` characters: set the next cap."""
        self._clause = None
        if self._growth is None:
            self._cap = self._max
        else:
            self._cap = min(self._max, max(self._first, int(self._growth * chars)))


def _fold_unspeakable(paragraphs: list[str], pieces: list[_Piece]) -> list[_Piece]:
    """Merge a piece with nothing speakable into the previous (else next) piece of the same
    paragraph when the result stays within that piece's cap; otherwise drop it."""
    out: list[_Piece] = []
    carry: _Piece | None = None
    for piece in pieces:
        text = paragraphs[piece.para][piece.start : piece.end]
        if has_speakable_content(text):
            if carry and carry.para == piece.para and piece.end - carry.start <= piece.cap:
                piece.start = carry.start
            carry = None
            out.append(piece)
            continue
        prev = out[-1] if out else None
        if prev and prev.para == piece.para and piece.end - prev.start <= prev.cap:
            prev.end = piece.end
            prev.cut = piece.cut
        else:
            carry = piece
    return out


def _validate(max_chars: int, first_max_chars: int | None,
              first_clause_chars: int | None = None) -> None:
    if not isinstance(max_chars, int) or max_chars < MIN_MAX_CHARS:
        raise ValueError(f"max_chars must be an int >= {MIN_MAX_CHARS}, got {max_chars!r}")
    if first_max_chars is not None and (
        not isinstance(first_max_chars, int) or first_max_chars < MIN_FIRST_MAX_CHARS
    ):
        raise ValueError(
            f"first_max_chars must be None or an int >= {MIN_FIRST_MAX_CHARS}, "
            f"got {first_max_chars!r}"
        )
    if first_clause_chars is not None and (
        not isinstance(first_clause_chars, int) or first_clause_chars < MIN_FIRST_MAX_CHARS
    ):
        raise ValueError(
            f"first_clause_chars must be None or an int >= {MIN_FIRST_MAX_CHARS}, "
            f"got {first_clause_chars!r}"
        )


def segment_text(
    text: str, max_chars: int, first_max_chars: int | None = None, *, lang: str = "en",
    first_clause_chars: int | None = None,
) -> list[str]:
    """Normalize ``text`` and cut it into segments a model can synthesize one at a time.

    Steps: :func:`voxflow.text.normalize.normalize_text` rules per paragraph; sentences as in
    :func:`split_sentences` (one sentence per segment; short sentences are not merged); any
    sentence longer than its cap is cut into pieces, preferring, within the cap, the last
    clause boundary (after ``, ; : ! ? ...`` followed by a space, or after CJK punctuation),
    then the last space, and only for a run of more than the cap without either, mid-word
    (never between a base character and its combining marks).

    Args:
        text: raw request text. Text without final punctuation is fine.
        max_chars: cap on every segment, in characters (code points). At least 20.
        first_max_chars: optional smaller cap on the FIRST segment only, so the first audio
            chunk comes quickly when the text opens with a long sentence (it is cut at a
            clause boundary before the cap if there is one, else at a space). Values above
            ``max_chars`` act as ``max_chars``. At least 10 when given.
        lang: language of the text (see :func:`split_sentences`); default English.
        first_clause_chars: optional cap on the FIRST segment at a clause boundary only: when
            the first sentence is longer, it ends at its last clause boundary within this many
            characters (at most the first cap), if there is one (the first audio is then cheap
            without cutting a clause in two; a sentence without one keeps ``first_max_chars``).
            At least 10 when given.

    Returns:
        Segments in reading order: stripped, non-empty, ``len() <= cap``, each with at least
        one letter or digit (pieces of only punctuation are merged into a neighbour when that
        fits the cap, else dropped). They are consecutive pieces of the normalized text with
        only whitespace between them (or nothing, after CJK punctuation and at mid-word cuts):
        no text lost, repeated or reordered, except such dropped pieces. ``[]`` when nothing
        is speakable (``"🙂🙂"``).

    Raises:
        ValueError: ``max_chars < 20``, ``first_max_chars < 10`` or ``first_clause_chars < 10``
            (or not ints).
        TypeError: ``text`` is not a ``str``.
    """
    return [segment.text for segment in segment_pieces(text, max_chars, first_max_chars,
                                                       lang=lang,
                                                       first_clause_chars=first_clause_chars)]


class Segment(NamedTuple):
    """One piece of `segment_pieces`.

    Attributes:
        text: the piece, stripped (as `segment_text` returns it).
        cut: True when it ends inside a sentence (a cap cut it at a clause boundary, a space
            or mid-word); False when it ends its sentence. A model keeps a shorter pause
            after a cut piece, so the cut sounds like a comma, not a full stop.
    """

    text: str
    cut: bool


def segment_pieces(
    text: str, max_chars: int, first_max_chars: int | None = None, *, lang: str = "en",
    growth: float | None = None, first_clause_chars: int | None = None,
) -> list[Segment]:
    """`segment_text`'s pieces, each with whether it ends inside its sentence.

    Same arguments, errors and pieces as :func:`segment_text`, and:

    Args:
        growth: with `first_max_chars`, the caps after the first grow from it instead of
            jumping to `max_chars`: each piece's cap is `growth` times the length of the
            piece before it, at least `first_max_chars`, at most `max_chars`. For a model
            that renders a whole segment before any of its audio (Kokoro): each piece is
            then ready, at a real-time factor below 1 / `growth`, before the audio of the
            one before it has played (scheduler, docs/architecture.md). A clause boundary
            is then only taken for a piece of at least half its cap (else the last space),
            so the pieces do not shrink to a word. At least 1.

    Raises:
        ValueError: also for `growth` < 1.
    """
    _validate(max_chars, first_max_chars, first_clause_chars)
    if growth is not None and not growth >= 1.0:
        raise ValueError(f"growth must be None or >= 1, got {growth!r}")
    paragraphs = normalize_paragraphs(text, lang=lang)
    caps = _Caps(max_chars, first_max_chars, growth, first_clause_chars)
    pieces: list[_Piece] = []
    for para, paragraph in enumerate(paragraphs):
        spans = _merge_unspeakable(paragraph, _sentence_spans(paragraph, lang))
        for start, end in spans:
            pieces.extend(_split_span(paragraph, para, start, end, caps))
    pieces = _fold_unspeakable(paragraphs, pieces)
    return [Segment(paragraphs[p.para][p.start : p.end].strip(), p.cut) for p in pieces]
