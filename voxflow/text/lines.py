"""Blocks of text from lines: where a line break is a sentence end and where it is a space.

A listener expects a pause at the end of a line: ``Shopping list:\\nApples\\nPears\\nPlums`` is
four lines, not one run-on phrase. A block here is a stretch of text spoken as one unit
(paragraph, line, list item, heading, table row); blocks are never joined into one sentence,
and every block but the last gets sentence-final punctuation when it has none
(:func:`end_sentence`), so the voice falls and pauses there.

Rules, in order, for each line (Markdown markup is handled by `voxflow.text.markdown`):

- Blank lines (and U+2029) end a block; fenced code is one block per line; tables are one
  block per row; horizontal rules and reference definitions end a block and are dropped.
- A heading, a list item (``-``, ``*``, ``+``, ``•``, ``1.``, ``2)``) starts a block; the line
  after a heading starts another.
- Any other line break ends a block too, except where the text is evidently wrapped: the line
  ends with ``,``, ``;``, a dash, ``(``, ``&``, ``/`` or ``+``, or the next line starts with
  a lower-case letter (hard-wrapped prose: ``Second one,\\nwrapped onto\\ntwo lines`` stays one
  sentence). After a line ending in ``:`` (a list follows) a lower-case line does not join:
  ``We need:\\neggs\\nmilk`` is three blocks. Known limit: hard-wrapped prose that breaks before
  a capitalised word or a number is cut there.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

from voxflow.text import markdown

__all__ = ["end_sentence", "split_blocks"]

_CONTINUES = frozenset(",;([{&/+-–—")
# Sentence-final punctuation of the scripts the voices read; ":" and ";" end a line too.
_FINAL = frozenset(".!?…:;。！？｡।॥؟۔።‼‽")
_CLOSERS = frozenset("\"')]}»”’」』")


@dataclass
class _Walker:
    """The state of one pass over the lines."""

    blocks: list[list[str]] = field(default_factory=lambda: [[]])
    code: list[bool] = field(default_factory=lambda: [False])
    fence: str | None = None
    in_table: bool = False
    after_colon: bool = False
    after_heading: bool = False

    def close(self) -> None:
        if self.blocks[-1]:
            self.blocks.append([])
            self.code.append(False)

    def add_block(self, line: str, code: bool = False) -> None:
        self.close()
        self.blocks[-1].append(line)
        self.code[-1] = code
        self.close()

    def add_line(self, line: str, marked: bool, heading: bool) -> None:
        current = self.blocks[-1]
        if marked or self.after_heading or markdown.NUMBERED_RE.match(line):
            self.close()
        elif current and not _joins(current[-1], line, self.after_colon):
            self.close()
        self.blocks[-1].append(line)
        self.after_heading = heading
        if marked:
            self.after_colon = False
        stripped = line.rstrip()
        if stripped.endswith(":"):
            self.after_colon = True


def _joins(previous: str, line: str, after_colon: bool) -> bool:
    """True when the break between ``previous`` and ``line`` is wrapping, not a line end."""
    tail = previous.rstrip()
    if tail and tail[-1] in _CONTINUES:
        return True
    head = line.lstrip()
    return bool(head) and head[0].islower() and not after_colon


def _fence(walker: _Walker, line: str) -> bool:
    """Handle ``line`` if it opens, closes or is inside a code fence; True if handled."""
    marker = line.strip()[:3]
    if walker.fence is not None:
        if markdown.line_kind(line) == "fence" and marker[0] == walker.fence:
            walker.fence = None
            walker.close()
        elif line.strip():
            walker.add_block(line.strip(), code=True)
        return True
    if markdown.line_kind(line) == "fence":
        walker.fence = marker[0]
        walker.close()
        return True
    return False


def _structure(walker: _Walker, line: str) -> bool:
    """Handle blank lines, rules, references and table rows; True if handled."""
    kind = markdown.line_kind(line)
    if kind in ("blank", "rule", "reference", "table_rule"):
        if kind == "table_rule":
            _header_to_cells(walker)
        else:
            walker.in_table = False
        if kind == "blank":
            walker.after_colon = False
        walker.after_heading = False
        walker.close()
        return True
    if markdown.is_table_row(line, walker.in_table):
        walker.add_block(markdown.table_cells(line))
        walker.in_table = True
        walker.after_heading = False
        return True
    walker.in_table = False
    return False


def _header_to_cells(walker: _Walker) -> None:
    """A ``|---|`` rule under a pipe-less header row (``a | b``): that row becomes cells."""
    walker.in_table = True
    current = walker.blocks[-1]
    if current and "|" in current[-1]:
        header = current.pop()
        walker.close()
        walker.add_block(markdown.table_cells(header))


def split_blocks(text: str) -> list[tuple[str, bool]]:
    """Split ``text`` (lines separated by ``\\n``) into blocks by the rules above.

    Returns:
        ``(block, is_code)`` pairs in order: the block's lines joined by spaces, with block
        markup removed (heading and list markers, quote markers, fences, table pipes) and, for
        text that is not code, inline markup too (:func:`voxflow.text.markdown.strip_inline`;
        an image that starts a sentence is a block of its own). Tags that are evidently
        markup are dropped first (:func:`voxflow.text.markdown.strip_markup_tags`).
        Blocks may be empty of speakable text (the caller drops those).
    """
    walker = _Walker()
    text = markdown.strip_markup_tags(markdown.block_tags_to_newlines(text))
    for raw in text.split("\n"):
        if _fence(walker, raw) or _structure(walker, raw):
            continue
        for part in markdown.split_inline_headings(markdown.strip_quote(raw)):
            if markdown.line_kind(part) == "blank":
                continue
            line, marked, heading = markdown.strip_marker(part)
            walker.add_line(line, marked, heading)
    out: list[tuple[str, bool]] = []
    for lines, code in zip(walker.blocks, walker.code, strict=True):
        if code:
            out.append((" ".join(lines), code))
        elif lines:  # an image at a block's edge comes back between line breaks: a block
            out += [(part, False) for part in markdown.strip_inline(" ".join(lines)).split("\n")]
    return out


def end_sentence(block: str) -> str:
    """``block`` with sentence-final punctuation: unchanged if it ends with one (``.!?…:;``
    and the CJK, Devanagari, Arabic and Ethiopic stops, before closing quotes or brackets);
    a final ``,`` becomes ``.``; otherwise ``.`` is appended (``。`` after a CJK character).
    """
    end = len(block)
    while end and block[end - 1] in _CLOSERS:
        end -= 1
    if not end or block[end - 1] in _FINAL:
        return block
    if block[end - 1] == ",":
        return block[: end - 1] + "." + block[end:]
    last = block[-1]
    wide = unicodedata.east_asian_width(last) in ("W", "F") and last.isalnum()
    return block + ("。" if wide else ".")
