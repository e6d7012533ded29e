"""English normalization of unit symbols and degree signs after numbers (voxflow.text.units)."""

from __future__ import annotations

import pytest

from voxflow.text import normalize_text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the example: en-dash range, degree sign and Celsius
        ("Store between 40–60°C.", "Store between 40 to 60 degrees Celsius."),
        ("Bake at 180 °C or 350°F.", "Bake at 180 degrees Celsius or 350 degrees Fahrenheit."),
        ("It was -1°C at 1° of tilt.", "It was -1 degree Celsius at 1 degree of tilt."),
        ("Turn 90° then 45°N.", "Turn 90 degrees then 45 degrees north."),
        ("Temperatures in °C.", "Temperatures in degrees Celsius."),
    ],
)
def test_degrees(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # plural agreement: singular only after exactly 1
        ("Walk 1 km, 2 km or 1.5 km.", "Walk 1 kilometer, 2 kilometers or 1.5 kilometers."),
        ("Take 5kg, 250 g of flour, 10 mg, 2 lbs, 1 lb, 8 oz.",
         "Take 5 kilograms, 250 grams of flour, 10 milligrams, 2 pounds, 1 pound, 8 ounces."),
        ("Drive 60 mph, 100 km/h or 90 kph at 3 m/s.",
         "Drive 60 miles per hour, 100 kilometers per hour or 90 kilometers per hour at 3 "
         "meters per second."),
        ("Add 5 ml, 5 mL, 1 l and 2 L.",
         "Add 5 milliliters, 5 milliliters, 1 liter and 2 liters."),
        ("8 GB RAM, 512 MB, 64 KB, 2 TB disk.",
         "8 gigabytes RAM, 512 megabytes, 64 kilobytes, 2 terabytes disk."),
        ("3.2 GHz, 100 MHz, 44.1 kHz, 50 Hz.",
         "3.2 gigahertz, 100 megahertz, 44.1 kilohertz, 50 hertz."),
        ("It holds 5000 mAh at 12 V, 60W and 2 kW.",
         "It holds 5000 milliamp hours at 12 volts, 60 watts and 2 kilowatts."),
        ("Wait 1 h, 2 hrs, 5 min, 30 s, 2.5s and 20 ms.",
         "Wait 1 hour, 2 hours, 5 minutes, 30 seconds, 2.5 seconds and 20 milliseconds."),
        ("He is 6 ft tall; it is 5 ft 6 in wide, 3 yd and 2 mi away.",
         "He is 6 feet tall; it is 5 feet 6 inches wide, 3 yards and 2 miles away."),
        ("It has 50 m² and holds 2 m3.", "It has 50 square meters and holds 2 cubic meters."),
        ("Dose 5 mg/L.", "Dose 5 milligrams per liter."),
        # ranges: the unit on both ends or only at the end
        ("Run 5–10 km or 5km-10km.", "Run 5 to 10 kilometers or 5 to 10 kilometers."),
        # left alone: espeak reads them well
        ("It grew 3.5% and 50%.", "It grew 3.5% and 50%."),
    ],
)  # fmt: skip
def test_units_after_numbers(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I am in the room.",  # "in", "am" and "m" as words
        "Born in 1990 in Paris, a 1 in 10 chance.",  # "in" after a number, before a word
        "Give me 5s and a g or an h.",  # "5s" (high fives), letters without a number
        "Meet me at 123 W Main St.",  # "W" before a capitalised word: an address
        "COVID-19 m and version 1.2.3 m.",  # numbers that end a word or a version
    ],
)
def test_words_and_letters_are_not_units(text):
    assert normalize_text(text) == text


def test_money_with_a_scale_is_not_meters():
    assert normalize_text("They raised $5m.") == "They raised 5 million dollars."


def test_units_not_rewritten_outside_english():
    assert normalize_text("Es sind 5 km bei 20°C.", lang="de") == "Es sind 5 km bei 20°C."


def test_units_are_idempotent():
    text = "Store between 40–60°C, walk 1 km at 5 km/h, a 6 in. blade and 5 ft 6 in."
    once = normalize_text(text)
    assert once == (
        "Store between 40 to 60 degrees Celsius, walk 1 kilometer at 5 kilometers per hour, "
        "a 6-inch blade and 5 feet 6 inches."
    )
    assert normalize_text(once) == once


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # espeak read the NFKC form "m/s2" "M slash S two"
        ("It falls at 9.8 m/s² or 20 m/s2.",
         "It falls at 9.8 meters per second squared or 20 meters per second squared."),
        ("Water is 1000 kg/m³ and 1 g/cm3.",
         "Water is 1000 kilograms per cubic meter and 1 gram per cubic centimeter."),
        ("Jerk in m/s³: 2 m/s³.", "Jerk in m/s3: 2 meters per second cubed."),  # no number: NFKC
        # powers it does not read are left (NFKC digits)
        ("A 5 s² term.", "A 5 s2 term."),
    ],
)  # fmt: skip
def test_squared_and_cubed_after_a_unit_pair(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the micro sign U+00B5 (NFKC: Greek mu U+03BC) was read "mew": "100 µm" "mewm"
        ("A hair is 100 µm wide.", "A hair is 100 micrometers wide."),
        ("Wait 5 µs, add 3 µg and 2 µL.",
         "Wait 5 microseconds, add 3 micrograms and 2 microliters."),
        ("Greek mu: 1 μm, 4 μl, 10 mcg, 2 μA, 5 μV, 3 μW.",
         "Greek mu: 1 micrometer, 4 microliters, 10 micrograms, 2 microamps, 5 microvolts, "
         "3 microwatts."),
    ],
)  # fmt: skip
def test_micro_prefixes(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("A 10 m pole.", "A 10-meter pole."),
        ("Buy a 100 W bulb and an 8 GB drive.", "Buy a 100-watt bulb and an 8-gigabyte drive."),
        ("A 5kg bag and a 1.5 m rope.", "A 5-kilogram bag and a 1.5-meter rope."),
        ("A 50 m² flat and a 2 m3 tank.", "A 50-square-meter flat and a 2-cubic-meter tank."),
        ("a 60 km/h limit, a 5000 mAh cell",
         "a 60-kilometer-per-hour limit, a 5000-milliamp-hour cell"),
        ("a 9.8 m/s² pull", "a 9.8-meter-per-second-squared pull"),
        ("a 5–10 km walk", "a 5 to 10-kilometer walk"),
        ("a 6 in. blade", "a 6-inch blade"),
        ("a 10 m long pole", "a 10-meter long pole"),
        ("a 90° turn on a 30°C day", "a 90-degree turn on a 30-degree-Celsius day"),
        # not a noun after the unit, or no article: plural
        ("I ran a 5 km in 20 minutes.", "I ran a 5 kilometers in 20 minutes."),
        ("It was a 5 km.", "It was a 5 kilometers."),
        ("It is a 10 m Pole.", "It is a 10 meters Pole."),
        ("Two 100 W bulbs; I ran 5 km today.", "Two 100 watts bulbs; I ran 5 kilometers today."),
        ("Data 5 m and 10 m away.", "Data 5 meters and 10 meters away."),
    ],
)  # fmt: skip
def test_unit_before_a_noun_after_a_or_an_is_singular_and_hyphenated(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected
