"""English: Roman numerals after titles and names, spelled out as words.

espeak-ng (en-us, piper-tts 1.8.0) reads an upper-case Roman numeral after a word as "Roman"
plus the number: ``World War II`` "world war roman two", ``Henry VIII`` "henry roman eight",
``Louis XIV`` "louis roman fourteen"; ``Super Bowl LVII`` is read as letters. It reads ``MIX``,
``DIV``, ``CIVIL``, ``LID``, ``MI`` and the pronoun ``I`` as words.

Rules, decided by the word(s) before the numeral (only canonical numerals, ``M{0,3}`` ...
``(IX|IV|V?I{0,3})``; the numeral must end the word, ``'s`` may follow):

1. After a title word from :data:`TITLE_WORDS` (``Chapter``, ``Part``, ``Book``, ``Act``,
   ``Volume``/``Vol.``, ``Phase``, ``Stage``, ``Type``, ``Title``, ``Super Bowl``, ``World
   War``, ...; any case): a cardinal in words, ``Chapter IV`` -> ``Chapter Four``, ``World War
   I`` -> ``World War One``, ``Super Bowl LVII`` -> ``Super Bowl Fifty-Seven``. Any numeral
   except the single letters ``C``, ``D``, ``L``, ``M`` (``Appendix C``); lower case numerals of
   two letters or more too (``chapter iv`` -> ``chapter four``).
2. After a ruler's or pope's name from :data:`REGNAL_NAMES` (``Henry``, ``Elizabeth``,
   ``Louis``, ``Paul`` as in ``Pope John Paul II``, ...), or after any capitalised word that
   follows such a name or a sovereign title (``John Smith III``, ``King Zog I``): a regnal
   ordinal, ``Henry VIII`` -> ``Henry the Eighth``, ``Henry VIII's`` -> ``Henry the Eighth's``.
   Numerals of ``I``, ``V`` and ``X`` only (1 to 39). A single ``I`` is taken for the pronoun
   when a word only the pronoun takes follows (``Elizabeth I think``, ``Henry I am``; list
   :data:`PRONOUN_FOLLOWERS`), else it is "the First" (``Elizabeth I was crowned``).
3. After any other capitalised word (not all upper case): a sequel or model number, a cardinal,
   ``Rocky III`` -> ``Rocky Three``, ``Final Fantasy VII`` -> ``Final Fantasy Seven``. Only
   numerals of ``I``, ``V`` and ``X`` of two letters or more, or ``V``; not ``I`` (the pronoun)
   nor ``X`` (``Generation X``, ``Malcolm X``), and not a single ``V`` followed by ``. Name``
   (an initial).

Everything else is left: a sentence-initial or lone ``I``, ``I'm``, ``I'll``, upper-case words
that happen to be numerals (``MIX``, ``DIV``, ``MI``, ``DC`` after ``Washington``: rule 3 takes
only ``I``/``V``/``X``), numerals after lower-case words or punctuation (``an IV drip``).
Known limits: a surname with a generational suffix and no listed first name is read as a
cardinal (``Thurston Howell III`` -> "Three"), as a sequel would be.
"""

from __future__ import annotations

import re

__all__ = ["PRONOUN_FOLLOWERS", "REGNAL_NAMES", "TITLE_WORDS", "spell_roman_numerals",
           "to_cardinal_words", "to_ordinal_words"]  # fmt: skip

# Title words after which a numeral is a cardinal.
TITLE_WORDS = frozenset(
    "chapter part book act scene volume section article appendix phase stage level episode "
    "season round class type category grade title psalm canto unit lesson track disc "
    "movement tier mark version schedule annex step war bowl amendment division".split()
)
# Two-word titles: the numeral follows the second word, which alone is not enough ("bowl").
_NEEDS_FIRST = {"war": "world", "bowl": "super"}
# Abbreviated titles, expanded when a numeral follows ("Vol. II" -> "Volume Two").
_ABBREVIATED_TITLES = {
    "vol": "volume", "ch": "chapter", "chap": "chapter", "pt": "part", "bk": "book",
    "sec": "section", "art": "article", "ep": "episode",
}  # fmt: skip

REGNAL_NAMES = frozenset(
    "Henry Elizabeth Louis George Edward William Charles James Richard John Paul Pius Benedict "
    "Leo Gregory Innocent Clement Urban Boniface Sixtus Alexander Napoleon Frederick Philip "
    "Peter Catherine Ivan Nicholas Mary Anne Victoria Ferdinand Ludwig Wilhelm Gustav Gustavus "
    "Olaf Harald Haakon Christian Carl Carlos Felipe Juan Alfonso Pedro Manuel Umberto Albert "
    "Leopold Rama Ramesses Ramses Amenhotep Thutmose Darius Xerxes Ptolemy Cleopatra Antiochus "
    "Constantine Justinian Theodosius Otto Conrad Rudolf Maximilian Francis Franz Joseph Stephen "
    "David Robert Michael Basil Mehmed Murad Selim Suleiman Bayezid Ahmed Mustafa Osman Mahmud "
    "Abdullah Hussein Faisal Fuad Mohammed Muhammad Casimir Sigismund Wenceslaus Ladislaus "
    "Matthias Andrew Harold Edmund Canute Cnut Ethelred Kamehameha Hadrian Marcus Martin "
    "Adrian Eugene Felix Julius Sergius Honorius Nicephorus Romanos Andronikos Alexios".split()
)
_SOVEREIGN_TITLES = frozenset(
    "King Queen Pope Emperor Empress Tsar Czar Tsarina Kaiser Sultan Pharaoh Prince Princess "
    "Duke Duchess Shah Emir Saint St".split()
)
_KEYS = frozenset("Ctrl Control Cmd Command Alt Shift Option Key Press".split())
# Words that follow the pronoun "I" but not a regnal "I" ("Elizabeth I think ...").
PRONOUN_FOLLOWERS = frozenset(
    "am think know want guess feel mean hope believe love like need see say said do don't "
    "didn't can can't cannot will won't would wouldn't could couldn't should shouldn't must "
    "have haven't just really also still never always wish agree suppose bet got get went "
    "thought knew felt wanted hoped met told asked called heard gave took made".split()
)

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()  # fmt: skip
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL_ONES = ("zeroth first second third fourth fifth sixth seventh eighth ninth tenth "
                 "eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth "
                 "eighteenth nineteenth").split()  # fmt: skip
_ORDINAL_TENS = "_ _ twentieth thirtieth fortieth fiftieth".split()

_NUMERAL = r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"
_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
# A candidate: a run of numeral letters (either case) that is a whole word; "'s" may follow.
_CANDIDATE_RE = re.compile(r"(?<![\w'’.\-])([IVXLCDM]+|[ivx]{2,})(?=['’]s\b|-[a-z]|(?![\w'’\-]))")
_CANONICAL_RE = re.compile(_NUMERAL)
# A word of the context before a candidate (titles may end in ".": "Vol.").
_WORD_RE = re.compile(r"[A-Za-z][\w'’]*\.?")
_CONTEXT_CHARS = 60


def _value(numeral: str) -> int:
    total = 0
    values = [_VALUES[ch] for ch in numeral.upper()]
    for i, v in enumerate(values):
        total += -v if i + 1 < len(values) and values[i + 1] > v else v
    return total


def to_cardinal_words(n: int) -> str:
    """``n`` (0 to 9999) in English words, lower case: 57 -> "fifty-seven", 1999 -> "one
    thousand nine hundred ninety-nine"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {to_cardinal_words(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    return f"{_ONES[thousands]} thousand" + (f" {to_cardinal_words(rest)}" if rest else "")


def to_ordinal_words(n: int) -> str:
    """``n`` (1 to 59) as an English ordinal, lower case: 8 -> "eighth", 23 ->
    "twenty-third"."""
    if n < 20:
        return _ORDINAL_ONES[n]
    tens, ones = divmod(n, 10)
    return f"{_TENS[tens]}-{_ORDINAL_ONES[ones]}" if ones else _ORDINAL_TENS[tens]


def _title_case(words: str) -> str:
    return "-".join(part.capitalize() for part in words.split("-"))


def _title_word(words: list[str]) -> str | None:
    """The title word ending ``words`` (lower case, abbreviation expanded), if any."""
    title = words[-1].lower()
    if title not in TITLE_WORDS:
        return None
    first = _NEEDS_FIRST.get(title)
    if first and (len(words) < 2 or words[-2].lower() != first):
        return None
    return title


def _is_capitalised(word: str) -> bool:
    return word[:1].isupper() and not word.isupper()


def _is_regnal_context(words: list[str]) -> bool:
    last = words[-1]
    if last in REGNAL_NAMES:
        return True
    if len(words) < 2 or not _is_capitalised(last):
        return False
    return words[-2] in REGNAL_NAMES or words[-2].rstrip(".") in _SOVEREIGN_TITLES


def _words_before(text: str, start: int) -> list[str]:
    """Up to three words right before ``text[start]``, each separated by one space (the
    candidate's context); [] when punctuation or a line start comes first."""
    begin = max(0, start - _CONTEXT_CHARS)
    window = text[begin:start]
    if not window.endswith(" "):
        return []
    parts = window[:-1].split(" ")
    if begin > 0:
        parts = parts[1:]  # possibly cut mid-word
    words: list[str] = []
    for part in reversed(parts[-3:]):
        if not _WORD_RE.fullmatch(part) or (not words and part.endswith(".")):
            break  # "Smith. VIII": a sentence ended before the numeral
        words.append(part)
    return words[::-1]


def _next_word(text: str, end: int) -> str:
    m = re.match(r"\s+([\w'’]+)", text[end:])
    return m.group(1).lower().replace("’", "'") if m else ""


def _replacement(m: re.Match[str]) -> str | None:
    """Words for the numeral candidate ``m``, or None to leave it."""
    numeral = m.group(1)
    if not _CANONICAL_RE.fullmatch(numeral.upper()):
        return None
    words = _words_before(m.string, m.start())
    if not words:
        return None
    text, upper = m.string, numeral.isupper()
    if _title_word(words) is not None:
        if numeral.upper() in ("C", "L") or re.search("[DMdm]", numeral):
            return None  # "Appendix C", "Type CD"
        spelled = to_cardinal_words(_value(numeral))
        return _title_case(spelled) if words[-1][0].isupper() else spelled
    if not upper or not re.fullmatch(r"[IVX]+", numeral) or _value(numeral) > 39:
        return None
    if _is_regnal_context(words):
        if numeral == "I" and _next_word(text, m.end()) in PRONOUN_FOLLOWERS:
            return None
        return "the " + _title_case(to_ordinal_words(_value(numeral)))
    if not _is_capitalised(words[-1]) or numeral in ("I", "X"):
        return None
    if numeral == "V" and (re.match(r"\.\s+[A-Z]", text[m.end() :]) or words[-1] in _KEYS):
        return None  # an initial ("Jane V. Doe") or a key ("Ctrl V")
    return _title_case(to_cardinal_words(_value(numeral)))


_ABBREVIATED_TITLE_RE = re.compile(
    r"\b(" + "|".join(t for a in _ABBREVIATED_TITLES for t in (a, a.capitalize())) + r")\.\s?"
    r"(?=[IVXLC]+\b)"
)


def _abbreviation_title(m: re.Match[str]) -> str:
    word = _ABBREVIATED_TITLES[m.group(1).lower()]
    return (word.capitalize() if m.group(1)[0].isupper() else word) + " "


def spell_roman_numerals(text: str) -> str:
    """Rewrite Roman numerals after title words and names as English words (rules in the
    module docstring): ``World War II ended.`` -> ``World War Two ended.``, ``Henry VIII`` ->
    ``Henry the Eighth``, ``Vol. II`` -> ``Volume Two``; ``I am`` and ``MIX`` are left."""
    if not re.search(r"[IVXLCDMivxlcdm]", text):
        return text
    text = _ABBREVIATED_TITLE_RE.sub(_abbreviation_title, text)

    def sub(m: re.Match[str]) -> str:
        words = _replacement(m)
        return m.group(0) if words is None else words

    return _CANDIDATE_RE.sub(sub, text)
