"""Which writing scripts a voice reads, and the check that keeps it from spelling out the rest.

A voice's front end reads its own language's script; fed another script it spells letter names
("Chinese letter ...", "pe er i ve ...") or garbles it. So `input` is checked against the voice
at validation, before any audio is sent:

- A letter's script is its Unicode Script_Extensions property (UAX #24), from
  `fontTools.unicodedata` (Unicode's Scripts.txt and ScriptExtensions.txt, bundled). Only
  letters (general category L*) count; digits, punctuation, symbols and letters whose script is
  Common or Inherited are neutral. A letter is readable when any of its script extensions is.
- The scripts a voice reads come from its language tags (`ModelFamily.languages`): a tag's own
  script subtag ("sr-Latn"), else the likely script from Unicode CLDR's likelySubtags
  (`langcodes`: "en-US" -> Latn, "ru" -> Cyrl, "ja" -> Jpan). ISO 15924 codes that name a
  combination (Jpan = Han + Hiragana + Katakana, ...) are expanded by `COMBINED_SCRIPTS`. A tag
  that cannot be parsed, is not a registered language or is "und" puts no limit on the voice.
- Letters are weighed by how much text one letter is (`LETTER_WEIGHTS`): a Han, Hiragana or
  Katakana letter counts as two, any other letter as one. The same sentence takes 2.1 to 2.75
  times as many Latin letters in English as kana and kanji in Japanese (five sentence pairs,
  among them the Kokoro test sentences), so unweighted counts would call a Japanese headline
  with a few product names ("Appleの新しいMacBook Proが発表された", 15 Latin letters, 10
  Japanese) mostly Latin.
- Mostly unreadable: the letters in scripts the voice cannot read weigh more than half of all
  counted letters. That is a 400 (`code="unsupported_script"`) naming the scripts and the
  served voices that would read the text; when the same voice reads it in another language it
  speaks, the message says so instead.
- Otherwise each word of unreadable letters (a maximal run of them, with the combining marks
  and joiners inside it) is dropped from the text, except a lone cased letter (Unicode category
  Lu/Ll/Lt, e.g. Greek "α", "Ω"), which is kept: it is a symbol the front end reads by name
  ("alpha"), and except letters of the scripts a front end reads inside the language as
  foreign words (`kept`: Latin words in Japanese, which OpenJTalk reads in katakana). The
  number of letters dropped is returned for a log line and a response header.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from fontTools import unicodedata as ucd
from langcodes import Language, LanguageTagError

from voxflow.errors import InvalidRequestError
from voxflow.text.document import SpeechDocument

__all__ = [
    "COMBINED_SCRIPTS",
    "LETTER_WEIGHTS",
    "LetterCounts",
    "check_document",
    "count_letters",
    "drop_unreadable",
    "language_scripts",
    "letter_scripts",
    "readable_scripts",
    "script_name",
    "spoken_text",
]

# ISO 15924 codes that stand for several scripts (ISO 15924 code list; UAX #24 section 5.1 for
# Jpan, Kore, Hrkt). CLDR's likely script for a language may be one of these.
COMBINED_SCRIPTS: dict[str, frozenset[str]] = {
    "Jpan": frozenset({"Hani", "Hira", "Kana"}),  # Japanese
    "Kore": frozenset({"Hang", "Hani"}),  # Korean
    "Hrkt": frozenset({"Hira", "Kana"}),  # Japanese syllabaries
    "Hans": frozenset({"Hani"}),  # Han, simplified
    "Hant": frozenset({"Hani"}),  # Han, traditional
    "Hanb": frozenset({"Hani", "Bopo"}),  # Han with Bopomofo
    "Jamo": frozenset({"Hang"}),  # a subset of Hangul
    "Aran": frozenset({"Arab"}),  # Arabic, Nastaliq variant
    "Cyrs": frozenset({"Cyrl"}),  # Old Church Slavonic Cyrillic variant
    "Latf": frozenset({"Latn"}),  # Latin, Fraktur variant
    "Latg": frozenset({"Latn"}),  # Latin, Gaelic variant
    "Syre": frozenset({"Syrc"}),
    "Syrj": frozenset({"Syrc"}),
    "Syrn": frozenset({"Syrc"}),
}

# How many letters one letter of these scripts counts as (see the module docstring); others 1.
LETTER_WEIGHTS: dict[str, int] = {"Hani": 2, "Hira": 2, "Kana": 2}

_NEUTRAL = frozenset({"Zyyy", "Zinh", "Zzzz"})  # Common, Inherited, Unknown
_JOINERS = frozenset({"\u200c", "\u200d"})  # zero-width non-joiner and joiner


@lru_cache(maxsize=8192)
def letter_scripts(ch: str) -> frozenset[str]:
    """ISO 15924 codes of the scripts a character is written in, if it is a letter.

    Args:
        ch: one character.
    Returns:
        The letter's Script_Extensions less Common/Inherited ("今" -> {"Hani"}, "ー" ->
        {"Hira", "Kana"}); empty for a non-letter (category not L*: digits, punctuation,
        symbols, marks) or a letter of no particular script.
    """
    if not unicodedata.category(ch).startswith("L"):
        return frozenset()
    return frozenset(ucd.script_extension(ch)) - _NEUTRAL


def script_name(code: str) -> str:
    """Unicode's English name of an ISO 15924 script code ("Hani" -> "Han", "Cyrl" ->
    "Cyrillic"); the code itself when Unicode has no script of that code (e.g. "Jpan")."""
    try:
        return ucd.script_name(code)
    except KeyError:
        return code


@lru_cache(maxsize=1024)
def language_scripts(tag: str) -> frozenset[str] | None:
    """The scripts a language tag is written in.

    Args:
        tag: BCP-47 tag, "_" or "-" separated ("en-US", "ja", "sr_RS", "sr-Latn").
    Returns:
        Atomic ISO 15924 codes: the tag's script subtag, else CLDR's likely script for the
        language, with `COMBINED_SCRIPTS` expanded ("ja" -> {"Hani", "Hira", "Kana"}); None
        (any script) when the tag cannot be parsed, its language is not registered, or it is
        "und". A language CLDR has no data on gets CLDR's default, Latin.
    """
    try:
        language = Language.get(tag.strip().replace("_", "-"))
    except (LanguageTagError, ValueError):
        return None
    if not language.language or language.language == "und" or not language.is_valid():
        return None
    script = language.script or language.maximize().script
    if script is None:
        return None
    return COMBINED_SCRIPTS.get(script, frozenset({script}))


@lru_cache(maxsize=1024)
def readable_scripts(languages: tuple[str, ...]) -> frozenset[str] | None:
    """The scripts a voice reads: the union of `language_scripts` over the tags it speaks.

    Returns:
        Atomic ISO 15924 codes, or None (reads any script) when any tag is unknown.
    """
    scripts: set[str] = set()
    for tag in languages:
        found = language_scripts(tag)
        if found is None:
            return None
        scripts |= found
    return frozenset(scripts)


@dataclass(frozen=True)
class LetterCounts:
    """How many letters of a text are in which scripts.

    Attributes:
        letters: letters with a script (category L*, not Common/Inherited).
        by_scripts: a letter's script set (`letter_scripts`) -> how many such letters.
    """

    letters: int
    by_scripts: Mapping[frozenset[str], int]

    def weight(self, scripts: frozenset[str] | None = None) -> int:
        """The weighed letters (`LETTER_WEIGHTS`) that `scripts` covers; all when None."""
        return sum(
            n * _letter_weight(s)
            for s, n in self.by_scripts.items()
            if scripts is None or s & scripts
        )

    def unreadable(self, readable: frozenset[str] | None) -> dict[str, int]:
        """Letters a voice cannot read, per script name, most first ({"Hiragana": 6, ...}).

        A letter of several scripts (Script_Extensions) is named by all, joined by " or "."""
        if readable is None:
            return {}
        out: Counter[str] = Counter()
        for scripts, n in self.by_scripts.items():
            if not scripts & readable:
                out[" or ".join(sorted(script_name(s) for s in scripts))] += n
        return dict(out.most_common())

    def mostly_unreadable(self, readable: frozenset[str] | None) -> bool:
        """True when the letters `readable` cannot read weigh more than half of all letters
        (`LETTER_WEIGHTS`); False when `readable` is None."""
        if readable is None:
            return False
        return 2 * (self.weight() - self.weight(readable)) > self.weight()


def _letter_weight(scripts: frozenset[str]) -> int:
    return max(LETTER_WEIGHTS.get(s, 1) for s in scripts)


def count_letters(text: str) -> LetterCounts:
    """Count the letters of `text` by script set (see `letter_scripts`)."""
    counts: Counter[frozenset[str]] = Counter()
    for ch in text:
        scripts = letter_scripts(ch)
        if scripts:
            counts[scripts] += 1
    return LetterCounts(sum(counts.values()), dict(counts))


def _unreadable(ch: str, readable: frozenset[str]) -> bool:
    scripts = letter_scripts(ch)
    return bool(scripts) and not scripts & readable


def _attached(ch: str) -> bool:
    """A combining mark or joiner: part of the word of the letter before it."""
    return ch in _JOINERS or unicodedata.category(ch).startswith("M")


def drop_unreadable(text: str, readable: frozenset[str] | None) -> tuple[str, int]:
    """Remove the words of letters `readable` does not cover.

    A word here is a maximal run of unreadable letters with the marks and joiners inside it.
    A word of one cased letter (Lu/Ll/Lt: "α", "Ω", "Ж") is kept, for the front end to read by
    name. A space left doubled by a removal is removed too; line breaks are kept.

    Returns:
        (the text, how many letters were removed); `text` unchanged and 0 when `readable` is
        None.
    """
    if readable is None:
        return text, 0
    out: list[str] = []
    dropped = 0
    i, n = 0, len(text)
    while i < n:
        if not _unreadable(text[i], readable):
            out.append(text[i])
            i += 1
            continue
        j, letters = i + 1, 1
        while j < n and (_unreadable(text[j], readable) or _attached(text[j])):
            letters += not _attached(text[j])
            j += 1
        if letters == 1 and unicodedata.category(text[i]) in ("Lu", "Ll", "Lt"):
            out.append(text[i:j])
        else:
            dropped += letters
            if j < n and text[j] == " " and (not out or out[-1].isspace()):
                j += 1
        i = j
    return "".join(out), dropped


def spoken_text(document: SpeechDocument) -> str:
    """The text of a document's runs that is read, joined by spaces: a ``<phoneme>`` run is
    spoken from its phonemes, so its text is left out."""
    return " ".join(run.text for run in document.runs if run.text and run.phonemes is None)


def _names(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _refusal(
    counts: LetterCounts,
    unreadable: dict[str, int],
    voice: str,
    voices: Mapping[str, frozenset[str] | None],
    other_languages: Mapping[str, frozenset[str] | None],
    voice_id: str,
    elsewhere: Mapping[str, frozenset[str] | None],
) -> InvalidRequestError:
    """The unsupported_script 400 for a document mostly in scripts the voice cannot read."""
    scripts = _names(list(unreadable))
    plural = "s" if len(unreadable) > 1 else ""
    n = sum(unreadable.values())
    weighed = "" if 2 * n > counts.letters else "; a Han, Hiragana or Katakana letter counts as 2"
    message = (
        f"input is mostly in {scripts} script{plural} ({n} of {counts.letters} letters"
        f"{weighed}), which {voice} cannot read."
    )
    other = next(
        (tag for tag, read in other_languages.items() if not counts.mostly_unreadable(read)), None
    )
    if other is not None:
        message += (
            f" Voice '{voice_id}' reads {scripts} script{plural} with language '{other}'; "
            "drop or change `language`."
        )
    readers = sorted(
        name for name, scripts_of in voices.items() if not counts.mostly_unreadable(scripts_of)
    )
    if readers:
        message += f" Voices that read it: {', '.join(readers)}."
    elif other is None:
        message += f" No served voice reads {scripts}."
        message += next((f" {hint}" for hint, read in elsewhere.items()
                         if not counts.mostly_unreadable(read)), "")
    return InvalidRequestError(message, param="input", code="unsupported_script")


def check_document(
    document: SpeechDocument,
    readable: frozenset[str] | None,
    voice: str,
    voices: Mapping[str, frozenset[str] | None],
    *,
    written: SpeechDocument | None = None,
    kept: frozenset[str] = frozenset(),
    other_languages: Mapping[str, frozenset[str] | None] | None = None,
    voice_id: str = "",
    elsewhere: Mapping[str, frozenset[str] | None] | None = None,
) -> tuple[SpeechDocument, int]:
    """Refuse a document mostly in scripts the voice cannot read; drop the few others.

    Args:
        document: the parsed input, as it will be read (SSML say-as expanded).
        readable: `readable_scripts` of the language the request is read in; None = any
            script.
        voice: how the message names the voice, e.g. "voice 'joe' of model 'piper' (en-US)".
        voices: the other served voices ("model/voice") -> the scripts they read in any of
            their languages, to name the voices that would read the input.
        written: the same input as the user wrote it (say-as content not expanded), whose
            letters are counted; default `document`.
        kept: scripts outside `readable` that the front end reads inside this language as
            foreign words: their letters count as unreadable for the refusal but are not
            dropped.
        other_languages: the voice's other languages -> their scripts; when one of them reads
            the input, the refusal says so (drop or change `language`).
        voice_id: the voice's name for that sentence.
        elsewhere: a sentence naming a model this deployment does not serve -> the scripts
            it reads; when no served voice reads the input, the refusal adds the first
            sentence whose model would (`voxflow.shipped_configs.LANGUAGE_HINTS`).
    Returns:
        (the document with `drop_unreadable` applied to each run's text and
        `dropped_letters` set, letters dropped); the same document and 0 when nothing was
        dropped.
    Raises:
        InvalidRequestError: param "input", code "unsupported_script", when the unreadable
            letters weigh more than half (`LetterCounts.mostly_unreadable`).
    """
    counts = count_letters(spoken_text(written or document))
    unreadable = counts.unreadable(readable)
    if not unreadable or readable is None:
        return document, 0
    if counts.mostly_unreadable(readable):
        raise _refusal(counts, unreadable, voice, voices, other_languages or {}, voice_id,
                       elsewhere or {})
    runs, total = [], 0
    for run in document.runs:
        if run.phonemes is not None:
            runs.append(run)
            continue
        text, dropped = drop_unreadable(run.text, readable | kept)
        runs.append(replace(run, text=text) if dropped else run)
        total += dropped
    if not total:
        return document, 0
    return replace(document, runs=tuple(runs), dropped_letters=total), total
