"""Which of a voice's languages a request is read in, when the request names none.

Decided once per request, at validation, from the text as the user wrote it (SSML ``<say-as>``
content not yet expanded, ``<phoneme>`` text left out): each language the voice speaks scores
the letters written in its own scripts (`voxflow.text.scripts.language_scripts`: "ja" Han,
Hiragana and Katakana; "en-us" Latin), weighed by `voxflow.text.scripts.LETTER_WEIGHTS` (a
kana or kanji counts as two Latin letters). The highest score wins; a tie goes to the language
listed first (a voice lists its own first), and so does text with no letters at all ("12:30").

So "I love 寿司 for dinner." (13 Latin letters, 2 kanji) is English, "今日はAppleの発表会です。"
(9 Japanese letters, 5 Latin) Japanese, and two languages of one script ("en-us", "en-gb")
never beat the voice's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from voxflow.text.scripts import count_letters, language_scripts

__all__ = ["choose_language"]


def choose_language(text: str, languages: Sequence[str]) -> str:
    """The language of `languages` whose scripts hold the most (weighed) letters of `text`.

    Args:
        text: the text as written (see the module docstring).
        languages: the voice's language tags, its own first (at least one).
    Returns:
        One of `languages`, as spelled there. A tag of unknown script (`language_scripts`
        None) scores nothing.
    Raises:
        ValueError: `languages` is empty.
    """
    if not languages:
        raise ValueError("a voice speaks at least one language")
    counts = count_letters(text)
    best, best_score = languages[0], 0
    for tag in languages:
        scripts = language_scripts(tag)
        score = counts.weight(scripts) if scripts is not None else 0
        if score > best_score:
            best, best_score = tag, score
    return best
