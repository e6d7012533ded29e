"""The SSML subset voxflow reads: an ``<speak>`` input -> a `SpeechDocument` of runs.

Parsed with defusedxml's SAX parser (expat underneath) with DTDs, entity declarations and
external references forbidden, so a ``<!DOCTYPE>`` (and with it every entity bomb and external
entity) is a 400, never expanded. The SAX locator gives each element's line and column, which
every error names (lines and columns count from 1, columns in characters).

Elements (docs/api.md "SSML" is the user's version of this table):

==============  ==========================================================================
``speak``       the root; ``version``, ``xmlns``, ``xmlns:*``, ``xml:lang``,
                ``xsi:schemaLocation`` accepted and ignored (the request's language rules)
``p``, ``s``    a paragraph / sentence: each starts and ends a run; a paragraph adds
                `PARAGRAPH_PAUSE_S` of silence after its last sentence
``break``       silence: ``time`` (``500ms``, ``1.5s``) wins over ``strength``
                (`BREAK_STRENGTH_S`); no attribute is ``medium``
``prosody``     ``rate`` (`RATE_WORDS`, ``80%``, ``1.5``, ``+20%``, ``-10%``) multiplies the
                run's rate, nested ones multiply; ``pitch``, ``volume``, ``range``,
                ``contour`` are accepted and ignored (the voices have no pitch control)
``say-as``      spelled out into the running text in the request's language
                (`voxflow.text.say_as`)
``sub``         its ``alias`` replaces its content in the running text
``phoneme``     ``alphabet="ipa"`` (the default) and ``ph``: a run of its own
``emphasis``    its content is spoken as ordinary text (``level`` ignored)
``mark``        nothing (``name`` ignored)
==============  ==========================================================================

``voice``, ``audio``, ``lang``, ``lexicon``, ``lookup``, ``meta``, ``metadata``, ``token``,
``w`` and ``desc`` are a 400 "not supported"; any other tag or attribute is a 400 "unknown".

Runs: text accumulates into one run until a boundary (``<p>``, ``<s>``, ``<break>``, a
``<phoneme>``) or a change of rate, so adjacent text with the same rate is one run. Silence
between two runs is the sum of the ``<break>`` elements between them, or, when there is none,
the paragraph pause if a paragraph starts or ends there: an explicit break replaces the
paragraph pause (``<break strength="none"/>`` removes it). Breaks before any text are the
document's lead silence; a paragraph pause is never put before the first or after the last
run. XML whitespace (space, tab, newline) collapses to one space, as in HTML: only ``<p>``,
``<s>`` and ``<break>`` separate sentences.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from xml.sax import InputSource, SAXParseException
from xml.sax.handler import ContentHandler

import defusedxml.sax
from defusedxml import DefusedXmlException

from voxflow.errors import InvalidRequestError, clip, echo
from voxflow.text.document import MAX_BREAK_S, SpeechDocument
from voxflow.text.say_as import INTERPRETATIONS, SayAsError, expand_say_as
from voxflow.text.ssml_runs import RunBuilder

__all__ = [
    "BREAK_STRENGTH_S",
    "MAX_DEPTH",
    "PARAGRAPH_PAUSE_S",
    "RATE_WORDS",
    "parse_ssml",
]

# Seconds of silence for <break strength=...>: none removes the boundary's pause; x-weak is a
# short hesitation, medium (the default) a comma-length pause, x-strong a paragraph-length one.
BREAK_STRENGTH_S = {
    "none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 0.75, "x-strong": 1.25,
}  # fmt: skip
# Silence after a paragraph's last sentence, on top of the voice's own sentence ending.
PARAGRAPH_PAUSE_S = 0.4
# <prosody rate=...> words: SSML 1.1 only asks that they do not decrease; these are a ladder
# from half speed to nearly double, inside the request's 0.25-4.0 speed range.
RATE_WORDS = {
    "x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.75,
}  # fmt: skip
# One rate value's bounds (the engine checks the product with the request's speed).
MIN_RATE, MAX_RATE = 0.25, 4.0
# Deepest element nesting accepted (speak counts as 1); real SSML rarely goes past 5.
MAX_DEPTH = 64

# Attributes each element accepts (xmlns:* too on speak).
_ATTRIBUTES = {
    "speak": {"version", "xmlns", "xml:lang", "xsi:schemaLocation"},
    "p": {"xml:lang"},
    "s": {"xml:lang"},
    "break": {"time", "strength"},
    "prosody": {"rate", "pitch", "volume", "range", "contour"},
    "say-as": {"interpret-as", "format"},
    "sub": {"alias"},
    "phoneme": {"alphabet", "ph"},
    "emphasis": {"level"},
    "mark": {"name"},
}
_REQUIRED = {"say-as": "interpret-as", "sub": "alias", "phoneme": "ph"}
_UNSUPPORTED = {"voice", "audio", "lang", "lexicon", "lookup", "meta", "metadata", "token", "w",
                "desc"}  # fmt: skip
# Elements whose content is collected as text (no child elements) and used at their end.
_LEAVES = {"say-as", "sub", "phoneme", "break", "mark"}

_TIME_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)", re.IGNORECASE)
_RATE_RE = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)(%?)")


def _error(head: str, line: int, column: int, detail: str = "") -> InvalidRequestError:
    """The 400 for an SSML fault: "HEAD at line L, column C[: DETAIL]." (both from 1)."""
    message = f"{head} at line {line}, column {column}" + (f": {detail}." if detail else ".")
    return InvalidRequestError(message, param="input", code="invalid_ssml")


@dataclass
class _Element:
    """An open element: where it starts (1-based), its rate and, for leaves, its text."""

    tag: str
    line: int
    column: int
    attrs: dict[str, str]
    rate: float
    text: list[str] | None = field(default=None)

    def fail(self, message: str) -> InvalidRequestError:
        return _error(f"SSML <{clip(self.tag)}>", self.line, self.column, message)


def _break_seconds(el: _Element) -> float:
    """Seconds of silence a ``<break>`` asks for; `time` wins over `strength`."""
    strength = el.attrs.get("strength", "medium").lower()
    if strength not in BREAK_STRENGTH_S:
        raise el.fail(
            f"strength {echo(el.attrs['strength'])} is not one of {', '.join(BREAK_STRENGTH_S)}"
        )
    if "time" not in el.attrs:
        return BREAK_STRENGTH_S[strength]
    m = _TIME_RE.fullmatch(el.attrs["time"])
    if not m:
        raise el.fail(f"time {echo(el.attrs['time'])} is not a duration like 500ms or 1.5s")
    seconds = float(m.group(1)) / (1000.0 if m.group(2).lower() == "ms" else 1.0)
    if seconds > MAX_BREAK_S:
        raise el.fail(f"time {echo(el.attrs['time'])} is longer than {MAX_BREAK_S:g} s")
    return seconds


def _rate(el: _Element) -> float:
    """The multiplier of ``<prosody rate=...>`` (1.0 without one)."""
    value = el.attrs.get("rate", "default").strip().lower()
    if value in RATE_WORDS:
        return RATE_WORDS[value]
    m = _RATE_RE.fullmatch(value)
    if not m or (m.group(1) and not m.group(3)):
        raise el.fail(
            f"rate {echo(el.attrs['rate'])} is not one of {', '.join(RATE_WORDS)}, a percentage "
            "(80%, +20%, -10%) or a multiplier (1.5)"
        )
    number = float(m.group(2))
    if m.group(3):  # "80%" is 0.8 of the rate; "+20%" / "-10%" change it by that much.
        rate = 1.0 + float(m.group(1) + m.group(2)) / 100.0 if m.group(1) else number / 100.0
    else:
        rate = number
    if not MIN_RATE <= rate <= MAX_RATE:
        raise el.fail(
            f"rate {echo(el.attrs['rate'])} is {rate:g} times the speed, outside "
            f"{MIN_RATE:g} to {MAX_RATE:g}"
        )
    return rate


class _Handler(ContentHandler):
    """SAX events -> `RunBuilder` calls, checking tags, attributes and nesting."""

    def __init__(self, say_as_language: str | None) -> None:
        super().__init__()
        self.say_as_language = say_as_language
        self.runs = RunBuilder()
        self.stack: list[_Element] = []
        self._locator = None

    def setDocumentLocator(self, locator) -> None:  # noqa: N802 (SAX's name)
        self._locator = locator

    def position(self) -> tuple[int, int]:
        """The parser's current (line, column), both from 1."""
        if self._locator is None:
            return 1, 1
        return self._locator.getLineNumber() or 1, (self._locator.getColumnNumber() or 0) + 1

    def startElement(self, name: str, attrs) -> None:  # noqa: N802 (SAX's name)
        line, column = self.position()
        parent = self.stack[-1] if self.stack else None
        el = _Element(name, line, column, dict(attrs), parent.rate if parent else 1.0)
        self._check(el, parent)
        if name in _LEAVES:
            el.text = []
        if name == "p":
            self.runs.boundary(PARAGRAPH_PAUSE_S)
        elif name == "s":
            self.runs.boundary(0.0)
        elif name == "break":
            try:
                self.runs.pause(_break_seconds(el))
            except ValueError as exc:
                raise el.fail(str(exc)) from exc
        elif name == "prosody":
            el.rate *= _rate(el)
        self.stack.append(el)

    def _check(self, el: _Element, parent: _Element | None) -> None:
        """Refuse the element where it stands: root, depth, nesting, tag and attributes."""
        if parent is None and el.tag != "speak":
            raise el.fail("not allowed as the root (SSML is one <speak> element)")
        if len(self.stack) >= MAX_DEPTH:
            raise el.fail(f"nested deeper than {MAX_DEPTH} elements")
        if el.tag in _UNSUPPORTED:
            raise el.fail("not supported (docs/api.md lists the SSML that is)")
        if el.tag not in _ATTRIBUTES:
            raise el.fail(f"unknown tag (supported: {', '.join(_ATTRIBUTES)})")
        if parent is not None and (parent.tag in _LEAVES or el.tag == "speak"):
            raise el.fail(f"not allowed inside <{parent.tag}>")
        if el.tag in ("p", "s") and any(a.tag == "s" or a.tag == el.tag for a in self.stack):
            raise el.fail("not allowed inside <s>, nor <p> inside <p>")
        allowed = _ATTRIBUTES[el.tag]
        for attr in el.attrs:
            if attr not in allowed and not (el.tag == "speak" and attr.startswith("xmlns:")):
                raise el.fail(
                    f"unknown attribute {echo(attr)} (allowed: {', '.join(sorted(allowed))})"
                )
        required = _REQUIRED.get(el.tag)
        if required and required not in el.attrs:
            raise el.fail(f"missing attribute '{required}'")
        if el.tag == "say-as" and el.attrs["interpret-as"].lower() not in INTERPRETATIONS:
            raise el.fail(
                f"interpret-as {echo(el.attrs['interpret-as'])} is not supported (supported: "
                f"{', '.join(INTERPRETATIONS)})"
            )
        if el.tag == "phoneme" and el.attrs.get("alphabet", "ipa").lower() != "ipa":
            raise el.fail(f"alphabet {echo(el.attrs['alphabet'])} is not supported (only ipa)")

    def endElement(self, name: str) -> None:  # noqa: N802 (SAX's name)
        el = self.stack.pop()
        content = "".join(el.text or ())
        if name in ("break", "mark") and content.strip():
            raise el.fail("text inside an element that must be empty")
        if name == "p":
            self.runs.boundary(PARAGRAPH_PAUSE_S)
        elif name == "s":
            self.runs.boundary(0.0)
        elif name == "say-as":
            try:
                words = expand_say_as(
                    el.attrs["interpret-as"].lower(),
                    content,
                    el.attrs.get("format"),
                    self.say_as_language,
                )
            except SayAsError as exc:
                raise el.fail(f'interpret-as="{clip(el.attrs["interpret-as"])}": {exc}') from exc
            self.runs.add_text(words, el.rate)
        elif name == "sub":
            self.runs.add_text(el.attrs["alias"], el.rate)
        elif name == "phoneme":
            if not el.attrs["ph"].strip():
                raise el.fail("empty 'ph'")
            self.runs.phoneme(content, el.attrs["ph"].strip(), el.rate)

    def characters(self, content: str) -> None:
        top = self.stack[-1]
        if top.text is not None:
            top.text.append(content)
        else:
            self.runs.add_text(content, top.rate)


_EXPAT_HINTS = {"junk after document element": "text or tags after </speak>"}


def parse_ssml(text: str, say_as_language: str | None = "en") -> SpeechDocument:
    """Parse an SSML input (see the module docstring for the subset) into runs.

    Args:
        text: the request's `input`, starting with ``<speak`` after optional whitespace.
        say_as_language: the language tag ``<say-as>`` content is spelled out in ("en-US",
            "ja": `voxflow.text.say_as.expand_say_as`); None keeps the content as written
            (still checked), which is the text the request's language is decided from.

    Returns:
        A `SpeechDocument` with ``ssml=True``: runs in reading order (at least one; a single
        empty run when nothing is spoken), and the lead silence in seconds.

    Raises:
        InvalidRequestError: (param ``input``, code ``invalid_ssml``, HTTP 400) malformed XML,
            a DOCTYPE or entity declaration, an unknown or unsupported tag or attribute, a bad
            attribute value or say-as content, nesting deeper than `MAX_DEPTH`; the message
            names the line and column.
    """
    handler = _Handler(say_as_language)
    source = InputSource()
    # surrogatepass: a lone surrogate becomes bytes expat rejects, with its position. The
    # encoding given here overrides an <?xml encoding=...?> declaration (the text is str).
    source.setByteStream(io.BytesIO(text.encode("utf-8", "surrogatepass")))
    source.setEncoding("utf-8")
    try:
        defusedxml.sax.parse(
            source,
            handler,
            forbid_dtd=True,
            forbid_entities=True,
            forbid_external=True,
        )
    except SAXParseException as exc:
        message = exc.getMessage()
        hint = _EXPAT_HINTS.get(message)
        raise _error(
            f"SSML is not well-formed: {message}{f' ({hint})' if hint else ''}",
            exc.getLineNumber() or 1,
            (exc.getColumnNumber() or 0) + 1,
        ) from None
    except DefusedXmlException:
        line, column = handler.position()
        raise _error(
            "SSML may not contain a DOCTYPE, entity declarations or external references",
            line,
            column,
        ) from None
    return handler.runs.finish()
