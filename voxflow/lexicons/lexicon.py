"""A pronunciation lexicon: whole words -> phonemes (IPA) or a respelling (issue 44).

The JSON a client sends (``PUT /v1/audio/lexicons/{name}``, docs/api.md "Pronunciation
lexicons") and the file the store keeps::

    {"language": "en",                       # optional, informational
     "entries": [
        {"word": "Zorbleck", "phonemes": "tˈeɪbəl"},
        {"word": "SQL", "respelling": "sequel", "case_sensitive": true}]}

An entry has a `word` (one or more words, matched whole), exactly one of `phonemes` (IPA in
the voice's own alphabet: espeak-ng's for Piper and English Kokoro) and `respelling` (text read
instead of the word, any family), and `case_sensitive` (default false). `parse_lexicon` checks
every entry and refuses the first bad one with a 400 naming it (``entries[3] ('SQL')``).

`Lexicon.version` is the sha256 of the canonical JSON (`Lexicon.canonical`): two lexicons
with the same entries have the same version, whatever the spacing or key order they were sent
with; a cache keyed on it is safe across restarts.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property

from voxflow.errors import InvalidRequestError, echo

__all__ = ["MAX_ENTRIES", "Entry", "Lexicon", "lexicon_error", "parse_lexicon"]

MAX_ENTRIES = 10_000
MAX_WORD_CHARS = 100
MAX_VALUE_CHARS = 500
_ENTRY_KEYS = {"word", "phonemes", "respelling", "case_sensitive"}
_TOP_KEYS = {"entries", "language"}
_LANGUAGE_RE = re.compile(r"[A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8})*")


def lexicon_error(message: str, param: str = "entries") -> InvalidRequestError:
    """The 400 for a lexicon that cannot be stored (code ``invalid_lexicon``)."""
    return InvalidRequestError(message, param=param, code="invalid_lexicon")


@dataclass(frozen=True)
class Entry:
    """One word and how to say it.

    Attributes:
        word: the word (or words) as written, matched whole: not inside a longer word.
        phonemes: IPA in the voice's alphabet, or None.
        respelling: text read instead of `word`, or None. Exactly one of the two is set.
        case_sensitive: True: only `word` exactly as written matches; False: any case.
    """

    word: str
    phonemes: str | None = None
    respelling: str | None = None
    case_sensitive: bool = False

    def json(self) -> dict:
        """The entry as its canonical JSON object (the unset one of phonemes/respelling left
        out)."""
        out: dict = {"word": self.word, "case_sensitive": self.case_sensitive}
        if self.phonemes is not None:
            out["phonemes"] = self.phonemes
        else:
            out["respelling"] = self.respelling
        return out


@dataclass(frozen=True)
class Lexicon:
    """A checked lexicon (`parse_lexicon`): its entries in the order given, and a language."""

    entries: tuple[Entry, ...]
    language: str | None = None

    def json(self) -> dict:
        """``{"language", "entries": [...]}``: what the store writes and GET answers."""
        return {"language": self.language, "entries": [e.json() for e in self.entries]}

    @cached_property
    def canonical(self) -> bytes:
        """The JSON bytes the version hashes: sorted keys, no spaces, UTF-8."""
        return json.dumps(self.json(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")

    @cached_property
    def version(self) -> str:
        """sha256 hex of `canonical`: changes whenever what the lexicon says changes."""
        return hashlib.sha256(self.canonical).hexdigest()

    @cached_property
    def _exact(self) -> dict[str, Entry]:
        return {e.word: e for e in self.entries if e.case_sensitive}

    @cached_property
    def _folded(self) -> dict[str, Entry]:
        return {e.word.lower(): e for e in self.entries if not e.case_sensitive}

    @cached_property
    def _matcher(self) -> re.Pattern[str] | None:
        """One regex for every entry, longest words first, each whole (no word character
        before or after); case-insensitive entries inside ``(?i:...)``."""
        if not self.entries:
            return None
        words = sorted(self.entries, key=lambda e: len(e.word), reverse=True)
        alternatives = [re.escape(e.word) if e.case_sensitive else f"(?i:{re.escape(e.word)})"
                        for e in words]
        return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)")

    def find(self, text: str) -> list[tuple[int, int, Entry]]:
        """The entries' whole-word matches in `text`: (start, end, entry), in order, not
        overlapping; a case-sensitive entry wins over a case-insensitive one of the same
        word."""
        if self._matcher is None:
            return []
        found = []
        for m in self._matcher.finditer(text):
            written = m.group(0)
            entry = self._exact.get(written) or self._folded.get(written.lower())
            if entry is not None:
                found.append((m.start(), m.end(), entry))
        return found


def _where(index: int, raw: object) -> str:
    word = raw.get("word") if isinstance(raw, dict) else None
    return f"entries[{index}]" + (f" ({echo(word)})" if isinstance(word, str) else "")


def _text_field(raw: dict, key: str, where: str, limit: int) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise lexicon_error(f"Lexicon entry {where}: '{key}' must be a string.")
    if not value.strip():
        raise lexicon_error(f"Lexicon entry {where}: '{key}' is empty.")
    if len(value) > limit:
        raise lexicon_error(f"Lexicon entry {where}: '{key}' is {len(value)} characters "
                            f"long; at most {limit} are allowed.")
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise lexicon_error(f"Lexicon entry {where}: '{key}' holds a control character.")
    return value.strip()


def _entry(index: int, raw: object) -> Entry:
    where = _where(index, raw)
    if not isinstance(raw, dict):
        raise lexicon_error(f"Lexicon entry {where} must be an object with 'word' and "
                            "'phonemes' or 'respelling'.")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise lexicon_error(f"Lexicon entry {where}: unknown field(s) "
                            f"{', '.join(echo(k) for k in unknown)}; the fields are "
                            f"{', '.join(sorted(_ENTRY_KEYS))}.")
    word = _text_field(raw, "word", where, MAX_WORD_CHARS)
    if word is None:
        raise lexicon_error(f"Lexicon entry {where}: 'word' is missing.")
    if not any(c.isalnum() for c in word):
        raise lexicon_error(f"Lexicon entry {where}: 'word' has no letter or digit to match.")
    phonemes = _text_field(raw, "phonemes", where, MAX_VALUE_CHARS)
    respelling = _text_field(raw, "respelling", where, MAX_VALUE_CHARS)
    if (phonemes is None) == (respelling is None):
        raise lexicon_error(f"Lexicon entry {where}: give exactly one of 'phonemes' (IPA) and "
                            f"'respelling', not {'both' if phonemes else 'neither'}.")
    if phonemes is not None:
        phonemes = unicodedata.normalize("NFC", phonemes)
        if not any(unicodedata.category(c) in ("Ll", "Lu", "Lo")  # not stress/length marks
                   for c in unicodedata.normalize("NFD", phonemes)):
            raise lexicon_error(f"Lexicon entry {where}: 'phonemes' {echo(phonemes)} has no "
                                "IPA letter (only stress marks or punctuation).")
    if respelling is not None and not any(c.isalnum() for c in respelling):
        raise lexicon_error(f"Lexicon entry {where}: 'respelling' has no letter or digit.")
    case = raw.get("case_sensitive", False)
    if not isinstance(case, bool):
        raise lexicon_error(f"Lexicon entry {where}: 'case_sensitive' must be true or false.")
    return Entry(word, phonemes, respelling, case)


def parse_lexicon(raw: object) -> Lexicon:
    """Check a lexicon's JSON (module docstring) and return it.

    Raises:
        InvalidRequestError: (400, code ``invalid_lexicon``) not an object, unknown keys, no
            or too many entries, a bad language tag, or a bad entry: the message names the
            entry (``entries[2] ('Zorbleck')``) and what is wrong with it; a word given twice
            (under its case rule) names both entries.
    """
    if not isinstance(raw, dict):
        raise lexicon_error("A lexicon is a JSON object {\"entries\": [...]}.", param="body")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise lexicon_error(f"Unknown lexicon field(s) {', '.join(echo(k) for k in unknown)}; "
                            "the fields are entries and language.", param="body")
    entries = raw.get("entries")
    if not isinstance(entries, list) or not entries:
        raise lexicon_error("'entries' must be a non-empty list of entries.")
    if len(entries) > MAX_ENTRIES:
        raise lexicon_error(f"A lexicon has at most {MAX_ENTRIES:,} entries, not "
                            f"{len(entries):,}.")
    language = raw.get("language")
    if language is not None and (not isinstance(language, str)
                                 or not _LANGUAGE_RE.fullmatch(language)):
        raise lexicon_error(f"'language' {echo(language)} is not a language tag "
                            "such as 'en' or 'en-US'.", param="language")
    checked: list[Entry] = []
    seen: dict[tuple[bool, str], int] = {}
    for index, item in enumerate(entries):
        entry = _entry(index, item)
        key = (entry.case_sensitive, entry.word if entry.case_sensitive else entry.word.lower())
        if key in seen:
            raise lexicon_error(f"Lexicon entry {_where(index, item)}: the word is already "
                                f"entries[{seen[key]}]; give each word once.")
        seen[key] = index
        checked.append(entry)
    return Lexicon(tuple(checked), language)
