"""Text that arrives in pieces (a WebSocket client, an LLM's tokens) cut into what can be
spoken now: complete sentences, or on request the text up to its last clause.

The boundaries are the front end's own (`voxflow.text.segment.sentence_spans`: pysbd, line
breaks, spans with nothing speakable attached to a neighbour), found on the text as written,
so each piece given out is raw text the engine normalizes and segments as it would any input.
A sentence is complete once the next one has begun: pysbd needs the text after a period to
tell "Dr. Smith" from a sentence end.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxflow.text.normalize import has_speakable_content
from voxflow.text.segment import cut_within, last_pause_end, sentence_spans


@dataclass(frozen=True)
class TextSpan:
    """A piece of the received text to speak as one request.

    Attributes:
        text: the piece as received, without its outer whitespace.
        start, end: code point offsets of `text` in everything received so far
            (``received[start:end] == text``).
    """

    text: str
    start: int
    end: int


class SentenceBuffer:
    """Collects text pieces; gives out the text that can be spoken, in order, each character
    once.

    Args:
        max_chars: longest span given out (the engine's input limit); a sentence longer than
            that is cut as the front end cuts long sentences (`cut_within`).
        lang: language whose sentence rules apply ("en").
    """

    def __init__(self, max_chars: int, lang: str = "en") -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self.max_chars = max_chars
        self.lang = lang
        self._pending = ""  # received, not given out yet
        self._offset = 0  # offset of _pending[0] in everything received
        self.received_chars = 0

    @property
    def pending(self) -> str:
        """The text received and not given out yet."""
        return self._pending

    def add(self, piece: str) -> list[TextSpan]:
        """Append `piece`; returns the sentences it completed (maybe none)."""
        self._pending += piece
        self.received_chars += len(piece)
        spans = sentence_spans(self._pending, lang=self.lang)
        return self._take_ends([end for _, end in spans[:-1]]) + self._cut_long()

    def take_clause(self) -> list[TextSpan]:
        """The pending text up to its last clause or sentence punctuation (`last_pause_end`),
        for text that stopped arriving mid-sentence; [] when it has none."""
        end = last_pause_end(self._pending)
        span = self._take(end) if end is not None else None
        return [span] if span is not None else []

    def take_all(self) -> list[TextSpan]:
        """Everything pending, as sentences (the end of the text, or a client's flush); text
        with nothing speakable is given out too (the caller decides what to do with it)."""
        spans = sentence_spans(self._pending, lang=self.lang)
        return self._take_ends([end for _, end in spans[:-1]] + [len(self._pending)])

    def _take_ends(self, ends: list[int]) -> list[TextSpan]:
        """Give out the pending text up to each of `ends` (offsets into it, increasing)."""
        out: list[TextSpan] = []
        consumed = 0
        for end in ends:
            span = self._take(end - consumed)
            consumed = end
            if span is not None:
                out.append(span)
        return out

    def _cut_long(self) -> list[TextSpan]:
        """Pending text over `max_chars` without a sentence end, given out in pieces."""
        out: list[TextSpan] = []
        while True:
            lead = len(self._pending) - len(self._pending.lstrip())
            body = self._pending[lead:]
            if len(body) <= self.max_chars:
                return out
            span = self._take(lead + cut_within(body, self.max_chars))
            if span is not None:
                out.append(span)

    def _take(self, end: int) -> TextSpan | None:
        """Give out `_pending[:end]` (stripped; None when only whitespace)."""
        head, self._pending = self._pending[:end], self._pending[end:]
        start = self._offset + len(head) - len(head.lstrip())
        self._offset += end
        text = head.strip()
        if not text:
            return None
        return TextSpan(text, start, start + len(text))


def speakable(span: TextSpan) -> bool:
    """Whether `span` has anything to say (letters or digits once symbols are dropped)."""
    return has_speakable_content(span.text)


__all__ = ["SentenceBuffer", "TextSpan", "speakable"]
