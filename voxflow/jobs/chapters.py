"""Cut a job's text into chapters (at Markdown headings) and each chapter into segments.

A segment is one engine request and one file on disk, so the cut must be the same every time
the same text is cut (resume depends on it): it is a pure function of the text and the size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


@dataclass(frozen=True)
class Chapter:
    """One chapter: its `title` (the heading's text, "" for text before the first heading) and
    its `segments` (the chapter's text in pieces, the heading line first, each non-blank)."""

    title: str
    segments: tuple[str, ...]

    @property
    def chars(self) -> int:
        """Characters in the chapter's segments."""
        return sum(len(s) for s in self.segments)


def split_chapters(text: str, segment_chars: int) -> list[Chapter]:
    """Chapters of `text`: a new one at each Markdown heading (``#`` to ``######``) outside a
    code fence; text before the first heading is a chapter titled "" when it is not blank.
    Each chapter is cut by `split_segments`. Chapters with nothing but blanks are dropped.

    Raises:
        ValueError: `segment_chars` < 1.
    """
    if segment_chars < 1:
        raise ValueError(f"segment_chars must be >= 1, not {segment_chars}")
    parts: list[tuple[str, list[str]]] = [("", [])]
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            parts.append((match.group(2), [line]))
        else:
            parts[-1][1].append(line)
    chapters = []
    for title, lines in parts:
        segments = split_segments("\n".join(lines), segment_chars)
        if segments:
            chapters.append(Chapter(title, tuple(segments)))
    return chapters


def split_segments(text: str, segment_chars: int) -> list[str]:
    """`text` in pieces of about `segment_chars` characters: paragraphs (blank-line separated)
    joined while they fit, a longer paragraph cut at sentence ends, a longer sentence at
    spaces (a run without spaces is cut hard). Blank pieces are dropped."""
    pieces: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        joiner = "\n\n"  # the first unit of a paragraph joins the piece before as a paragraph
        for unit in _units(para, segment_chars):
            if pieces and len(pieces[-1]) + len(joiner) + len(unit) <= segment_chars:
                pieces[-1] = f"{pieces[-1]}{joiner}{unit}"
            else:
                pieces.append(unit)
            joiner = " "
    return pieces


def _units(para: str, size: int) -> list[str]:
    if len(para) <= size:
        return [para]
    out: list[str] = []
    for sentence in SENTENCE_END.split(para):
        while len(sentence) > size:
            cut = sentence.rfind(" ", 0, size)
            cut = cut if cut > 0 else size
            out.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            out.append(sentence)
    return out
