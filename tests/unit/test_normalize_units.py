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
        ("A 5kg bag, 250 g of flour, 10 mg, 2 lbs, 1 lb, 8 oz.",
         "A 5 kilograms bag, 250 grams of flour, 10 milligrams, 2 pounds, 1 pound, 8 ounces."),
        ("Drive 60 mph, 100 km/h or 90 kph at 3 m/s.",
         "Drive 60 miles per hour, 100 kilometers per hour or 90 kilometers per hour at 3 "
         "meters per second."),
        ("Add 5 ml, 5 mL, 1 l and 2 L.",
         "Add 5 milliliters, 5 milliliters, 1 liter and 2 liters."),
        ("8 GB RAM, 512 MB, 64 KB, 2 TB disk.",
         "8 gigabytes RAM, 512 megabytes, 64 kilobytes, 2 terabytes disk."),
        ("3.2 GHz, 100 MHz, 44.1 kHz, 50 Hz.",
         "3.2 gigahertz, 100 megahertz, 44.1 kilohertz, 50 hertz."),
        ("A 5000 mAh cell, 12 V, 60W and 2 kW.",
         "A 5000 milliamp hours cell, 12 volts, 60 watts and 2 kilowatts."),
        ("Wait 1 h, 2 hrs, 5 min, 30 s, 2.5s and 20 ms.",
         "Wait 1 hour, 2 hours, 5 minutes, 30 seconds, 2.5 seconds and 20 milliseconds."),
        ("He is 6 ft tall; it is 5 ft 6 in wide, 3 yd and 2 mi away.",
         "He is 6 feet tall; it is 5 feet 6 inches wide, 3 yards and 2 miles away."),
        ("A 50 m² flat and a 2 m3 tank.", "A 50 square meters flat and a 2 cubic meters tank."),
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
        "a 6 inches blade and 5 feet 6 inches."
    )
    assert normalize_text(once) == once
