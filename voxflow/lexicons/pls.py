"""W3C Pronunciation Lexicon Specification (PLS 1.0) files -> the lexicon JSON (`lexicon.py`).

Read (with defusedxml: no DTD, entity or external reference is ever expanded)::

    <lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"
             alphabet="ipa" xml:lang="en-US">
      <lexeme><grapheme>Zorbleck</grapheme><phoneme>tˈeɪbəl</phoneme></lexeme>
      <lexeme><grapheme>SQL</grapheme><alias>sequel</alias></lexeme>
    </lexicon>

Each ``<grapheme>`` of a lexeme becomes one entry, case-sensitive (PLS graphemes are written
as they are matched); the lexeme's first ``<phoneme>`` (the preferred one in PLS) gives its
phonemes, else its first ``<alias>`` its respelling; ``<example>`` is ignored. The alphabet
(the lexicon's ``alphabet``, or a ``<phoneme alphabet=...>``) must be ``ipa``: any other is a
400 naming it. Entries are then checked like JSON ones (`parse_lexicon`), numbered in the
order of their graphemes.
"""

from __future__ import annotations

from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree
from defusedxml import DefusedXmlException

from voxflow.errors import echo
from voxflow.lexicons.lexicon import Lexicon, lexicon_error, parse_lexicon

__all__ = ["parse_pls"]

_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def _local(tag: str) -> str:
    """``{namespace}name`` -> ``name``."""
    return tag.rpartition("}")[2]


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child.tag) == name]


def _alphabet(value: str | None, where: str) -> None:
    if value is not None and value.strip().lower() != "ipa":
        raise lexicon_error(f"PLS {where}: alphabet {echo(value)} is not supported; write "
                            "phonemes in IPA (alphabet=\"ipa\") or use <alias> respellings.")


def parse_pls(data: bytes) -> Lexicon:
    """Parse a PLS document (module docstring) into a checked `Lexicon`.

    Raises:
        InvalidRequestError: (400, code ``invalid_lexicon``) malformed XML or a DTD, a root
            that is not ``<lexicon>``, an alphabet other than IPA, a lexeme without grapheme
            or without phoneme and alias, or an entry `parse_lexicon` refuses.
    """
    try:
        root = defusedxml.ElementTree.fromstring(data, forbid_dtd=True, forbid_entities=True,
                                                 forbid_external=True)
    except ParseError as exc:
        raise lexicon_error(f"The PLS file is not well-formed XML: {exc}.", param="body") from None
    except DefusedXmlException:
        raise lexicon_error("The PLS file may not contain a DOCTYPE, entity declarations or "
                            "external references.", param="body") from None
    if _local(root.tag) != "lexicon":
        raise lexicon_error(f"A PLS file's root is <lexicon>, not <{_local(root.tag)}>.",
                            param="body")
    _alphabet(root.get("alphabet"), "<lexicon>")
    entries: list[dict] = []
    for number, lexeme in enumerate(_children(root, "lexeme"), start=1):
        where = f"<lexeme> {number}"
        graphemes = [(g.text or "").strip() for g in _children(lexeme, "grapheme")]
        if not any(graphemes):
            raise lexicon_error(f"PLS {where}: no <grapheme>.")
        phonemes = _children(lexeme, "phoneme")
        aliases = _children(lexeme, "alias")
        say: dict
        if phonemes:
            _alphabet(phonemes[0].get("alphabet"), where)
            say = {"phonemes": phonemes[0].text or ""}
        elif aliases:
            say = {"respelling": aliases[0].text or ""}
        else:
            raise lexicon_error(f"PLS {where} ({echo(graphemes[0])}): no <phoneme> or <alias>.")
        entries += [{"word": g, "case_sensitive": True, **say} for g in graphemes]
    raw: dict = {"entries": entries}
    if root.get(_XML_LANG):
        raw["language"] = root.get(_XML_LANG)
    return parse_lexicon(raw)
