"""A lexicon applied to a parsed input (`SpeechDocument`), before the front end phonemizes it.

Each run of ordinary text is searched for the lexicon's words (`Lexicon.find`: whole words,
each entry's case rule). A respelling replaces the word inside the run's text, as SSML
``<sub alias>`` does. A phoneme entry makes the word a run of its own with `TextRun.phonemes`
set, the run SSML ``<phoneme alphabet="ipa" ph=...>word</phoneme>`` makes, so both take one
path through the front end; the text before and after it stay runs of their own (a run
boundary is a segment boundary: the word is spoken as its own segment, joined without pause).
The phoneme run keeps the word as written as its text, so word timestamps name it.

Runs that already carry phonemes (SSML ``<phoneme>``) are left alone: the markup wins. For a
family that does not take phonemes (`takes_phonemes` False) phoneme entries are skipped and
the word is read as written; respellings still apply.
"""

from __future__ import annotations

from dataclasses import replace

from voxflow.lexicons.lexicon import Lexicon
from voxflow.text.document import SpeechDocument, TextRun

__all__ = ["apply_lexicon"]


def _rewrite(run: TextRun, lexicon: Lexicon, takes_phonemes: bool) -> list[TextRun]:
    """`run` with the lexicon's words rewritten: one run or several, in order."""
    out: list[TextRun] = []
    text: list[str] = []
    pos = 0

    def flush() -> None:
        joined = "".join(text)
        text.clear()
        if joined.strip():
            out.append(TextRun(joined.strip(), run.rate, normalize=run.normalize))

    for start, end, entry in lexicon.find(run.text):
        if entry.respelling is not None:
            text.append(run.text[pos:start] + entry.respelling)
        elif takes_phonemes:
            text.append(run.text[pos:start])
            flush()
            out.append(TextRun(run.text[start:end], run.rate, phonemes=entry.phonemes))
        else:
            text.append(run.text[pos:end])
        pos = end
    text.append(run.text[pos:])
    flush()
    if not out:  # only whitespace left: keep the run (its pause) as it was
        return [run]
    out[-1] = replace(out[-1], break_after_s=run.break_after_s)
    return out


def apply_lexicon(
    document: SpeechDocument, lexicon: Lexicon, takes_phonemes: bool
) -> SpeechDocument:
    """`document` with `lexicon` applied to its text runs (module docstring).

    Args:
        document: the parsed input (its `source`, language and pauses are kept).
        lexicon: the request's lexicon.
        takes_phonemes: whether the request's voice speaks IPA (`ModelFamily.phoneme_gaps`
            is not None); False skips phoneme entries.
    Returns:
        The same document when no word matched, else one with the runs rewritten.
    """
    runs: list[TextRun] = []
    changed = False
    for run in document.runs:
        if run.phonemes is not None or not run.text.strip() or not lexicon.find(run.text):
            runs.append(run)
            continue
        rewritten = _rewrite(run, lexicon, takes_phonemes)
        changed = changed or rewritten != [run]
        runs.extend(rewritten)
    return replace(document, runs=tuple(runs)) if changed else document
