"""Text to phoneme-id segments for Piper voices (espeak-ng through piper-tts).

Text is normalized and split into segments by `voxflow.text.segment` (sentences; long ones cut
at clause punctuation, then whitespace; the first capped shorter for time to first audio). Each
segment is phonemized by espeak-ng; espeak may split a segment further at its own sentence ends,
and each such sentence becomes one segment. A sentence longer than `max_phonemes` phonemes is cut
at word boundaries (spaces) into pieces of at most that many: characters alone do not bound the
work, since espeak may read one character as several words (a CJK character in an English voice
is "Chinese letter ..."), and one huge segment would hold a worker for a minute.
Ids follow piper's scheme: BOS, PAD, then each phoneme followed by PAD, then EOS
(`piper.phoneme_ids.phonemes_to_ids`).
"""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass

import numpy as np
from piper.config import PiperConfig
from piper.phoneme_ids import phonemes_to_ids
from piper.phonemize_espeak import EspeakPhonemizer

from voxflow.text.segment import segment_text

# espeak-ng is one global C state: voice selection and phonemization must not interleave.
_ESPEAK_LOCK = threading.Lock()
_PHONEMIZER: EspeakPhonemizer | None = None


@dataclass(frozen=True)
class PhonemeSegment:
    """One unit of acoustic work.

    Attributes:
        text: the segment's normalized text (for logs and debugging).
        phoneme_ids: (T,) int64 ids into the voice's phoneme table, BOS..EOS included.
    """

    text: str
    phoneme_ids: np.ndarray


def phonemize(config: PiperConfig, text: str) -> list[list[str]]:
    """Phonemes per espeak sentence of `text`, for a voice's espeak voice and vowel clusters."""
    global _PHONEMIZER
    with _ESPEAK_LOCK:
        if _PHONEMIZER is None:
            _PHONEMIZER = EspeakPhonemizer()
        return _PHONEMIZER.phonemize(
            config.espeak_voice, text, vowel_clusters=config.vowel_clusters
        )


def split_phonemes(phonemes: list[str], max_phonemes: int) -> list[list[str]]:
    """Cut a phoneme sequence into pieces of at most `max_phonemes`, at spaces when possible.

    A piece ends after the last space that keeps it within the cap; a run with no space longer
    than the cap is cut at the cap. Concatenating the pieces gives `phonemes` back.
    """
    pieces: list[list[str]] = []
    start = 0
    while len(phonemes) - start > max_phonemes:
        window = phonemes[start : start + max_phonemes]
        spaces = [i for i, p in enumerate(window) if p == " "]
        cut = spaces[-1] + 1 if spaces and spaces[-1] > 0 else max_phonemes
        pieces.append(phonemes[start : start + cut])
        start += cut
    pieces.append(phonemes[start:])
    return pieces


def text_to_segments(
    config: PiperConfig,
    text: str,
    max_chars: int,
    first_max_chars: int | None,
    max_phonemes: int = 400,
) -> list[PhonemeSegment]:
    """Split, phonemize and map `text` to id segments; empty sentences are dropped.

    Returns:
        Segments in reading order; [] when nothing in the text can be spoken.
    """
    segments: list[PhonemeSegment] = []
    for piece in segment_text(text, max_chars, first_max_chars):
        for sentence in phonemize(config, piece):
            for phonemes in split_phonemes(sentence, max_phonemes):
                if not any(p.strip() for p in phonemes):
                    continue
                ids = phonemes_to_ids(phonemes, config.phoneme_id_map)
                segments.append(PhonemeSegment(piece, np.asarray(ids, dtype=np.int64)))
    return segments


def ipa_to_segments(
    config: PiperConfig, text: str, ipa: str, max_phonemes: int = 400
) -> list[PhonemeSegment]:
    """Segments from IPA given by the client (SSML ``<phoneme alphabet="ipa" ph=...>``).

    The IPA is decomposed (NFD, as espeak-ng's output is) and each code point looked up in the
    voice's phoneme table; code points the voice has no id for are dropped. A long string is
    cut at spaces into pieces of at most `max_phonemes` (`split_phonemes`), like espeak's
    output, so one element cannot make a minute-long segment.

    Returns:
        Segments in order; [] when no letter of `ipa` is in the voice's table (punctuation
        alone says nothing).
    """
    table = config.phoneme_id_map
    phonemes = [p for p in unicodedata.normalize("NFD", ipa.strip()) if p in table]
    segments = []
    for piece in split_phonemes(phonemes, max_phonemes):
        if any(unicodedata.category(p)[0] == "L" for p in piece):
            ids = phonemes_to_ids(piece, table)
            segments.append(PhonemeSegment(text, np.asarray(ids, dtype=np.int64)))
    return segments
