"""English text -> Kokoro phonemes, through espeak-ng.

Kokoro v1.0 was trained on misaki's phoneme alphabet: IPA plus a few capitals for diphthongs
(``A`` = eɪ, ``I`` = aɪ, ``W`` = aʊ, ``Y`` = ɔɪ, ``O`` = oʊ (US), ``Q`` = əʊ (GB)), ``T`` for
the American flap, ``ᵊ`` for a reduced schwa, and the affricates ``ʤ ʧ`` as single symbols.
espeak-ng speaks plain IPA, so its output is rewritten with the rules of misaki's own espeak
fallback (misaki/espeak.py, used by hexgrad's pipeline for words outside its lexicon) plus the
pipeline's ``ɾ -> T`` for American English. The rules need espeak's tie character between the
letters of a diphthong or affricate (``a^ɪ``), so espeak is asked for ``^`` ties.

espeak-ng comes from `espeakng-loader` (a packaged libespeak-ng and its data) through
`phonemizer-fork`, which loads a private copy of the library per backend.
"""

from __future__ import annotations

import logging
import re
import threading

# Longest first, so "e^ɪ" wins over "e" and "ʔˌn̩" over "ʔ".
_FROM_ESPEAK = sorted(
    {
        "\u0303": "",  # nasalization (French loans)
        "a^ɪ": "I",
        "a^ʊ": "W",
        "d^ʒ": "ʤ",
        "e": "A",
        "e^ɪ": "A",
        "r": "ɹ",
        "t^ʃ": "ʧ",
        "x": "k",
        "ç": "k",
        "ɐ": "ə",
        "ɔ^ɪ": "Y",
        "ə^l": "ᵊl",
        "ɚ": "əɹ",
        "ɚɹ": "əɹ",  # not in misaki: espeak writes "bakery" bˈeɪkɚɹi, else "əɹɹ"
        "ɬ": "l",
        "ʔ": "t",
        "ʔn": "tᵊn",
        "ʔn\u0329": "tᵊn",  # not in misaki, whose rules turn "ʔn̩" into "tᵊᵊn"
        "ʔˌn\u0329": "tᵊn",
        "ʲ": "",
    }.items(),
    key=lambda kv: -len(kv[0]),
)
_SYLLABIC = re.compile(r"(\S)\u0329")  # "n̩" -> "ᵊn"
_AMERICAN = (("o^ʊ", "O"), ("ɜːɹ", "ɜɹ"), ("ɜː", "ɜɹ"), ("ɪə", "iə"), ("ː", ""), ("ɾ", "T"))
# British rules. misaki applies "e^ə" -> "ɛː" after its general "e" -> "A", where it can no
# longer match ("hair" comes out "hAə"); here it runs first, as intended.
_BRITISH_FIRST = (("e^ə", "ɛː"),)
_BRITISH = (("iə", "ɪə"), ("ə^ʊ", "Q"))

ESPEAK_VOICES = {"en-us": "en-us", "en-gb": "en-gb"}


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger(f"{__name__}.phonemizer")
    logger.setLevel(logging.ERROR)
    return logger


def espeak_to_kokoro(ipa: str, british: bool = False) -> str:
    """Rewrite espeak-ng IPA (with ``^`` ties and stress marks) into Kokoro's alphabet.

    >>> espeak_to_kokoro("bˈʌʔn̩, lˈɪɾə^l")
    'bˈʌtᵊn, lˈɪTᵊl'
    """
    for old, new in _BRITISH_FIRST if british else ():
        ipa = ipa.replace(old, new)
    for old, new in _FROM_ESPEAK:
        ipa = ipa.replace(old, new)
    ipa = _SYLLABIC.sub(r"ᵊ\1", ipa).replace("\u0329", "")
    for old, new in _BRITISH if british else _AMERICAN:
        ipa = ipa.replace(old, new)
    ipa = ipa.replace("o", "ɔ")  # espeak-ng < 1.52 writes "o" where Kokoro expects "ɔ"
    return ipa.replace("^", "").strip()


class EnglishG2P:
    """English text -> Kokoro phoneme string, for "en-us" or "en-gb".

    One espeak backend per dialect, created at construction (so a missing library fails at
    start-up). espeak keeps global state per backend: calls are serialized by a lock.

    Raises:
        ImportError: phonemizer-fork or espeakng-loader is not installed.
        RuntimeError: espeak-ng cannot be loaded.
    """

    def __init__(self) -> None:
        import espeakng_loader
        from phonemizer.backend import EspeakBackend
        from phonemizer.backend.espeak.wrapper import EspeakWrapper

        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
        self._lock = threading.Lock()
        self._backends = {
            dialect: EspeakBackend(
                language=voice,
                preserve_punctuation=True,
                with_stress=True,
                tie="^",
                language_switch="remove-flags",
                # espeak reads "of the" as one word; the mismatch only matters to word-level
                # alignment, which is not used here, yet phonemizer logs a warning for it even
                # when told to ignore it: its logger here shows errors only.
                words_mismatch="ignore",
                logger=_quiet_logger(),
            )
            for dialect, voice in ESPEAK_VOICES.items()
        }

    def __call__(self, text: str, dialect: str = "en-us") -> str:
        """Phonemes of `text` (punctuation kept, words separated by spaces); may be ""."""
        with self._lock:
            ipa = self._backends[dialect].phonemize([text], strip=True)
        return espeak_to_kokoro(ipa[0] if ipa else "", british=dialect == "en-gb")
