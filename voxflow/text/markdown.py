"""Markdown and HTML-ish markup: what is spoken is the text, never the symbols.

Much text sent to a speech API comes from language models and is Markdown. espeak-ng reads its
markup aloud ("hash hash summary", "asterisk", "https colon slash slash ..."). These helpers
classify lines (:func:`line_kind`, used by `voxflow.text.lines`) and strip inline markup
(:func:`strip_inline`, :func:`strip_emphasis`). Regular expressions rather than a CommonMark
parser, on purpose: a parser re-reads plain prose (an indented line becomes code, a ``---``
under a line makes it a heading, ``1990. was`` a list, backslashes and entities are unescaped),
and plain prose must come out unchanged. Every rule needs the markup's own shape (a marker at
the start of a line followed by a space, a closed ``[text](url)``, a closed code span, emphasis
markers touching a word on one side only), so ``5 * 3``, ``snake_case``, ``C#`` and a lone
``_`` stay.

Decisions (documented in docs/api.md, "How text is read"):
- Headings (``#`` to ``######``), bullets (``-``, ``*``, ``+``, ``•``, task boxes ``[ ]``,
  ``[x]``), numbered items (the number is kept and read), block quotes (``>``): markers dropped;
  a heading after a sentence on the same line (``worry. ### Summary``) starts a new block.
- Code fences: the fence lines (with their language tag) are dropped and the code is read, one
  line per sentence, without inline rules; inline code ```x``` is read as ``x``.
- Links ``[text](url)`` and ``[text][ref]`` read the text; reference definitions
  (``[ref]: url``) are dropped; bare URLs and ``<url>`` autolinks read the host name without
  ``www.`` (``https://www.example.com/a?b`` -> ``example.com``); e-mail addresses are left.
- Images ``![alt](src)`` and ``<img alt="alt">`` read the alt text (nothing when empty). An
  image that starts a sentence (at the start of its block or after ``.``, ``!``, ``?``, ``:``,
  whitespace, emphasis markers, closing quotes and other such images between) is a sentence of
  its own, so a caption never runs into the text: ``![a cat](cat.png) Our cat.`` -> "a cat."
  "Our cat."; an image inside a sentence is read in place, like a word (an inline icon:
  ``Click the ![gear](g.png) icon``, ``a map <img alt="x">``).
- Emphasis ``*x*``, ``**x**``, ``_x_``, ``__x__`` reads the text. Strike-through ``~~x~~`` and
  the ``<del>``, ``<s>``, ``<strike>`` tags mark deleted text: markers and text are dropped
  (``~~old~~ new`` reads "new").
- Tables: each row is read as its cells separated by commas, one row per sentence; the
  ``|---|`` rule is dropped. Horizontal rules (``---``, ``***``, ``___``) and setext underlines
  end a block and are not read.
- HTML tags: ``<br>``, ``<p>``, ``<div>``, ``<li>``, ``<hr>``, ``<h1>``... end a block;
  inline tags (``<b>``, ``<em>``, ``<span ...>``, ``<a href>``...) are dropped, even alone.
  Any other tag is dropped (its text kept) when it is evidently markup: ``<name ...>`` with a
  matching ``</name>`` later in the input, or self-closing ``<name .../>`` (``<custom>tag
  </custom>`` reads "tag"; a space is left where both sides are letters or digits). An
  unpaired ``<name>`` (``List<String>``) is left, and a ``<`` followed by a space or a digit
  is never a tag (English reads it as a comparison: `voxflow.text.comparisons`).
"""

from __future__ import annotations

import re

__all__ = ["block_tags_to_newlines", "line_kind", "strip_emphasis", "strip_inline",
           "strip_markup_tags", "table_cells"]  # fmt: skip

# ---------------------------------------------------------------------------------------------
# Lines
# ---------------------------------------------------------------------------------------------

# Heading ("# "), bullet ("- ", "* ", "• ", dialogue "— ") and task-box markers at the start.
MARKER_RE = re.compile(r"^\s*(?:(?:#{1,6}|[-*+•‣◦▪●·–—])\s+)+(?:\[[ xX]\]\s+)?")
NUMBERED_RE = re.compile(r"^\s*\d{1,3}[.)]\s+")
_FENCE_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*[\w+#.-]*\s*$")
_QUOTE_RE = re.compile(r"^\s{0,3}(?:>\s?)+")
_RULE_RE = re.compile(r"^\s{0,3}(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,}|={3,}\s*)$")
_TABLE_RULE_RE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$")
_REF_DEFINITION_RE = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*\S+(?:\s+\"[^\"]*\")?\s*$")
# "worry. ### Summary": a heading marker after sentence punctuation, or "##"+ after a word.
_INLINE_HEADING_RE = re.compile(
    r"(?:(?<=[.!?:])|(?<=[.!?:][\"')\]]))\s+(?=#{1,6}\s+\S)|(?<=\S)\s+(?=#{2,6}\s+\S)"
)
_TRAILING_HASHES_RE = re.compile(r"\s+#+\s*$")


def line_kind(line: str) -> str:
    """What a line is: ``"fence"``, ``"rule"`` (horizontal rule, setext underline),
    ``"table_rule"`` (``|---|---|``), ``"reference"`` (``[ref]: url``), ``"blank"`` or
    ``"text"`` (anything else, including headings, items and table rows)."""
    if not line.strip():
        return "blank"
    if _FENCE_RE.match(line):
        return "fence"
    if _TABLE_RULE_RE.match(line) and "|" in line:
        return "table_rule"
    if _RULE_RE.match(line):
        return "rule"
    if _REF_DEFINITION_RE.match(line):
        return "reference"
    return "text"


def strip_quote(line: str) -> str:
    """``> > text`` -> ``text`` (block-quote markers at the start of a line)."""
    return _QUOTE_RE.sub("", line, count=1) if ">" in line else line


def split_inline_headings(line: str) -> list[str]:
    """``You mustn't worry. ### Summary`` -> ``["You mustn't worry.", "### Summary"]``."""
    return _INLINE_HEADING_RE.split(line) if "#" in line else [line]


def strip_marker(line: str) -> tuple[str, bool, bool]:
    """(text, is_marked, is_heading): the line without its heading/bullet marker (and a
    heading's closing ``#``s), whether it had one, whether it was a heading."""
    m = MARKER_RE.match(line)
    if not m:
        return line, False, False
    heading = "#" in m.group(0)
    text = line[m.end() :]
    if heading:
        text = _TRAILING_HASHES_RE.sub("", text)
    return text, True, heading


def is_table_row(line: str, in_table: bool) -> bool:
    """``| a | b |`` (a bar at both ends), or any line with a bar right after a table row or
    ``|---|`` rule (pipe-less rows: ``a | b``)."""
    stripped = line.strip()
    framed = len(stripped) > 1 and stripped[0] == "|" and stripped[-1] == "|"
    return framed or (in_table and "|" in line)


def table_cells(line: str) -> str:
    """``| a | b |`` -> ``a, b`` (empty cells dropped; ``\\|`` is a literal bar)."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    return ", ".join(c.strip().replace("\\|", "|") for c in cells if c.strip())


# ---------------------------------------------------------------------------------------------
# HTML-ish tags
# ---------------------------------------------------------------------------------------------

_BLOCK_TAGS = ("br|p|div|li|ul|ol|h[1-6]|hr|tr|table|thead|tbody|tfoot|blockquote|pre|details|"
               "summary|section|article|header|footer|dl|dt|dd|figure|figcaption")  # fmt: skip
_INLINE_TAGS = ("a|b|i|u|s|em|strong|code|kbd|mark|small|big|sup|sub|span|del|ins|abbr|cite|q|"
                "font|tt|var|samp|strike|td|th|caption|label|time")  # fmt: skip
_BLOCK_TAG_RE = re.compile(rf"</?(?:{_BLOCK_TAGS})(?:\s[^<>]*)?/?>", re.IGNORECASE)
_INLINE_TAG_RE = re.compile(rf"</?(?:{_INLINE_TAGS})(?:\s[^<>]*)?/?>", re.IGNORECASE)
_IMG_TAG_RE = re.compile(r"<img\b[^<>]*?(?:\balt\s*=\s*\"([^\"]*)\"[^<>]*)?/?>", re.IGNORECASE)
_DELETED_TAG_RE = re.compile(r"<(del|s|strike)(?:\s[^<>]*)?>.*?</\1\s*>", re.IGNORECASE)
# Tags strip_inline handles itself (the deleted-text tags must keep their pairs for it).
_KNOWN_INLINE = frozenset(_INLINE_TAGS.split("|")) | {"img"}
# Any tag: <name attrs>, </name>, <name attrs/>. The name starts with a letter, right after "<".
_TAG_GAP_RE = re.compile(r"(?<=[^\W_])\x00+(?=[^\W_])()|\x00+")
_ANY_TAG_RE = re.compile(r"<(/?)([A-Za-z][\w:.-]*)(?:\s[^<>]*?)?\s*(/?)>")


def strip_markup_tags(text: str) -> str:
    """Drop tags that are evidently markup, whatever their name (rule in the module docstring):
    ``<custom>tag</custom>`` -> ``tag``, ``<x/>`` -> ``""``; ``List<String>`` is unchanged.
    Apply to the whole input (a pair may span lines), after :func:`block_tags_to_newlines`."""
    if "<" not in text:
        return text
    tags = [m for m in _ANY_TAG_RE.finditer(text) if m.group(2).lower() not in _KNOWN_INLINE]
    first_open: dict[str, int] = {}
    last_close: dict[str, int] = {}
    for m in tags:
        name = m.group(2).lower()
        if m.group(1):
            last_close[name] = m.start()
        elif not m.group(3):
            first_open.setdefault(name, m.start())
    out, pos = [], 0
    for m in tags:
        name = m.group(2).lower()
        if m.group(1):
            markup = first_open.get(name, len(text)) < m.start()
        else:
            markup = bool(m.group(3)) or last_close.get(name, -1) > m.start()
        if markup:
            out += [text[pos : m.start()], "\x00"]  # NUL: filtered out of the input before
            pos = m.end()
    text = "".join(out) + text[pos:]
    return _TAG_GAP_RE.sub(lambda m: "" if m.group(1) is None else " ", text)


def block_tags_to_newlines(text: str) -> str:
    """``<br>``, ``<p>``, ``</div>``, ``<li>``... become block breaks (a blank line: the text
    on either side is never joined, whatever its case)."""
    return _BLOCK_TAG_RE.sub("\n\n", text) if "<" in text else text


# ---------------------------------------------------------------------------------------------
# Inline markup
# ---------------------------------------------------------------------------------------------

_TITLE = r"(?:\s+\"[^\"]*\")?"
_IMAGE_RE = re.compile(rf"!\[([^\]\n]*)\]\((?:[^()\s]|\([^()\s]*\))*{_TITLE}\)")
_LINK_RE = re.compile(rf"\[([^\]\n]+)\]\((?:[^()\s]|\([^()\s]*\))*{_TITLE}\)")
_REF_LINK_RE = re.compile(r"\[([^\]\n]+)\]\[[^\]\n]*\]")
_AUTOLINK_RE = re.compile(r"<((?:https?|ftp)://[^<>\s]+|[^<>\s@]+@[^<>\s@]+\.\w+)>")
_URL_RE = re.compile(r"\b(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]*[^\s<>\"'`.,;:!?)\]}]")
_CODE_SPAN_RE = re.compile(r"(?<![\w`])(`+)(?=\S)(.+?)(?<=\S)\1(?![\w`])")
# Asterisks and underscores touching a word on one side only ("**bold**", "_note_",
# "**Note:**"); not "5 * 3", "5*3", "snake_case", "C#", nor a lone "*" before punctuation.
_OPENS = r"(?=[^\W_]|[\"'(\[])"
_CLOSES = r"(?<=[^\W_]|[\"')\].,:;!?])"
_ASTERISKS_RE = re.compile(rf"(?<![\w*])\*{{1,3}}{_OPENS}|{_CLOSES}\*{{1,3}}(?![\w*])")
_UNDERSCORES_RE = re.compile(rf"(?<![\w_])_{{1,3}}{_OPENS}|{_CLOSES}_{{1,3}}(?![\w_])")
_STRIKE_RE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
# What may stand between an image and the edge of its block for it to be a sentence of its own.
_IMAGES = _IMAGE_RE.pattern + r"|<img\b[^<>]*>|\n[^\n]*\n"
_SENTENCE_START_RE = re.compile(rf"(?:^|[.!?:])(?:[\s*_~\"')]|{_IMAGES})*\Z")
_ESCAPE_RE = re.compile(r"\\([\\`*_\[\]#|~>])")


def _host(m: re.Match[str]) -> str:
    """The host of a URL without scheme, ``www.``, port, path, query or fragment."""
    url = re.sub(r"^(?:(?:https?|ftp)://)?(?:[^@/]+@)?", "", m.group(0), flags=re.IGNORECASE)
    host = re.split(r"[/?#:]", url, maxsplit=1)[0]
    return re.sub(r"^www\.", "", host, flags=re.IGNORECASE)


def _image(m: re.Match[str]) -> str:
    """An image's alt text; between line breaks (a sentence of its own) at a sentence start."""
    alt = (m.group(1) or "").strip()
    text = m.string
    if not alt:
        return ""
    if _SENTENCE_START_RE.search(text, 0, m.start()):
        return f"\n{alt}\n"
    return alt


def strip_emphasis(text: str) -> str:
    """Drop emphasis markers and deleted text: ``**very** _so_ ~~not~~`` -> ``very so``."""
    if "*" in text:
        text = _ASTERISKS_RE.sub("", text)
    if "_" in text:
        text = _UNDERSCORES_RE.sub("", text)
    if "~~" in text:
        text = _STRIKE_RE.sub("", text)
    return text


def strip_inline(text: str) -> str:
    """Speak the text of inline markup (rules in the module docstring): images -> alt text,
    links -> their text, URLs -> host name, code spans -> their content, inline HTML tags
    dropped, deleted text and emphasis markers dropped, Markdown backslash escapes resolved.

    ``text`` is one block (no ``\n``); the result has a ``\n`` on each side of the alt text of
    an image that starts a sentence: the caller splits it there into blocks.
    """
    if "<" in text:
        text = _DELETED_TAG_RE.sub("", text)
        text = _IMG_TAG_RE.sub(_image, text)
        text = _INLINE_TAG_RE.sub("", text)
        text = _AUTOLINK_RE.sub(r"\1", text)
    if "](" in text or "][" in text:
        text = _IMAGE_RE.sub(_image, text)
        text = _LINK_RE.sub(r"\1", text)
        text = _REF_LINK_RE.sub(r"\1", text)
    if "://" in text or "www." in text.lower():
        text = _URL_RE.sub(_host, text)
    if "`" in text:
        text = _CODE_SPAN_RE.sub(r"\2", text)
    if "\\" in text:
        text = _ESCAPE_RE.sub(r"\1", text)
    return strip_emphasis(text)
