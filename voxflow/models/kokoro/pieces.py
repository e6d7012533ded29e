"""Cutting a Kokoro segment at schedule time: a head the listener gets by its deadline, and
the rest as the segment's next part.

Kokoro renders a whole segment before any of its audio exists, and a run cannot be paused, so
the size of a run is what decides whether its listener waits. The front end cuts text before
anyone knows the load; this cut is made by the worker about to run the segment, from the
segment's slack (`StageBatch.slack`) and the measured pace (`pace.RunPace`): the largest head
predicted to finish in time, cut at a phoneme-string space, preferring one after punctuation
(sentence marks, then ``: ;``, then ``, —``; such a head may reach as far as the run predicted
to end in time without the safety margin) as long as that head is at least half the largest;
where no word ends in that range, the shortest head past it. The tail goes back to the stage's
queue as the next part of the same segment and is sized again when it runs, against the audio
then playing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from voxflow.models.kokoro.frontend import CUT_CLASSES, TokenSegment, has_sound


def cut_index(phonemes: str, most: int, least: int, reach: int | None = None) -> int | None:
    """Where to cut `phonemes` so the head has at most `most` tokens (`reach` after
    punctuation), or as few above it as the words allow.

    Args:
        phonemes: a segment's phoneme string (one token per character).
        most: the head's most tokens.
        least: the fewest tokens of speech either side may have (head and tail each hold at
            least `least` tokens and a letter).
        reach: the most tokens of a head that ends at punctuation (default `most`; a deadline
            cut passes the head predicted to end in time without the safety factor, so a
            natural pause is taken where it is still expected on time).
    Returns:
        The index of the space the cut is made at (head ``phonemes[:i]``, tail after the
        spaces from i): the largest head of `least` to `reach` tokens that ends at
        punctuation, by class (sentence marks, ``: ;``, ``, —``), if at least half the size
        of the largest head of `least` to `most`; else that largest head; else the smallest
        head above `most` (no word boundary fell between `least` and `most`); None where no
        space gives both sides their `least`.
    """
    reach = most if reach is None else max(reach, most)
    spaces = [i for i, c in enumerate(phonemes) if c == " "]
    cuts = [i for i in spaces
            if len(phonemes[:i].rstrip()) >= least and len(phonemes[i:].strip()) >= least
            and has_sound(phonemes[:i]) and has_sound(phonemes[i:])]
    fits = [i for i in cuts if len(phonemes[:i].rstrip()) <= most]
    largest = len(phonemes[:fits[-1]].rstrip()) if fits else most
    for marks in CUT_CLASSES:
        marked = [i for i in cuts if len(phonemes[:i].rstrip()) <= reach
                  and phonemes[:i].rstrip()[-1:] in marks]
        if marked and 2 * len(phonemes[:marked[-1]].rstrip()) >= largest:
            return marked[-1]
    if fits:
        return fits[-1]
    return cuts[0] if cuts else None


def split_segment(segment: TokenSegment, at: int) -> tuple[TokenSegment, TokenSegment]:
    """`segment` cut at the space at index `at` of its phonemes (`cut_index`).

    Token ids follow the phonemes one to one; the spaces at the cut are dropped. Word ranges
    (`spoken`, `words`: positions in the graph's tokens, pad first) go to the side that holds
    them, the tail's shifted to its own positions. The head is marked `cut` (it ends inside a
    sentence); the tail keeps the segment's flag and its `offset_s` (the caller adds the
    head's audio once it is rendered).

    Args:
        at: index of a space in ``segment.phonemes`` with speech on both sides.
    Returns:
        (head, tail).
    Raises:
        ValueError: `at` is not a space with phonemes on both sides.
    """
    phonemes = segment.phonemes
    if not (0 < at < len(phonemes) - 1 and phonemes[at] == " "):
        raise ValueError(f"cannot cut {len(phonemes)} phonemes at {at}")
    head_end = len(phonemes[:at].rstrip())
    tail_start = len(phonemes) - len(phonemes[at:].lstrip())
    if head_end == 0 or tail_start >= len(phonemes):
        raise ValueError(f"cannot cut {len(phonemes)} phonemes at {at}: one side is empty")
    head = replace(
        segment, phonemes=phonemes[:head_end], token_ids=segment.token_ids[:head_end],
        spoken=_head_ranges(segment.spoken, head_end),
        words=_head_ranges(segment.words, head_end), cut=True,
    )
    tail = replace(
        segment, phonemes=phonemes[tail_start:], token_ids=segment.token_ids[tail_start:],
        spoken=_tail_ranges(segment.spoken, tail_start),
        words=_tail_ranges(segment.words, tail_start),
    )
    return head, tail


def _head_ranges(ranges: tuple[Any, ...], end: int) -> tuple[Any, ...]:
    """`SpokenWord`s or `PlacedWord`s starting inside the first `end` phonemes (positions
    1..end), their ends held at the head's closing pad (position end + 1)."""
    return tuple(replace(r, id_end=min(r.id_end, end + 1))
                 for r in ranges if r.id_start <= end)


def _tail_ranges(ranges: tuple[Any, ...], start: int) -> tuple[Any, ...]:
    """`SpokenWord`s or `PlacedWord`s starting at or after phoneme `start` (position
    start + 1), shifted so that phoneme `start` is the tail's position 1."""
    return tuple(replace(r, id_start=r.id_start - start,
                         id_end=r.id_end - start)
                 for r in ranges if r.id_start > start)
