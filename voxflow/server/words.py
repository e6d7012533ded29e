"""The wire shape of word timestamps: one word of the input and when the audio speaks it.

A word is ``{"word", "start", "end", "text_start", "text_end"}``: start and end in seconds from
the response's first sample (rounded to the millisecond), text_start and text_end code point
offsets into the request's `input` such that ``input[text_start:text_end] == word``. In an SSE
stream each word is a ``{"type": "speech.word", ...}`` event; the whole-response route
(`voxflow.server.timestamps`) lists them under ``words``.
"""

from __future__ import annotations

from voxflow.engine.request import TimedWord


def word_json(text: str, word: TimedWord) -> dict:
    """`word` of the input `text` as its JSON object (see the module docstring)."""
    return {
        "word": text[word.text_start : word.text_end],
        "start": round(word.start, 3),
        "end": round(word.end, 3),
        "text_start": word.text_start,
        "text_end": word.text_end,
    }


def word_event(text: str, word: TimedWord) -> dict:
    """`word` as a ``speech.word`` SSE event."""
    return {"type": "speech.word", **word_json(text, word)}
