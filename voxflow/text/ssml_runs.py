"""Runs and the silence between them, built up in reading order from SSML events.

`RunBuilder` holds one open run (text with one rate) and the pending *gap*: what separates the
last finished run from whatever comes next. A gap holds the largest structural pause seen
(a paragraph edge) and the sum of explicit ``<break>`` times; when the next text arrives, the
finished run's `break_after_s` becomes the explicit sum if there was a break, else the
structural pause. Before the first run, only breaks count (lead silence); after the last, only
breaks count (trailing silence), so a paragraph pause never pads the ends of the audio.
"""

from __future__ import annotations

import re
from dataclasses import replace

from voxflow.text.document import MAX_BREAK_S, SpeechDocument, TextRun

__all__ = ["RunBuilder"]

# XML's whitespace characters (not Unicode's: a no-break space is text, left to normalization).
_XML_SPACE_RE = re.compile(r"[ \t\r\n]+")


class RunBuilder:
    """Accumulates `TextRun`s; call `finish` once at the end.

    Text with the same rate and no boundary between it stays in one run; a different rate,
    a boundary or a pause starts the next. Rates are multipliers (> 0), pauses seconds.
    """

    def __init__(self) -> None:
        self._runs: list[TextRun] = []
        self._text: list[str] = []
        self._rate = 1.0
        self._has_text = False
        self._lead = 0.0
        self._gap_structural = 0.0
        self._gap_breaks: float | None = None

    def add_text(self, text: str, rate: float) -> None:
        """Append `text` spoken at `rate`; whitespace-only text only separates words."""
        if not text.strip():
            self._text.append(" ")
            return
        if self._has_text and rate != self._rate:
            self._close_run()
        if not self._has_text:
            self._settle_gap()
            self._rate = rate
            self._has_text = True
        self._text.append(text)

    def boundary(self, pause_s: float) -> None:
        """End the open run (``<s>``, ``<p>``); `pause_s` is the structural pause there
        (0 for a sentence), replaced by any explicit break in the same gap."""
        self._close_run()
        self._gap_structural = max(self._gap_structural, pause_s)

    def pause(self, seconds: float) -> None:
        """A ``<break>`` of `seconds`: ends the open run; breaks in one gap add up.

        Raises:
            ValueError: the breaks in this gap add up to more than `MAX_BREAK_S`.
        """
        self._close_run()
        total = (self._gap_breaks or 0.0) + seconds
        if total > MAX_BREAK_S:
            raise ValueError(
                f"breaks in a row add up to {total:g} s, longer than {MAX_BREAK_S:g} s"
            )
        self._gap_breaks = total

    def phoneme(self, text: str, phonemes: str, rate: float) -> None:
        """A run of its own: `phonemes` (IPA) to speak, `text` the element's content."""
        self._close_run()
        self._settle_gap()
        self._runs.append(TextRun(_collapse(text), rate, phonemes=phonemes))

    def finish(self) -> SpeechDocument:
        """The document: runs (one empty run when nothing was spoken) and lead silence."""
        self._close_run()
        self._gap_structural = 0.0  # no paragraph pause after the last run
        self._settle_gap()
        runs = tuple(self._runs) or (TextRun(""),)
        return SpeechDocument(runs, lead_silence_s=self._lead, ssml=True)

    def _close_run(self) -> None:
        text = _collapse("".join(self._text))
        self._text.clear()
        self._has_text = False
        if text:
            self._runs.append(TextRun(text, self._rate))

    def _settle_gap(self) -> None:
        """Put the pending gap's silence after the last run (or before the first)."""
        if self._runs:
            pause = self._gap_structural if self._gap_breaks is None else self._gap_breaks
            if pause:
                self._runs[-1] = replace(self._runs[-1], break_after_s=pause)
        elif self._gap_breaks is not None:
            self._lead = self._gap_breaks
        self._gap_structural = 0.0
        self._gap_breaks = None


def _collapse(text: str) -> str:
    """XML whitespace runs -> one space, stripped at both ends."""
    return _XML_SPACE_RE.sub(" ", text).strip()
