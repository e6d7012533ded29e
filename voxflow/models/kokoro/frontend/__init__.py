"""Kokoro's front end: text -> segments of vocabulary ids, at most 510 each.

Steps for one request:
1. the language, decided once per request at validation (`SpeechDocument.language`, from
   `ModelFamily.resolve_language`): the request's `language`, else the one of the voice's
   languages whose script holds most of the text's letters, a kana or kanji counting as two
   Latin letters (`voxflow.text.language`). Japanese voices therefore read English text with
   the English front end rather than spelling it out in katakana, and an English sentence with
   one Japanese word is English (the word is dropped at validation, as for any English voice).
2. `voxflow.text.segment.segment_text` normalizes and splits the text (sentences; long ones cut
   at clause punctuation, then whitespace; the first capped shorter for time to first audio);
3. each piece is phonemized (`english.py`, `japanese.py`) and mapped onto the vocabulary
   (symbols outside it are dropped); a piece whose phonemes pass 510 tokens is cut again, at the
   last sentence punctuation that fits, else ": ;", else ", —", else a space.

With word timestamps (English only), each segment also carries its spoken words
(`voxflow.models.words.spoken_words`: which tokens speak which normalized word), placed on the
input later (`voxflow.models.place.place_words`). A segment's ids are its phonemes, one each,
behind the leading pad (`token_positions`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voxflow.models.kokoro.frontend.english import EnglishG2P
from voxflow.models.kokoro.frontend.japanese import JapaneseG2P
from voxflow.models.kokoro.loader import MAX_TOKENS
from voxflow.models.words import PlacedWord, SpokenWord, spoken_words
from voxflow.text.segment import segment_pieces

LANGUAGES = ("en-us", "en-gb", "ja")
CUT_CLASSES = ("!.?…", ":;", ",—")
"""Cut preferences inside a phoneme string, best first, as in hexgrad's pipeline: after a
sentence mark, then ``: ;``, then ``, —`` (a deadline cut prefers them too: `pieces`)."""
# espeak glues a clock time's parts with ":" ("sˈɪks:fˈɔɹTi"): Kokoro would pause there.
_GLUED_COLON = re.compile(r"(?<=[^\s\d]):(?=[^\s\d])")


@dataclass(frozen=True)
class TokenSegment:
    """One unit of acoustic work.

    Attributes:
        text: the segment's normalized text (for logs and debugging).
        language: "en-us", "en-gb" or "ja".
        phonemes: its phonemes in Kokoro's alphabet (only vocabulary symbols).
        token_ids: (T,) int64 vocabulary ids, 1 <= T <= 510, pads not included.
        spoken: its normalized words' token ranges, as indices into the graph's (T + 2,)
            tokens with the pads (only with word timestamps).
        words: its input words' token ranges and text spans (`voxflow.models.place`).
        cut: it ends inside a sentence (a capped first segment, or a piece past 510 tokens
            cut again other than at `! . ? …`), so the acoustic stage keeps the shorter
            `cut_pause_s` after it.
        offset_s: seconds of its segment's audio before it: 0 for a segment as the front end
            made it; for the rest of a segment cut at schedule time (`pieces`), the audio of
            the parts before it, by which its word times are shifted.
    """

    text: str
    language: str
    phonemes: str
    token_ids: np.ndarray
    spoken: tuple[SpokenWord, ...] = ()
    words: tuple[PlacedWord, ...] = ()
    cut: bool = False
    offset_s: float = 0.0


def token_positions(phonemes: Sequence[str]) -> list[int]:
    """Index of each phoneme's token in the graph's ``tokens`` row (the pad, then one token
    per phoneme), then one entry more: the closing pad's index. Every phoneme of a segment has
    a token (the front end keeps only vocabulary symbols)."""
    return [*range(1, len(phonemes) + 2)]


def split_phonemes(phonemes: str, limit: int = MAX_TOKENS) -> list[str]:
    """Cut a phoneme string into pieces of at most `limit` characters.

    Each cut is after the last character of the first class in `CUT_CLASSES` found in the
    first `limit` characters (followed by a space or the end), else at the last space, else at
    `limit`. Pieces are stripped; only the spaces at cuts are lost.
    """
    pieces = []
    rest = phonemes.strip()
    while len(rest) > limit:
        head = rest[: limit + 1]  # the character after the window tells whether a cut is clean
        cut = None
        for marks in CUT_CLASSES:
            found = [i + 1 for i, c in enumerate(head[:limit]) if c in marks]
            found = [i for i in found if i == len(rest) or rest[i] == " "]
            if found:
                cut = found[-1]
                break
        if cut is None:
            space = head.rfind(" ")
            cut = space if space > 0 else limit
        pieces.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        pieces.append(rest)
    return [p for p in pieces if p]


class KokoroFrontend:
    """Both G2Ps and the vocabulary; `segments()` is the whole front end for one request.

    Args:
        vocab: symbol -> token id (`loader.load_vocab`).
    Raises:
        ImportError, RuntimeError: a phonemizer dependency is missing (at construction).
    """

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab
        self.english = EnglishG2P()
        self.japanese = JapaneseG2P()

    def phonemize(self, text: str, language: str) -> str:
        """Phonemes of `text` in `language`, restricted to the vocabulary's symbols."""
        if language == "ja":
            phonemes = self.japanese(text)
        else:
            phonemes = _GLUED_COLON.sub(" ", self.english(text, language))
        return "".join(c for c in phonemes if c in self.vocab)

    def segments(
        self, text: str, language: str, max_chars: int, first_max_chars: int | None,
        words_run: int | None = None, growth: float | None = None,
    ) -> list[TokenSegment]:
        """Split, phonemize and map `text`; pieces with nothing to say are dropped.

        Args:
            max_chars, first_max_chars, growth: the caps (`voxflow.text.segment_pieces`).
            words_run: with word timestamps, a number for this run (unique within the request,
                increasing): English segments then carry their `spoken` words, keyed
                (run, token index); Japanese ones none (no word boundaries in the readings).
        Returns:
            Segments in reading order; [] when nothing in the text can be spoken.
        """
        out = []
        lang = "ja" if language == "ja" else "en"
        first_token = 0
        for piece, cut in segment_pieces(text, max_chars, first_max_chars, lang=lang,
                                         growth=growth):
            pieces = split_phonemes(self.phonemize(piece, language))
            spoken: list[tuple[SpokenWord, ...]] = [() for _ in pieces]
            if words_run is not None and lang == "en":
                tokens = piece.split()
                spoken = spoken_words(tokens, pieces, lambda t: self.phonemize(t, language),
                                      token_positions, (words_run, first_token))
                first_token += len(tokens)
            last = len(pieces) - 1
            for k, (phonemes, words) in enumerate(zip(pieces, spoken, strict=True)):
                ids = np.fromiter((self.vocab[c] for c in phonemes), np.int64, len(phonemes))
                if has_sound(phonemes):
                    # a piece cut again ends inside the sentence unless cut at its end
                    ends = phonemes.endswith(tuple(CUT_CLASSES[0]))
                    out.append(TokenSegment(piece, language, phonemes, ids, words,
                                            cut=cut if k == last else not ends))
        return out


    def ipa_segments(self, text: str, ipa: str, language: str,
                     words_run: int | None = None) -> list[TokenSegment]:
        """Segments from IPA given by the client (SSML ``<phoneme alphabet="ipa" ph=...>``).

        Kokoro's alphabet is IPA plus a few capitals (see `english.py`); symbols outside the
        vocabulary are dropped and the rest cut at 510 tokens like any phoneme string. With
        `words_run` (word timestamps), each segment is one spoken word: `text`, keyed
        (words_run, 0).

        Returns:
            [] when nothing of `ipa` is in the vocabulary.
        """
        kept = "".join(c for c in ipa if c in self.vocab)
        out = []
        for phonemes in split_phonemes(kept):
            ids = np.fromiter((self.vocab[c] for c in phonemes), np.int64, len(phonemes))
            spoken: tuple[SpokenWord, ...] = ()
            if words_run is not None:
                spoken = (SpokenWord((words_run, 0), text, 1, len(phonemes) + 1),)
            if has_sound(phonemes):
                out.append(TokenSegment(text, language, phonemes, ids, spoken))
        return out


def has_sound(phonemes: str) -> bool:
    """False for a piece of only punctuation and spaces (Kokoro would say nothing): a piece
    the front end drops, and a side a deadline cut may not leave (`pieces`)."""
    return any(c.isalpha() for c in phonemes)
