"""Text normalization applied identically to reference and ASR transcript before word error rate.

Rules, in order (the same spirit as Whisper's English normalizer, kept small and explicit):
1. lower-case; hyphens and slashes become spaces ("well-known" -> "well known");
2. "6:45" becomes "6 45" (clock times read as two numbers);
3. thousands separators are dropped ("1,200" -> "1200"); apostrophes are dropped ("it's" -> "its");
4. every other character that is not a letter, digit or whitespace is removed;
5. each run of digits is written as words with num2words ("400" -> "four hundred",
   "24" -> "twenty four"), "and" and hyphens dropped from the spelling, so "9" and "nine" match.
"""

from __future__ import annotations

import re

from num2words import num2words

_TIME = re.compile(r"(\d{1,2}):(\d{2})")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def _spell(number: str) -> str:
    words = num2words(int(number)).replace("-", " ").replace(",", "")
    return " ".join(w for w in words.split() if w != "and")


def normalize_for_wer(text: str) -> str:
    """Normalize `text` by the rules above; returns space-separated words (may be empty)."""
    text = text.lower().replace("-", " ").replace("/", " ")
    text = _TIME.sub(r"\1 \2", text)
    text = _THOUSANDS.sub("", text).replace("'", "").replace("\u2019", "")
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(_spell(w) if w.isdigit() else w for w in text.split())
