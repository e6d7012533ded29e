"""Text normalization for TTS input, shared by model families.

The goal is text that a phonemizer or a character-level model can read aloud: no emoji, no
invisible or private-use characters, one spelling for quotes and dashes, and a few English
number/abbreviation forms rewritten where espeak-ng (the phonemizer behind the Piper voices)
demonstrably mis-reads them.

Evidence for the English rules (``voice.phonemize()`` with the bundled espeak-ng, en-us voice,
piper-tts 1.8.0; phonemes abbreviated here as words):

=====================  ============================================  ===========================
input                  espeak reads                                  rewritten to
=====================  ============================================  ===========================
``$1,200.50``          "dollar one thousand two hundred point five   ``1,200 dollars and 50
                       zero"                                         cents``
``$20 million``        "dollar twenty million"                       ``20 million dollars``
``1990s`` / ``1800s``  "nineteen hundred ninety z" / "one thousand   ``19 nineties`` /
                       eight hundred z"                              ``18 hundreds``
``6:00`` / ``6:05``    "six zero zero" / "six zero five"             ``6 o'clock`` / ``6 oh 5``
``3-4`` / ``3–4``      "three dash four" / "three four"              ``3 to 4``
``100th``              "one hundred th"                              ``1 hundredth``
``.5``                 "dot five"                                    ``0.5``
``Dr. Smith``          "doctor." + sentence break (pause, falling    ``Doctor Smith``
                       pitch); same for Mr., Mrs., Gen., Capt. ...
``Ms. Lee``            "M S" + sentence break                        ``Miz Lee``
``Fig. 3``, ``No. 5``  "fig." / "no." + sentence break               ``Figure 3``, ``number 5``
``Jan. 5``             "jan." + sentence break                       ``January 5``
``vs.``                "V S"                                         ``versus``
``#1``                 "hash one"                                    ``number 1``
``60°C``, ``1°``       "sixty degrees C", "one degrees"              ``60 degrees Celsius``,
                                                                     ``1 degree``
``5 km``, ``60 km/h``  "five K M", "sixty K M slash H"               ``5 kilometers``, ``60
                                                                     kilometers per hour``
``World War II``       "world war roman two"                         ``World War Two``
``Henry VIII``         "henry roman eight"                           ``Henry the Eighth``
``½``, ``1½``          NFKC turns them into ``1⁄2`` / ``11⁄2``:       ``a half``, ``1 and a half``
                       "one two" / "eleven two"
``5 < 6``, ``7 > 3``   "five six", "seven three"                     ``5 is less than 6``, ``7 is
                                                                     greater than 3``
``A -> B``             "A B"                                         ``A to B``
``20 m/s²``            NFKC ``m/s2``: "M slash S two"                ``20 meters per second
                                                                     squared``
``100 µm``             NFKC ``μm``: "one hundred mewm"               ``100 micrometers``
=====================  ============================================  ===========================

Units and degree signs are `voxflow.text.units` (all its symbols, after numbers only; the
singular hyphenated form before a noun after "a"/"an"), comparison signs and arrows
`voxflow.text.comparisons`, Roman numerals `voxflow.text.roman` (after title words and names
only); each module's docstring gives its evidence and rules.

Left to the phonemizer because espeak reads them well: ``6:45`` ("six forty five"),
``1,200`` ("one thousand two hundred"), ``1,000,000`` ("one million"), ``3.5`` ("three point
five"), ``3.5%``, ``0.5``, ``2nd``, ``21st``, ``-5`` ("minus five"), ``5 p.m.``, ``e.g.``
("for example"), ``etc.``, ``U.S.``. Currency signs are rewritten
even without decimals (``£3`` -> ``3 pounds``) because espeak says the unit first ("pound
three").
Not handled (espeak's reading kept): years read "nineteen hundred ninety" (old-fashioned but
clear), slash fractions and dates ``1/2``, ``9/11`` ("one slash two"), US phone numbers
``555-1234`` ("... dash ..."), ``St.`` (espeak already picks Saint/Street by
context), ``i.e.`` ("I E"), European decimal commas (``10,5`` -> "ten five").

Language-neutral rules, same evidence: ``word—word`` and ``word - word`` are read with no pause
("word word") while ``word – word`` gets ";" and ``word, word`` a comma pause, so a dash between
words becomes ", ". Emoji and pictographs are read by name (``I ❤ tea`` -> "I red heart tea",
``®`` -> "registered"), so symbols of category So are removed except ``°`` ("degrees") and
``©`` ("copyright").

Markup and lines (language-neutral): Markdown and HTML-ish markup is read as its text
(`voxflow.text.markdown`: ``### Summary`` read "hash hash summary", ``**bold**`` "asterisk
asterisk bold", URLs "https colon slash slash ...", ``<custom>tag</custom>`` "custom tag slash
custom"; struck-through text is dropped, an image starting a sentence is a sentence), and a
line break ends a sentence unless the text is evidently wrapped (`voxflow.text.lines`); a
block that ends without punctuation and is not the last gets a period, so the voice falls and
pauses there (a four-line shopping list was read with two pauses of 150 ms or more, now three,
one after each line).

The English rules run only when ``lang`` starts with ``"en"``; every other rule is
language-neutral.
"""

from __future__ import annotations

import re
import unicodedata

from voxflow.text.comparisons import spell_arrows, spell_comparisons
from voxflow.text.lines import end_sentence, split_blocks
from voxflow.text.markdown import MARKER_RE, strip_emphasis, strip_quote
from voxflow.text.roman import spell_roman_numerals
from voxflow.text.units import spell_units, superscript_units

__all__ = ["has_speakable_content", "normalize_paragraphs", "normalize_text"]

# --------------------------------------------------------------------------------------------
# Character level
# --------------------------------------------------------------------------------------------

# Applied before NFKC, because NFKC would turn these into something worse
# ("™" -> "TM" read as letters, "″" -> "′′", "´" -> " " + combining accent, "№" -> "No").
_PRE_NFKC = str.maketrans(
    {
        "\u2122": "",  # ™
        "\u2120": "",  # ℠
        "\u00b4": "'",  # ´ used as an apostrophe
        "\u2033": '"',  # ″ double prime
        "\u2036": '"',  # ‶ reversed double prime
        "\u2116": "No. ",  # №
    }
)

# Applied after NFKC.
_CHAR_MAP = str.maketrans(
    {
        # single quotes and apostrophes
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
        "\u2032": "'", "\u2035": "'",
        # double quotes
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
        # hyphens and minus signs -> ASCII hyphen
        "\u2010": "-", "\u2011": "-", "\u2043": "-", "\u2212": "-",
        # dashes: figure dash -> en dash; long dashes -> em dash
        "\u2012": "\u2013", "\u2015": "\u2014", "\u2e3a": "\u2014", "\u2e3b": "\u2014",
        # fraction slash (NFKC output for vulgar fractions in non-English text)
        "\u2044": "/",
        # midline horizontal ellipsis
        "\u22ef": "...",
    }
)  # fmt: skip

# Symbols (category So) that are read as words and are worth keeping.
_KEEP_SYMBOLS = frozenset("°©")
# ZWNJ, ZWJ: kept only after a non-ASCII letter/mark and before a non-ASCII letter (Indic
# conjuncts, Persian).
_JOINERS = frozenset("\u200c\u200d")


def _is_variation_selector(ch: str) -> bool:
    cp = ord(ch)
    return 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF


def _is_wordish(ch: str) -> bool:
    """Letter, digit or combining mark: something a combining mark or joiner can attach to."""
    return unicodedata.category(ch)[0] in "LNM"


def _char_replacement(text: str, i: int, prev: str) -> str:
    """Replacement for the non-ASCII or control character ``text[i]``; ``prev`` is the last
    character already kept ("" at the start)."""
    ch = text[i]
    cat = unicodedata.category(ch)
    major = cat[0]
    if major in "LNP" or cat in ("Sc", "Sm") or ch in _KEEP_SYMBOLS:
        return ch
    if major == "M":
        # Marks belong to the preceding letter (Devanagari vowel signs, Arabic harakat, Thai
        # tone marks). Orphan marks, enclosing marks and emoji variation selectors go.
        keep = cat != "Me" and not _is_variation_selector(ch) and prev and _is_wordish(prev)
        return ch if keep else ""
    if ch == "\n":
        return ch  # block boundaries are found after filtering
    if major == "Z" or (cat == "Cc" and ch.isspace()):
        return " "
    if ch in _JOINERS:
        nxt = text[i + 1] if i + 1 < len(text) else ""
        joins = prev > "\x7f" and nxt > "\x7f" and _is_wordish(prev) and nxt.isalpha()
        return ch if joins else ""
    if cat in ("Cc", "Cf", "Cs"):
        return ""  # controls, soft hyphen, bidi marks, BOM, zero-width space, emoji tags
    # So (emoji, pictographs, dingbats), non-ASCII Sk (spacing accents, emoji skin tones), Co
    # (private use), Cn (unassigned: includes emoji newer than Python's Unicode tables): a word
    # boundary. Printable ASCII never gets here and is always kept.
    return " "


# Combining marks kept per base character. Real orthographies stack a few (Vietnamese 2,
# Tibetan and Indic clusters up to about 6); longer runs are "Zalgo" decoration. The bound also
# keeps every character cluster shorter than the smallest segment cap, so segmentation never
# has to separate a mark from its base.
MAX_MARKS_PER_BASE = 8


def _filter_chars(text: str) -> str:
    if text.isascii() and text.replace("\n", " ").isprintable():
        return text
    out: list[str] = []
    prev = ""
    marks = 0
    for i, ch in enumerate(text):
        rep = ch if " " <= ch <= "~" else _char_replacement(text, i, prev)
        if not rep:
            continue
        if unicodedata.category(rep[-1])[0] == "M":
            marks += 1
            if marks > MAX_MARKS_PER_BASE:
                continue
        else:
            marks = 0
        out.append(rep)
        prev = rep[-1]
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Vulgar fractions (before NFKC)
# --------------------------------------------------------------------------------------------

# char -> (numerator, singular name, plural name)
_FRACTIONS = {
    "½": (1, "half", "halves"), "⅓": (1, "third", "thirds"), "⅔": (2, "third", "thirds"),
    "¼": (1, "quarter", "quarters"), "¾": (3, "quarter", "quarters"),
    "⅕": (1, "fifth", "fifths"), "⅖": (2, "fifth", "fifths"), "⅗": (3, "fifth", "fifths"),
    "⅘": (4, "fifth", "fifths"), "⅙": (1, "sixth", "sixths"), "⅚": (5, "sixth", "sixths"),
    "⅐": (1, "seventh", "sevenths"), "⅛": (1, "eighth", "eighths"),
    "⅜": (3, "eighth", "eighths"), "⅝": (5, "eighth", "eighths"),
    "⅞": (7, "eighth", "eighths"), "⅑": (1, "ninth", "ninths"), "⅒": (1, "tenth", "tenths"),
}  # fmt: skip
_FRACTION_RE = re.compile(r"(\d?)\s?([" + "".join(_FRACTIONS) + "])")
_NUM_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _fraction_words(m: re.Match[str]) -> str:
    num, singular, plural = _FRACTIONS[m.group(2)]
    words = f"a {singular}" if num == 1 else f"{_NUM_WORDS[num]} {plural}"
    return f"{m.group(1)} and {words}" if m.group(1) else f" {words}"


def _fractions(text: str, english: bool) -> str:
    if english:
        return superscript_units(_FRACTION_RE.sub(_fraction_words, text))
    # Other languages: keep digits apart so NFKC's "1⁄2" does not glue onto a whole number.
    return re.sub(r"(\d)([" + "".join(_FRACTIONS) + "])", r"\1 \2", text)


# --------------------------------------------------------------------------------------------
# English rules
# --------------------------------------------------------------------------------------------

# Abbreviations espeak ends a sentence after when a capitalised word follows.
_TITLES = {
    "Dr": "Doctor", "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Prof": "Professor",
    "Gen": "General", "Capt": "Captain", "Col": "Colonel", "Lt": "Lieutenant",
    "Sgt": "Sergeant", "Rev": "Reverend", "Gov": "Governor", "Sen": "Senator",
    "Rep": "Representative", "Pres": "President", "Mt": "Mount",
}  # fmt: skip
_TITLE_RE = re.compile(r"\b(" + "|".join(_TITLES) + r")\.\s+(?=[A-Z])")
# "Ms" without a period (British usage) is read "M S" too.
_MS_RE = re.compile(r"\bMs\s+(?=[A-Z])")
# Abbreviations espeak ends a sentence after when a number follows.
_BEFORE_NUMBER = {
    "no": "number", "nos": "numbers", "fig": "figure", "figs": "figures", "vol": "volume",
    "ch": "chapter", "chap": "chapter", "sec": "section", "eq": "equation", "pp": "pages",
    "jan": "January", "feb": "February", "mar": "March", "apr": "April", "jun": "June",
    "jul": "July", "aug": "August", "sep": "September", "sept": "September",
    "oct": "October", "nov": "November", "dec": "December",
}  # fmt: skip
# Capitalised forms always; lower-case too except "no." ("I said no. 5 came") and months.
_BEFORE_NUMBER_FORMS = [k.capitalize() for k in _BEFORE_NUMBER] + [
    k for k in list(_BEFORE_NUMBER)[:10] if k not in ("no", "nos")
]
_BEFORE_NUMBER_RE = re.compile(r"\b(" + "|".join(_BEFORE_NUMBER_FORMS) + r")\.\s*(?=\d)")
_VERSUS_RE = re.compile(r"\bvs\b\.?")
_HASH_NUMBER_RE = re.compile(r"(?<![\w&#])#\s?(?=\d)")


def _expand_before_number(m: re.Match[str]) -> str:
    word = _BEFORE_NUMBER[m.group(1).lower()]
    if m.group(1)[0].isupper():
        word = word[0].upper() + word[1:]
    return word + " "


def _abbreviations(text: str) -> str:
    text = _TITLE_RE.sub(lambda m: _TITLES[m.group(1)] + " ", text)
    text = _MS_RE.sub("Miz ", text)
    text = _BEFORE_NUMBER_RE.sub(_expand_before_number, text)
    text = _VERSUS_RE.sub("versus", text)
    return _HASH_NUMBER_RE.sub("number ", text)


_CURRENCY_SIGNS = "$£€¥₹"
# symbol -> (unit, units, subunit, subunits)
_CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
    "¥": ("yen", "yen", "", ""),
    "₹": ("rupee", "rupees", "paisa", "paise"),
}
_SCALES = {"k": "thousand", "m": "million", "mn": "million", "b": "billion", "bn": "billion",
           "tn": "trillion"}  # fmt: skip
_NUMBER = r"\d{1,3}(?:,\d{3})+|\d+"
_CURRENCY_RE = re.compile(
    rf"(?<![\w{_CURRENCY_SIGNS}])([{_CURRENCY_SIGNS}])\s?({_NUMBER})(?:\.(\d+))?"
    r"(?:(?:\s?(thousand|million|billion|trillion)|(k|m|mn|b|bn|tn))\b)?",
    re.IGNORECASE,
)


def _money(m: re.Match[str]) -> str:
    unit, units, sub, subs = _CURRENCIES[m.group(1)]
    whole, dec = m.group(2), m.group(3)
    scale = (m.group(4) or _SCALES.get((m.group(5) or "").lower(), "")).lower()
    if scale:
        amount = f"{whole}.{dec}" if dec else whole
        return f"{amount} {scale} {units}"
    if dec is None:
        return f"{whole} {unit if whole == '1' else units}"
    if len(dec) != 2 or not sub:
        return f"{whole}.{dec} {units}"
    cents = int(dec)
    cents_words = f"{cents} {sub if cents == 1 else subs}"
    if whole.strip("0,") == "":
        return cents_words if cents else f"0 {units}"
    whole_words = f"{whole} {unit if whole == '1' else units}"
    return f"{whole_words} and {cents_words}" if cents else whole_words


_TIME_RE = re.compile(
    r"(?<![\d:.])([01]?\d|2[0-3]):([0-5]\d)(?![\d:]|[.,]\d)(\s?[AaPp]\.?[Mm]\b\.?)?"
)


def _clock(m: re.Match[str]) -> str:
    hour, minute, ampm = int(m.group(1)), m.group(2), m.group(3) or ""
    if minute == "00":
        if ampm:
            return f"{hour}{ampm}"
        if 1 <= hour <= 12:
            return f"{hour} o'clock"
        return f"{hour} hundred" if hour else m.group(0)
    if minute[0] == "0":
        return f"{hour} oh {minute[1]}{ampm}"
    return m.group(0)


_DECADE_WORDS = {
    "00": "hundreds", "10": "tens", "20": "twenties", "30": "thirties", "40": "forties",
    "50": "fifties", "60": "sixties", "70": "seventies", "80": "eighties", "90": "nineties",
}  # fmt: skip
_DECADE_RE = re.compile(r"(?<![\w.,'$£€¥₹])(?:(1[1-9]|20)(\d0)|'?([1-9]0))'?s\b")


def _decade(m: re.Match[str]) -> str:
    century, decade = m.group(1), m.group(2) or m.group(3)
    if century is None:
        return _DECADE_WORDS[decade]
    if decade == "00" and century == "20":
        return "2 thousands"
    return f"{century} {_DECADE_WORDS[decade]}"


_ROUND_ORDINAL_RE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)th\b")


def _round_ordinal(m: re.Match[str]) -> str:
    n = int(m.group(1).replace(",", ""))
    if n == 0 or n % 100:
        return m.group(0)  # "5th", "21st", "110th": espeak reads them well
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000} millionth"
    if n % 1000 == 0:
        return f"{n // 1000} thousandth"
    return f"{n // 100} hundredth"


# A number range: "3-4", "1939–1945", "$10-$20", "10 - 20%", "9:00-5:00". Not chains
# ("2024-01-15", "978-3-16") and not a US phone number ("555-1234").
_RANGE_NUM = rf"[{_CURRENCY_SIGNS}]?\d+(?:[.,:]\d+)*%?"
_RANGE_RE = re.compile(
    rf"(?<![\w.,:/\-–—])({_RANGE_NUM})(\s*)([-–—])(\s*)({_RANGE_NUM})(?![\d\-–—/:]|[.,]\d)"
)


def _range(m: re.Match[str]) -> str:
    left, sp1, dash, sp2, right = m.groups()
    if dash == "-" and not sp1 and not sp2 and re.fullmatch(r"\d{3}", left):
        if re.fullmatch(r"\d{4}", right):
            return m.group(0)  # phone number
    return f"{left} to {right}"


_LEADING_DECIMAL_RE = re.compile(r"(?<![\w.])\.(?=\d)")


def _english_rules(text: str) -> str:
    text = _LEADING_DECIMAL_RE.sub("0.", text)
    text = spell_comparisons(spell_arrows(text))
    text = spell_roman_numerals(text)
    text = _abbreviations(text)
    text = _RANGE_RE.sub(_range, text)
    text = _CURRENCY_RE.sub(_money, text)
    text = _TIME_RE.sub(_clock, text)
    text = _DECADE_RE.sub(_decade, text)
    text = _ROUND_ORDINAL_RE.sub(_round_ordinal, text)
    return spell_units(text)


# --------------------------------------------------------------------------------------------
# Dashes
# --------------------------------------------------------------------------------------------

_MULTI_HYPHEN_RE = re.compile(r"-{2,}")
_COMPOUND_EN_DASH_RE = re.compile(r"(?<=\w)–(?=\w)")
_SPACED_HYPHEN_RE = re.compile(r"(?<=\S)\s+-\s+(?=\S)")
_DASH_RUN_RE = re.compile(r"\s*[—–](?:\s*[—–])*\s*")
_CLOSERS = frozenset("\"')]}»")
_OPENERS = frozenset("([{«")
_PUNCT_AFTER = frozenset(",;:.!?")


def _dash_pause(m: re.Match[str]) -> str:
    """An em dash (or spaced en dash / hyphen) between words is a pause: ", " reads best.
    espeak-ng gives "word—word" and "word - word" no pause at all, "word, word" a short one."""
    text, start, end = m.string, m.start(), m.end()
    before = text[start - 1] if start else ""
    after = text[end] if end < len(text) else ""
    if not before or not after or before in _OPENERS:
        return ""  # leading / trailing dash, or right after an opening bracket
    if before in _PUNCT_AFTER or after in _PUNCT_AFTER:
        return " " if m.group(0)[-1:].isspace() else ""  # already punctuated
    if after in _CLOSERS and end == len(m.group(0).rstrip()) + start:
        return ","  # 'Stop—" he said' -> 'Stop," he said'
    return ", "


def _dashes(text: str) -> str:
    text = _MULTI_HYPHEN_RE.sub("—", text)
    text = _COMPOUND_EN_DASH_RE.sub("-", text)  # "Dallas–Fort Worth" is a compound
    text = _SPACED_HYPHEN_RE.sub(" — ", text)
    return _DASH_RUN_RE.sub(_dash_pause, text)


# --------------------------------------------------------------------------------------------
# Blocks (paragraphs, lines, list items, headings: voxflow.text.lines)
# --------------------------------------------------------------------------------------------

_NEWLINES_RE = re.compile(r"\r\n?|[\u2028\x85\x0b\x0c]")
_SPACE_RE = re.compile(r"\s+")
# "Great job 🙂!" -> "Great job !" -> "Great job!"; not after punctuation ("said. ..." stays).
_SPACE_BEFORE_PUNCT_RE = re.compile(r"(?<=[\w\"')\]])\s+([,;:.!?]+)(?=\s|$)")


def _block_pass(text: str, english: bool) -> str:
    text = _SPACE_RE.sub(" ", text).strip()
    # markers a dropped tag or struck-through text exposed, as split_blocks would strip them
    text = MARKER_RE.sub("", strip_quote(text))
    text = strip_emphasis(text)
    if english:
        text = _english_rules(text)
    text = _dashes(text)
    text = _SPACE_BEFORE_PUNCT_RE.sub(r"\1", text)
    if not unicodedata.is_normalized("NFKC", text):  # a rule put letters before a mark
        text = unicodedata.normalize("NFKC", text)
    return _SPACE_RE.sub(" ", text).strip()


_MAX_PASSES = 4


def _normalize_block(block: str, english: bool) -> str:
    """Apply the block rules until nothing changes (a rule can expose work for another, e.g.
    removing a leading "--" leaves a "3-4" range), so the result is stable under re-normalizing.
    """
    text = block
    for _ in range(_MAX_PASSES):
        new = _block_pass(text, english)
        if new == text:
            break
        text = new
    return text


def _is_english(lang: str) -> bool:
    return lang.lower().startswith("en")


def normalize_paragraphs(text: str, *, lang: str = "en") -> list[str]:
    """Normalize ``text`` and return its blocks (paragraphs, lines, list items, headings,
    table rows, code lines), each normalized as :func:`normalize_text` describes, empty blocks
    dropped.

    Block boundaries (`voxflow.text.lines`): blank lines, U+2029, HTML block tags (``<br>``,
    ``<p>``), a line starting with a list marker ("- ", "* ", "• ", "1. ", "2) ") or a
    Markdown heading ("# ", also after a sentence on the same line), the line after a heading,
    each table row and fenced code line, and any other line break except where the text is
    evidently wrapped (the line ends with ``,``, ``;``, a dash or ``(``, or the next line
    starts in lower case, unless the line ends with ``:``). Markdown markup is removed
    (`voxflow.text.markdown`; numbered-list numbers are kept). Every block but the last ends
    with sentence punctuation (``.`` added when it has none; ``:`` and ``;`` count; a final
    ``,`` becomes ``.``). Blocks with nothing speakable (a "---" rule, a lone "...", an emoji)
    are dropped. ``normalize_text(t) == " ".join(normalize_paragraphs(t))`` always holds.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    english = _is_english(lang)
    text = unicodedata.normalize("NFKC", _fractions(text.translate(_PRE_NFKC), english))
    text = _NEWLINES_RE.sub("\n", text).replace("\u2029", "\n\n")
    out = []
    for block, _code in split_blocks(_filter_chars(text).translate(_CHAR_MAP)):
        normalized = _normalize_block(block.replace("`", "'"), english)
        if has_speakable_content(normalized):
            out.append(normalized)
    return [end_sentence(block) for block in out[:-1]] + out[-1:]


def normalize_text(text: str, *, lang: str = "en") -> str:
    """Normalize raw input text for speech synthesis.

    Args:
        text: raw request text (any script, any length).
        lang: BCP-47-ish language of the text. English rules (numbers, abbreviations, units,
            Roman numerals; see the module docstring for the espeak-ng evidence behind each)
            apply only when it starts with ``"en"`` (the default). Markup and line rules apply
            to every language.

    Returns:
        One line of text: NFKC-normalized; curly quotes made straight (``’`` -> ``'``, ``“”``
        -> ``"``); em dashes and spaced en dashes/hyphens between words turned into ``", "``
        (unspaced en dash between words -> ``-``; between numbers -> ``" to "`` in English);
        ``…`` -> ``...``; emoji, pictographs, dingbats, private-use, unassigned, control and
        format characters removed (``°`` and ``©`` kept; ZWJ/ZWNJ kept between letters);
        letters of all scripts, digits, punctuation, currency and math signs kept; whitespace
        collapsed to single spaces; stripped; Markdown and HTML-ish markup read as text.
        Blocks (paragraphs, lines, items) are joined by spaces after each but the last got
        sentence punctuation (use :func:`normalize_paragraphs` to keep them apart); blocks with
        nothing speakable are dropped. ``""`` when nothing is speakable. Idempotent for text
        without line breaks, HTML block tags or heading markers after a sentence (each of those
        starts a block): ``normalize_text(normalize_text(t)) == normalize_text(t)`` (flattening
        blocks can put words side by side that a rule then joins, e.g. "Dr." ending one block
        and a name starting the next, so pass raw text to the segmenter).

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    return " ".join(normalize_paragraphs(text, lang=lang))


def has_speakable_content(text: str) -> bool:
    """True if ``text`` contains at least one letter or digit (Unicode category L* or N*).

    False for ``""``, whitespace, and text of only punctuation, symbols or emoji
    (``"..."``, ``"🙂🙂"``, ``"$"``): such text gives a model nothing to say.
    """
    return any(unicodedata.category(ch)[0] in "LN" for ch in text)
