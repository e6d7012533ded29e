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

With word timestamps, each segment also carries its spoken words (`words.spoken_words`: which
phoneme ids speak which normalized token), placed on the input later (`place.place_words`).
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from piper.config import PiperConfig
from piper.phoneme_ids import BOS, PAD, phonemes_to_ids
from piper.phonemize_espeak import EspeakPhonemizer

from voxflow.models.words import PlacedWord, SpokenWord, spoken_words
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
        spoken: its normalized tokens' id ranges (only with word timestamps).
        words: its input words' id ranges and text spans (`place.place_words`).
    """

    text: str
    phoneme_ids: np.ndarray
    spoken: tuple[SpokenWord, ...] = ()
    words: tuple[PlacedWord, ...] = ()


def phonemize(config: PiperConfig, text: str) -> list[list[str]]:
    """Phonemes per espeak sentence of `text`, for a voice's espeak voice and vowel clusters."""
    global _PHONEMIZER
    with _ESPEAK_LOCK:
        if _PHONEMIZER is None:
            _PHONEMIZER = EspeakPhonemizer()
        return _PHONEMIZER.phonemize(
            config.espeak_voice, text, vowel_clusters=config.vowel_clusters
        )


def id_positions(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """Index of each phoneme's first id in `phonemes_to_ids(phonemes, id_map)`, -1 for a
    phoneme the map lacks (dropped there), then one entry more: the EOS id's index."""
    pos = len(id_map[BOS]) + len(id_map[PAD])
    out = []
    for p in phonemes:
        if p in id_map:
            out.append(pos)
            pos += len(id_map[p]) + len(id_map[PAD])
        else:
            out.append(-1)
    out.append(pos)
    return out



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
    words_run: int | None = None,
    first_clause_chars: int | None = None,
) -> list[PhonemeSegment]:
    """Split, phonemize and map `text` to id segments; empty sentences are dropped.

    Args:
        max_chars, first_max_chars, first_clause_chars: the caps of
            `voxflow.text.segment.segment_text`.
        words_run: with word timestamps, a number for this run (unique within the request,
            increasing): segments then carry their `spoken` words, keyed (run, token index).
    Returns:
        Segments in reading order; [] when nothing in the text can be spoken.
    """
    segments: list[PhonemeSegment] = []
    first_token = 0
    for piece in segment_text(text, max_chars, first_max_chars,
                              first_clause_chars=first_clause_chars):
        lists = [
            phonemes
            for sentence in phonemize(config, piece)
            for phonemes in split_phonemes(sentence, max_phonemes)
            if any(p.strip() for p in phonemes)
        ]
        spoken: list[tuple[SpokenWord, ...]] = [() for _ in lists]
        if words_run is not None:
            tokens = piece.split()
            spoken = spoken_words(tokens, lists, lambda t: _alone(config, t),
                                  lambda ph: id_positions(ph, config.phoneme_id_map),
                                  (words_run, first_token))
            first_token += len(tokens)
        for phonemes, words in zip(lists, spoken, strict=True):
            ids = phonemes_to_ids(phonemes, config.phoneme_id_map)
            segments.append(PhonemeSegment(piece, np.asarray(ids, dtype=np.int64), words))
    return segments


def _alone(config: PiperConfig, token: str) -> list[str]:
    """`token`'s phonemes when phonemized alone, espeak's sentences joined by a space."""
    out: list[str] = []
    for sentence in phonemize(config, token):
        out.extend([*sentence, " "])
    return out


def ipa_to_segments(
    config: PiperConfig, text: str, ipa: str, max_phonemes: int = 400,
    words_run: int | None = None,
) -> list[PhonemeSegment]:
    """Segments from IPA given by the client (SSML ``<phoneme alphabet="ipa" ph=...>``).

    The IPA is decomposed (NFD, as espeak-ng's output is) and each code point looked up in the
    voice's phoneme table; code points the voice has no id for are dropped. A long string is
    cut at spaces into pieces of at most `max_phonemes` (`split_phonemes`), like espeak's
    output, so one element cannot make a minute-long segment. With `words_run` (word
    timestamps), each segment is one spoken word: `text`, keyed (words_run, 0).

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
            spoken: tuple[SpokenWord, ...] = ()
            if words_run is not None:
                spoken = (SpokenWord((words_run, 0), text, 1, len(ids) - 1),)
            segments.append(PhonemeSegment(text, np.asarray(ids, dtype=np.int64), spoken))
    return segments
