"""What a request's `input` says, parsed once at validation: runs of text, pauses and rates.

Plain text and SSML (`voxflow.text.ssml`, when the input starts with ``<speak``) both become a
`SpeechDocument`: an ordered tuple of `TextRun`. A run is text spoken with one set of
properties; run boundaries are segment boundaries (a new segment starts at each run), so a
parser only starts a new run where the properties change, at a break, or at an SSML ``<s>``
or ``<p>``. Inline substitutions (``<sub>``, ``<say-as>``) are expanded into the run's text.

The document is built on the event loop before a request is queued, so every parse error is a
400 before any audio is sent. Front ends (`voxflow.models.base.TextFrontendStage`) segment each
run's text and record, per segment, its speed factor and the silence to put after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from voxflow.errors import InvalidRequestError

__all__ = ["MAX_BREAK_S", "SpeechDocument", "TextRun", "parse_input", "parse_plain"]

# Longest silence one break may ask for, in seconds (SSML engines cap it too: Azure at 5 s,
# Google at 10 s). Longer values are a 400, not a silent clamp.
MAX_BREAK_S = 10.0


@dataclass(frozen=True)
class TextRun:
    """A stretch of input spoken with one set of properties.

    Attributes:
        text: raw text to normalize and segment; "" for a run that is only a pause.
        rate: speaking-rate multiplier on the request's `speed` (SSML ``<prosody rate>``), > 0.
        break_after_s: seconds of silence after the run's last segment (``<break>``,
            ``[pause:1s]``), 0 to `MAX_BREAK_S`.
        phonemes: IPA from ``<phoneme alphabet="ipa" ph="...">``; a family that takes
            phonemes speaks these instead of `text` (`text` is then the element's content,
            for logs and the script check). None for ordinary text.
        normalize: False when `text` is already spelled out for speech (``<say-as>`` output)
            and must not be rewritten by the English number and abbreviation rules.
    """

    text: str
    rate: float = 1.0
    break_after_s: float = 0.0
    phonemes: str | None = None
    normalize: bool = True


@dataclass(frozen=True)
class SpeechDocument:
    """A parsed `input`.

    Attributes:
        runs: the runs in reading order (at least one).
        lead_silence_s: seconds of silence before the first audio (a break at the very start).
        ssml: True when the input was SSML.
        dropped_letters: letters of scripts the voice cannot read that were removed from the
            runs (`voxflow.text.scripts.check_document`); sent as `X-Dropped-Letters`.
        language: the one language tag (one of the voice's `ModelFamily.languages`) the
            request is read in, set by `Engine.prepare` (`ModelFamily.resolve_language`);
            None before that.
        source: the `input` as sent (`parse_input`), which word timestamps' code point
            offsets index; "" for a document built otherwise.
    """

    runs: tuple[TextRun, ...]
    lead_silence_s: float = 0.0
    ssml: bool = False
    dropped_letters: int = 0
    language: str | None = None
    # not part of what the document says (two inputs can parse alike): left out of == and repr
    source: str = field(default="", compare=False, repr=False)

    @property
    def text(self) -> str:
        """The spoken text of all runs joined by spaces (for script checks and logs)."""
        return " ".join(run.text for run in self.runs if run.text)


# "[pause:1s]", "[pause: 500ms]", "[pause:1.5 s]": the bracket shorthand some TTS front ends and
# LLM prompts use for a pause. Anything else that starts like a pause marker ("[pause:1min]",
# "[pause:-1s]", "[pause]") is refused rather than read aloud.
_PAUSE_RE = re.compile(r"\[\s*pause\s*:\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*\]", re.IGNORECASE)
_PAUSE_LIKE_RE = re.compile(r"\[\s*pause\b[^\]\[]{0,40}\]?", re.IGNORECASE)


def _pause_error(marker: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"pause marker '{marker}' {why}; write [pause:1.5s] or [pause:500ms] "
        f"(0 to {MAX_BREAK_S:g} s).",
        param="input",
        code="invalid_pause",
    )


def _pause_seconds(m: re.Match[str]) -> float:
    seconds = float(m.group(1)) / (1000.0 if (m.group(2) or "s").lower() == "ms" else 1.0)
    if seconds > MAX_BREAK_S:
        raise _pause_error(m.group(0), f"is longer than {MAX_BREAK_S:g} s")
    return seconds


def _check_pause_markers(text: str) -> None:
    """Raise for any "[pause..." that is not a well-formed marker."""
    for m in _PAUSE_LIKE_RE.finditer(text):
        if not _PAUSE_RE.fullmatch(m.group(0)):
            raise _pause_error(m.group(0), "is not a pause marker")


def parse_plain(text: str) -> SpeechDocument:
    """Plain text: one run, split at ``[pause:Ns]`` / ``[pause:Nms]`` markers into runs whose
    `break_after_s` is the pause (a marker at the start gives `lead_silence_s`).

    Raises:
        InvalidRequestError: a pause longer than `MAX_BREAK_S`, or text that starts like a
            pause marker but is not one (``[pause:1min]``, ``[pause:-1s]``), code
            ``invalid_pause``.
    """
    _check_pause_markers(text)
    runs: list[TextRun] = []
    lead = 0.0
    pos = 0
    for m in _PAUSE_RE.finditer(text):
        seconds = _pause_seconds(m)
        before = text[pos : m.start()]
        if before.strip():
            runs.append(TextRun(before, break_after_s=seconds))
        elif runs:
            last = runs[-1]
            runs[-1] = TextRun(last.text, last.rate, last.break_after_s + seconds)
        else:
            lead += seconds
        pos = m.end()
    rest = text[pos:]
    if rest.strip() or not runs:
        runs.append(TextRun(rest))
    return SpeechDocument(tuple(runs), lead_silence_s=lead)


# Invisible characters a client or editor may put before the markup: BOM, zero-width space,
# joiners, word joiner.
_INVISIBLE_LEAD = "\ufeff\u200b\u200c\u200d\u2060"
# Inputs that are XML documents: a <speak> root (with or without a namespace prefix), an XML
# declaration or other processing instruction, a comment, a DOCTYPE (then refused, never
# expanded).
_XML_START_RE = re.compile(r"(?:<(?:\w[\w.-]*:)?speak[\s>/]|<\?|<!--|<!doctype\s)", re.IGNORECASE)


def _no_pause_markers_in_ssml(document: SpeechDocument) -> SpeechDocument:
    for run in document.runs:
        m = _PAUSE_LIKE_RE.search(run.text)
        if m:
            raise InvalidRequestError(
                f"pause marker '{m.group(0)}' inside SSML: use <break time=\"1s\"/> there "
                "([pause:...] markers are for plain text).",
                param="input",
                code="invalid_ssml",
            )
    return document


def parse_input(text: str, say_as_language: str | None = "en") -> SpeechDocument:
    """Parse a request's `input`: SSML when it starts (after whitespace, a byte-order mark or
    zero-width characters) with a ``<speak>`` tag (namespace prefix allowed), a processing
    instruction such as ``<?xml``, a comment ``<!--`` or a ``<!DOCTYPE``; else plain text
    (`parse_plain`).

    Args:
        text: the request's `input`.
        say_as_language: the language SSML ``<say-as>`` content is spelled out in
            (`voxflow.text.say_as.expand_say_as`); None leaves it as written (checked, not
            expanded), for deciding the language from the text the user wrote.

    Raises:
        InvalidRequestError: malformed or unsupported SSML (the message names the line and
            column), a pause out of range, or a malformed ``[pause:...]`` marker (plain text)
            or any such marker inside SSML.
    """
    body = text.lstrip().lstrip(_INVISIBLE_LEAD).lstrip()
    if _XML_START_RE.match(body):
        from voxflow.text.ssml import parse_ssml

        document = _no_pause_markers_in_ssml(parse_ssml(body, say_as_language))
    else:
        document = parse_plain(text)
    return replace(document, source=text)
