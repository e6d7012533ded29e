"""English: unit symbols and degree signs after numbers, spelled out as words.

espeak-ng (en-us, piper-tts 1.8.0) reads most unit symbols as letters: ``5 km`` "five K M",
``5 kg`` "five K G", ``60 km/h`` "sixty K M slash H", ``5 mL`` "five M L", ``3 kHz`` "three K
H Z", ``5000 mAh`` "five thousand M ah", ``6 ft`` "six F T", and every degree sign as the
plural "degrees" with a bare letter after it (``1°`` "one degrees", ``60°C`` "sixty degrees
C"). It reads ``50%`` ("fifty percent"), ``5 lbs`` ("five pounds"), ``3 GHz`` and ``3 MHz``
well; those are spelled out anyway where they are in the table, for one consistent rule, except
``%`` which is left alone.

Rule: a symbol from :data:`UNITS` is rewritten only when it directly follows a number (with or
without one space), is not followed by a letter, digit or apostrophe, and, for one-letter
upper-case symbols (``L``, ``V``, ``W``), is not followed by a space and a capital letter
("5 W Main St" is an address). The number is kept as digits (espeak reads them well); the unit
is singular after exactly ``1`` (or ``-1``) and plural otherwise (``1.5 km`` -> kilometers).
Symbols that are also words are narrower: ``in`` is inches only when glued to the number
(``6in``), after a feet value (``5 ft 6 in``) or before punctuation or the end (``a 6 in
blade.`` is not rewritten, ``6 in.`` is); ``s`` is seconds only after a space or a decimal
(``5 s``, ``2.5s``; ``5s`` is left). ``A`` (amperes), ``K`` (thousand or kelvin), ``m`` as
million are not handled: ``m`` after a number is meters (money with a currency sign is handled
before, ``$5m`` -> "5 million dollars"). A unit pair ``A/B`` of two table symbols is "A per B"
(``mg/L`` -> "milligrams per liter"). A range with the unit on both ends keeps one (``5kg-10kg``
-> "5 to 10 kilograms"); a range with the unit at the end was already made ``N to M`` by the
range rule. ``²``/``³`` after a length unit (or ``2``/``3`` glued to it) is square / cubic; after
the second unit of a pair it applies to that unit: a length is square / cubic (``kg/m³`` "per
cubic meter"), a time is squared / cubed (``20 m/s²`` "20 meters per second squared"; espeak
read the NFKC form ``m/s2`` "M slash S two"). Other powers (``5 s²``) are left.

Micro: NFKC turns the micro sign ``µ`` into Greek ``μ``, which espeak reads "mew" (``100 µm``
"one hundred mewm"); ``μm``, ``μs``, ``μg`` (and ``mcg``), ``μl``/``μL``, ``μA``, ``μV``,
``μW`` are in the table (micrometers, microseconds, ...).

Before a noun (attributive use) English uses the singular, hyphenated: "a ten-meter pole", not
"a 10 meters pole". Rule, deliberately narrow: after ``a``/``an`` (optionally ``a 5 to``, the
range form) + number + unit, followed by a lower-case word that is not a preposition,
conjunction, article or verb of :data:`_NOT_NOUNS` (``a 5 km in 20 minutes`` stays plural), the
unit is singular and joined by hyphens: ``A 10 m pole`` -> ``A 10-meter pole``, ``a 60 km/h
limit`` -> ``a 60-kilometer-per-hour limit``, ``a 50 m² flat`` -> ``a 50-square-meter flat``,
``a 90° turn`` -> ``a 90-degree turn``. espeak reads the hyphenated form as one compound
("ten-meter"). Without the article it is not done (``100 W bulbs`` stays "100 watts bulbs"):
``ran 5 km today``, ``weighs 5 kg more`` have a lower-case word after the unit too, and only the
article makes the noun phrase certain.
"""

from __future__ import annotations

import re

__all__ = ["UNITS", "spell_units", "superscript_units"]

# symbol -> (singular, plural)
UNITS: dict[str, tuple[str, str]] = {
    # length
    "km": ("kilometer", "kilometers"), "Km": ("kilometer", "kilometers"),
    "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "nm": ("nanometer", "nanometers"),
    "μm": ("micrometer", "micrometers"),
    "mi": ("mile", "miles"), "yd": ("yard", "yards"), "yds": ("yard", "yards"),
    "ft": ("foot", "feet"), "in": ("inch", "inches"),
    # mass
    "kg": ("kilogram", "kilograms"), "Kg": ("kilogram", "kilograms"),
    "kgs": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
    "μg": ("microgram", "micrograms"), "mcg": ("microgram", "micrograms"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    # volume
    "l": ("liter", "liters"), "L": ("liter", "liters"), "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"), "cl": ("centiliter", "centiliters"),
    "μl": ("microliter", "microliters"), "μL": ("microliter", "microliters"),
    # speed
    "mph": ("mile per hour", "miles per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "rpm": ("revolution per minute", "revolutions per minute"),
    # time
    "h": ("hour", "hours"), "hr": ("hour", "hours"), "hrs": ("hour", "hours"),
    "min": ("minute", "minutes"), "mins": ("minute", "minutes"),
    "s": ("second", "seconds"), "sec": ("second", "seconds"), "secs": ("second", "seconds"),
    "ms": ("millisecond", "milliseconds"), "μs": ("microsecond", "microseconds"),
    # data
    "KB": ("kilobyte", "kilobytes"), "kB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"), "kbps": ("kilobit per second", "kilobits per second"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    # frequency, power, energy, electricity, sound
    "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"), "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"),
    "MW": ("megawatt", "megawatts"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "V": ("volt", "volts"), "kV": ("kilovolt", "kilovolts"), "mV": ("millivolt", "millivolts"),
    "mA": ("milliamp", "milliamps"), "mAh": ("milliamp hour", "milliamp hours"),
    "μA": ("microamp", "microamps"), "μV": ("microvolt", "microvolts"),
    "μW": ("microwatt", "microwatts"),
    "kcal": ("kilocalorie", "kilocalories"), "dB": ("decibel", "decibels"),
}  # fmt: skip
_LENGTHS = frozenset({"km", "Km", "m", "cm", "mm", "μm", "mi", "yd", "ft", "in"})
_TIMES = frozenset({"h", "hr", "min", "s", "sec", "ms"})
_SQUARE = {"2": "square", "3": "cubic"}
_POWER = {"2": "squared", "3": "cubed"}
# Words after "a/an N unit" that are not the noun the unit describes ("a 5 km in 20 minutes").
_NOT_NOUNS = frozenset(
    "a an the and or nor but of in on at to for by with from into onto than per as so is are "
    "was were be been has have had will would can could do did each every this that these those "
    "it its which who what when where while if then too more less away ago later each".split()
)
_DEGREE_SCALES = {"C": "Celsius", "F": "Fahrenheit", "K": "kelvin", "N": "north", "S": "south",
                  "E": "east", "W": "west"}  # fmt: skip

# A number: optional minus, digits with optional thousands commas, optional decimals; not the
# tail of a word, a version or a longer number ("A4", "v1.2", "1.2.3").
_NUM = r"(?<![\w.,\-])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
_SYMBOLS = "|".join(sorted((re.escape(u) for u in UNITS), key=len, reverse=True))
_UNIT_RE = re.compile(rf"{_NUM}(\s?)({_SYMBOLS})(?:/({_SYMBOLS}))?(?:\^?([23]))?(?![\w'’/])(\.?)")
_RANGE_RE = re.compile(rf"{_NUM}\s?({_SYMBOLS})\s*[-–—]\s*(\d+(?:\.\d+)?)(\s?)\2(?![\w'’])")
_DEGREE_RE = re.compile(rf"{_NUM}\s?°(?:\s?([CFKNSEW])(?![\w'’]))?")
_BARE_DEGREE_RE = re.compile(r"(?<![\w°])°\s?([CF])(?![\w'’])")
_FEET_INCHES_RE = re.compile(r"(\d)\s?(ft|feet|foot)\s(\d+(?:\.\d+)?)\s?in\b")
_LENGTH_SYMBOLS = "|".join(sorted(_LENGTHS, key=len, reverse=True))
_TIME_SYMBOLS = "|".join(sorted(_TIMES, key=len, reverse=True))
# The powers spell_units reads: a length after a number, or a length or time after "unit/".
_SUPERSCRIPT_RE = re.compile(
    rf"(\d\s?(?:(?:{_LENGTH_SYMBOLS})|(?:{_SYMBOLS})/(?:{_LENGTH_SYMBOLS}|{_TIME_SYMBOLS})))([²³])"
)
_ARTICLE_RE = re.compile(r"(?:^|(?<=[^\w'’]))[Aa]n?\s+(?:\d[\d,.]*\s+to\s+)?\Z")
_NEXT_WORD_RE = re.compile(r"\s+([a-z][a-z'’-]*)")


def _plural(number: str) -> bool:
    return number.lstrip("-") != "1"


def _words(number: str, unit: str) -> str:
    singular, plural = UNITS[unit]
    return plural if _plural(number) else singular


def _per(per: str, power: str | None) -> str | None:
    """``"per second squared"``, ``"per cubic meter"``; None for a power it does not read."""
    if not power:
        return f"per {UNITS[per][0]}"
    if per in _LENGTHS:
        return f"per {_SQUARE[power]} {UNITS[per][0]}"
    if per in _TIMES:
        return f"per {UNITS[per][0]} {_POWER[power]}"
    return None


def _attributive(m: re.Match[str], rest: str, dot: str) -> bool:
    """``a 10 m pole``: after "a"/"an" (and an optional "N to"), before a lower-case word that
    is not in :data:`_NOT_NOUNS` (a period between is the abbreviation's: ``a 6 in. blade``)."""
    if not _ARTICLE_RE.search(m.string, 0, m.start()):
        return False
    nxt = _NEXT_WORD_RE.match(rest)
    return nxt is not None and nxt.group(1) not in _NOT_NOUNS


def _unit(m: re.Match[str]) -> str:
    number, space, unit, per, power, dot = m.groups()
    rest = m.string[m.end() :]
    if not _is_unit_here(number, space, unit, rest, dot):
        return m.group(0)
    if power and not per and unit not in _LENGTHS:
        return m.group(0)
    per_words = _per(per, power) if per else ""
    if per_words is None:
        return m.group(0)
    if _attributive(m, rest, dot):  # "a 10-meter pole", "a 60-kilometer-per-hour limit"
        words = " ".join(filter(None, [_SQUARE[power] if power and not per else "",
                                       UNITS[unit][0], per_words]))  # fmt: skip
        return f"{number}-{words.replace(' ', '-')}"
    words = _words(number, unit)
    if power and not per:
        words = f"{_SQUARE[power]} {words}"
    if per_words:
        words = f"{words} {per_words}"
    # "6 in." mid-sentence is the abbreviation's period, not a sentence end.
    keep_dot = dot and not re.match(r"\s+[a-z]", rest)
    return f"{number} {words}{'.' if keep_dot else ''}"


def _is_unit_here(number: str, space: str, unit: str, rest: str, dot: str) -> bool:
    """The narrower conditions for symbols that are also words or letters (see module doc)."""
    if len(unit) == 1 and unit.isupper() and re.match(r"\s[A-Z]", rest) and not dot:
        return False
    if unit == "in" and space:
        return bool(dot) or not rest or rest[0] in ",;:!?)"
    if unit == "s" and space == "" and "." not in number:
        return False
    return True


def _range(m: re.Match[str]) -> str:
    return f"{m.group(1)} to {m.group(3)}{m.group(4) or ' '}{m.group(2)}"


def _degree(m: re.Match[str]) -> str:
    number, scale = m.group(1), m.group(2)
    if _attributive(m, m.string[m.end() :], ""):  # "a 90-degree turn"
        return f"{number}-degree-{_DEGREE_SCALES[scale]}" if scale else f"{number}-degree"
    degrees = "degrees" if _plural(number) else "degree"
    return f"{number} {degrees} {_DEGREE_SCALES[scale]}" if scale else f"{number} {degrees}"


def superscript_units(text: str) -> str:
    """``5 m²`` -> ``5 m^2`` (before NFKC, which would make it ``5 m2``); see
    :func:`spell_units` for the rest. Only after a length unit that follows a number."""
    if "²" not in text and "³" not in text:
        return text
    return _SUPERSCRIPT_RE.sub(lambda m: m.group(1) + ("^2" if m.group(2) == "²" else "^3"), text)


def spell_units(text: str) -> str:
    """Spell out degree signs and the unit symbols of :data:`UNITS` that follow a number.

    ``Store between 40 to 60°C.`` -> ``Store between 40 to 60 degrees Celsius.``, ``1°`` ->
    ``1 degree``, ``1 km`` -> ``1 kilometer``, ``1.5 km`` -> ``1.5 kilometers``, ``60 km/h``
    -> ``60 kilometers per hour``, ``5 m^2`` -> ``5 square meters``. Words are never touched:
    a symbol is only rewritten right after a number (rules in the module docstring).
    """
    if "°" in text:
        text = _DEGREE_RE.sub(_degree, text)
        text = _BARE_DEGREE_RE.sub(lambda m: f"degrees {_DEGREE_SCALES[m.group(1)]}", text)
    if not any(ch.isdigit() for ch in text):
        return text
    text = _FEET_INCHES_RE.sub(r"\1 \2 \3in", text)  # "5 ft 6 in tall": inches, glued
    text = _RANGE_RE.sub(_range, text)
    return _UNIT_RE.sub(_unit, text)
