"""Segments' spoken words placed on the request's `input`: id ranges with text spans.

Shared by the families with word timestamps (Piper, Kokoro). Their front ends give each
segment (a frozen dataclass with `spoken` and `words` fields) its `words.SpokenWord`s, keyed
by normalized token; `place_words` aligns all the request's tokens to the input's words
(`voxflow.text.offsets`) and turns each segment's words into `words.PlacedWord`s: one per input
word, the tokens spoken for one input word ("5 dollars and 50 cents" for "$5.50") joined.
An input word whose tokens fall in two segments (a long expansion cut by segmentation) keeps
the first segment's part only, so words never repeat or overlap.
"""

from __future__ import annotations

from dataclasses import Field, replace
from typing import Any, ClassVar, Protocol, TypeVar

from voxflow.models.words import PlacedWord, SpokenWord
from voxflow.text.document import SpeechDocument
from voxflow.text.offsets import align, input_words


class WordedSegment(Protocol):
    """A front end's segment that can carry words (a frozen dataclass: `replace` sets words)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def spoken(self) -> tuple[SpokenWord, ...]: ...

    @property
    def words(self) -> tuple[PlacedWord, ...]: ...


S = TypeVar("S", bound=WordedSegment)


def place_words(document: SpeechDocument, segments: list[S]) -> list[S]:
    """`segments` with `words` set from their `spoken` words (see the module docstring).

    Returns:
        The segments in the same order; a segment's words are in order, and every word's
        input span comes after the previous word's, across segments too.
    """
    source = document.source
    spans = input_words(source, document.ssml)
    order: dict[tuple[int, int], int] = {}
    tokens: list[str] = []
    for segment in segments:
        for w in segment.spoken:
            if w.key not in order:
                order[w.key] = len(tokens)
                tokens.append(w.text)
    ranges = align([source[a:b] for a, b in spans], tokens)
    claimed = 0  # input words before this index have their word already
    out = []
    for segment in segments:
        placed: list[list[int]] = []  # [id_start, id_end, first word, last word + 1]
        for w in segment.spoken:
            lo, hi = ranges[order[w.key]]
            if placed and lo < placed[-1][3]:
                placed[-1][1] = w.id_end
                placed[-1][3] = max(placed[-1][3], hi)
            elif hi > claimed:
                placed.append([w.id_start, w.id_end, max(lo, claimed), hi])
            else:
                continue
            claimed = placed[-1][3]
        words = tuple(PlacedWord(a, b, spans[lo][0], spans[hi - 1][1]) for a, b, lo, hi in placed)
        out.append(replace(segment, words=words))
    return out
