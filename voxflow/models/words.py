"""Word boundaries in a segment of phoneme ids: which ids speak which word, and when.

Shared by the families whose acoustic model predicts a duration per id (Piper, Kokoro).

espeak-ng's phoneme string puts a space between the words it speaks, but one written token can
be several spoken words ("1,200" is "one thousand two hundred") and espeak may join or change
words in context. So each normalized token is also phonemized alone, and the segment's phoneme
words are matched to the tokens' (`label_words`): equal phoneme words pair up, a changed
stretch pairs in proportion, a phoneme word with no counterpart joins the previous token.
A token's phoneme words then give its phoneme-id range (from the family's id layout: Piper's
`piper.frontend.id_positions`, Kokoro's `kokoro.frontend.token_positions`), and the model's
per-id durations (frames) give its start and end (`word_times`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np

from voxflow.stages.outputs import WordTiming

_STRESS = "ˈˌ"


@dataclass(frozen=True)
class SpokenWord:
    """A normalized token's stretch of one segment's phoneme ids.

    Attributes:
        key: the token's identity within its request (same key: same token, even across
            segments), in reading order.
        text: the token as normalized ("dollars"), for aligning to the input.
        id_start: index of its first phoneme id in the segment's ids.
        id_end: one past its last id (Piper: the PAD after its last phoneme included).
    """

    key: tuple[int, int]
    text: str
    id_start: int
    id_end: int


@dataclass(frozen=True)
class PlacedWord:
    """An input word's stretch of one segment's phoneme ids.

    Attributes:
        id_start, id_end: phoneme-id index range in the segment, end exclusive.
        text_start, text_end: code point offsets of the word in the request's `input`.
    """

    id_start: int
    id_end: int
    text_start: int
    text_end: int


def _is_punctuation(phoneme: str) -> bool:
    return unicodedata.category(phoneme)[0] == "P"


def phoneme_words(phonemes: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) indices into `phonemes` of each spoken word: runs between spaces,
    punctuation at either end left out; runs of punctuation alone are no word."""
    words = []
    start = 0
    for i in range(len(phonemes) + 1):
        if i == len(phonemes) or phonemes[i] == " ":
            lo, hi = start, i
            while lo < hi and _is_punctuation(phonemes[lo]):
                lo += 1
            while hi > lo and _is_punctuation(phonemes[hi - 1]):
                hi -= 1
            if lo < hi:
                words.append((lo, hi))
            start = i + 1
    return words


def _key(word: str) -> str:
    return "".join(ch for ch in word if ch not in _STRESS and not _is_punctuation(ch))


def label_words(actual: Sequence[str], expected: Sequence[Sequence[str]]
                ) -> list[list[tuple[int, int]]]:
    """Which tokens each phoneme word of a segment (`actual`, in order) speaks, given each
    token's phoneme words when phonemized alone (`expected`).

    Stress marks and punctuation are ignored when comparing. Equal words pair up; in a
    stretch that differs (espeak joins "on the" into one word "ɔnðə", or says "it" as "ɪɾ"
    before a vowel) each character follows its counterpart in a character alignment of the
    stretch, so a joined word is cut at the tokens' break; a word with no counterpart joins
    the previous token.

    Returns:
        Per actual word, its pieces in order: (token index into `expected`, characters of the
        word's key, stress and punctuation left out, that the piece covers); labels never
        decrease.
    """
    flat = [(t, _key(w)) for t, words in enumerate(expected) for w in words]
    keys = [_key(w) for w in actual]
    if not flat:
        return [[(0, len(k))] for k in keys]
    pieces: list[list[tuple[int, int]] | None] = [None] * len(actual)
    matcher = SequenceMatcher(None, [k for _, k in flat], keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(j2 - j1):
                pieces[j1 + k] = [(flat[i1 + k][0], len(keys[j1 + k]))]
        elif tag == "replace":
            owners = _owners(flat[i1:i2], "".join(keys[j1:j2]))
            pos = 0
            for j in range(j1, j2):
                before = owners[pos - 1] if pos else flat[i1][0]
                pieces[j] = _runs(owners[pos : pos + len(keys[j])]) or [(before, 0)]
                pos += len(keys[j])
    previous = next((p[0][0] for p in pieces if p), flat[0][0])
    out = []
    for j, found in enumerate(pieces):
        found = found or [(previous, len(keys[j]))]
        previous = found[-1][0]
        out.append(found)
    return out


def _owners(expected: Sequence[tuple[int, str]], actual: str) -> list[int]:
    """The token of each character of `actual`, aligning it character by character with the
    expected words' keys (`(token, key)` each): a matched character takes its counterpart's
    token, an unmatched one its predecessor's (the first token at the start)."""
    chars = "".join(k for _, k in expected)
    token_of = [t for t, k in expected for _ in k]
    owners: list[int | None] = [None] * len(actual)
    for block in SequenceMatcher(None, chars, actual, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            owners[block.b + k] = token_of[block.a + k]
    previous = expected[0][0]
    out = []
    for owner in owners:
        previous = previous if owner is None else max(owner, previous)
        out.append(previous)
    return out


def _runs(labels: Sequence[int]) -> list[tuple[int, int]]:
    """`labels` run-length encoded: [(label, count), ...]."""
    runs: list[tuple[int, int]] = []
    for label in labels:
        if runs and runs[-1][0] == label:
            runs[-1] = (label, runs[-1][1] + 1)
        else:
            runs.append((label, 1))
    return runs


def cut_word(phonemes: Sequence[str], span: tuple[int, int], pieces: Sequence[tuple[int, int]]
             ) -> list[tuple[int, tuple[int, int]]]:
    """The phoneme word phonemes[span[0]:span[1]] cut into `label_words`' pieces: (token
    index, (start, end)) each, empty pieces left out; the last piece takes the rest."""
    start, stop = span
    out = []
    count = target = 0
    for n, (label, chars) in enumerate(pieces):
        end = stop
        if n < len(pieces) - 1:
            target += chars
            end = start
            while end < stop and count < target:
                count += len(_key(phonemes[end]))
                end += 1
        if end > start:
            out.append((label, (start, end)))
        start = end
    return out


def word_ids(span: tuple[int, int], positions: Sequence[int]) -> tuple[int, int] | None:
    """The id range (start, end) of the phonemes span[0]:span[1], up to the next phoneme's
    first id (Piper: the PAD after the last one included); None when the voice has an id for
    none of them.

    Args:
        positions: each phoneme's first id index, -1 for one without an id, then one entry
            more: the index after the last phoneme's ids (the family's id layout).
    """
    inside = [positions[i] for i in range(*span) if positions[i] >= 0]
    if not inside:
        return None
    after = next((p for p in positions[span[1]:] if p >= 0), None)
    return inside[0], after if after is not None else inside[-1] + 2


def word_times(durations: np.ndarray, words: Sequence[PlacedWord], hop_length: int,
               sample_rate: int, stretch: float = 1.0) -> list[WordTiming]:
    """Each word's start and end in the segment's audio.

    Args:
        durations: (T,) frames per phoneme id of the segment (the encoder's ceil'd durations).
        words: the segment's words, as id ranges.
        hop_length: samples per frame.
        sample_rate: Hz.
        stretch: duration factor applied after synthesis (native speed / requested speed).
    Returns:
        One `WordTiming` per word, seconds from the segment's first sample.
    """
    edges = np.concatenate([[0], np.cumsum(np.asarray(durations, np.float64))])
    scale = hop_length / sample_rate * stretch
    return [
        WordTiming(float(edges[w.id_start] * scale), float(edges[w.id_end] * scale),
                   w.text_start, w.text_end)
        for w in words
    ]


def spoken_words(
    tokens: Sequence[str],
    segments: Sequence[Sequence[str]],
    token_phonemes: Callable[[str], Sequence[str]],
    positions: Callable[[Sequence[str]], list[int]],
    key: tuple[int, int],
) -> list[tuple[SpokenWord, ...]]:
    """The spoken words of each segment cut from one piece of normalized text.

    Args:
        tokens: the piece's whitespace-separated tokens, in order.
        segments: the phonemes of the segments made of the piece, in order (a list of
            phoneme strings, or a string of one-character phonemes).
        token_phonemes: phonemizes one token alone (espeak's sentences joined by spaces).
        positions: a segment's phonemes -> each one's first id index (see `word_ids`).
        key: (run, index of the piece's first token within the run): keys are
            (run, that index + token index).
    Returns:
        Per segment, its words in order: consecutive phoneme words of one token are one word.
    """
    expected = []
    for token in tokens:
        phonemes = token_phonemes(token)
        expected.append(["".join(phonemes[a:b]) for a, b in phoneme_words(phonemes)])
    actual = [(s, span) for s, phonemes in enumerate(segments) for span in phoneme_words(phonemes)]
    labels = label_words(["".join(segments[s][a:b]) for s, (a, b) in actual], expected)
    out: list[list[SpokenWord]] = [[] for _ in segments]
    starts = [positions(phonemes) for phonemes in segments]
    for (s, span), pieces in zip(actual, labels, strict=True):
        for label, piece in cut_word(segments[s], span, pieces):
            ids = word_ids(piece, starts[s])
            if ids is None:
                continue
            word_key = (key[0], key[1] + label)
            words = out[s]
            if words and words[-1].key == word_key:
                words[-1] = SpokenWord(word_key, words[-1].text, words[-1].id_start, ids[1])
            else:
                words.append(SpokenWord(word_key, tokens[label], *ids))
    return [tuple(words) for words in out]
