"""WebVTT captions of a job from its segments' word timings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

WORDS_PER_CUE = 8
"""Most words in one caption cue."""
CUE_CHARS = 42
"""Most characters in one cue's line (a cue with one longer word holds it alone)."""


@dataclass(frozen=True)
class CaptionWord:
    """A spoken word: `start`, `end` in seconds from the start of the audio, and its `text`."""

    start: float
    end: float
    text: str


def _stamp(seconds: float) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{ms:03d}"


def webvtt(words: Iterable[CaptionWord]) -> str:
    """A WebVTT file: cues of up to `WORDS_PER_CUE` words and `CUE_CHARS` characters, a new
    cue after a word ending a sentence (``.``, ``!``, ``?``); each cue from its first word's
    start to its last word's end. No words: the header alone."""
    cues: list[list[CaptionWord]] = []
    for word in words:
        text = " ".join(w.text for w in cues[-1]) if cues else ""
        if (not cues or len(cues[-1]) >= WORDS_PER_CUE
                or len(text) + 1 + len(word.text) > CUE_CHARS
                or cues[-1][-1].text.endswith((".", "!", "?"))):
            cues.append([word])
        else:
            cues[-1].append(word)
    lines = ["WEBVTT", ""]
    for cue in cues:
        lines += [f"{_stamp(cue[0].start)} --> {_stamp(max(cue[-1].end, cue[0].start))}",
                  " ".join(w.text for w in cue), ""]
    return "\n".join(lines)
