"""Markdown and HTML-ish markup are read as text, not symbols (voxflow.text.markdown)."""

from __future__ import annotations

import pytest

from voxflow.text import normalize_paragraphs, normalize_text, segment_text


def test_heading_after_a_sentence_on_the_same_line():
    # the example: read "hash hash summary" before
    text = "You mustn't worry. ### Summary"
    assert normalize_paragraphs(text) == ["You mustn't worry.", "Summary"]
    assert segment_text(text, 100) == ["You mustn't worry.", "Summary"]


@pytest.mark.parametrize(
    ("raw", "blocks"),
    [
        ("# Title\nSome text.\n\n## Details ##\n* one\n+ two\n- [x] three",
         ["Title.", "Some text.", "Details.", "one.", "two.", "three"]),
        ("Steps:\n1. Open it\n2) Close it", ["Steps:", "1. Open it.", "2) Close it"]),
        ("Intro ## Part two", ["Intro.", "Part two"]),  # two or more hashes after a word
        ("> Quoted line.\n> > Nested quote.", ["Quoted line.", "Nested quote."]),
        ("Above\n\n---\n\nBelow\n***\nEnd", ["Above.", "Below.", "End"]),
        ("Title\n=====\nBody", ["Title.", "Body"]),
        # code fences: fences and language tag dropped, the code read line by line
        ("Run:\n```bash\nmake test\nmake serve\n```\nDone.",
         ["Run:", "make test.", "make serve.", "Done."]),
        # tables: cells separated by commas, one row per sentence, the rule dropped
        ("| Name | Age |\n|------|----:|\n| Ann | 5 |\n| Bob | 7 |",
         ["Name, Age.", "Ann, 5.", "Bob, 7"]),
        ("Name | Age\n--- | ---\nAnn | 5", ["Name, Age.", "Ann, 5"]),
        # HTML block tags end a block
        ("Line one<br>line two<br/>line three</p>", ["Line one.", "line two.", "line three"]),
    ],
)  # fmt: skip
def test_block_markup(raw, blocks):
    assert normalize_paragraphs(raw) == blocks


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # struck-through text is deleted text: dropped with its markers
        ("It's **very** *important* and __really__ _so_ ~~not~~ fine.",
         "It's very important and really so fine."),
        ("Type `make test` or ``a ` b`` now.", "Type make test or a ' b now."),
        ("Read [the guide](https://example.com/guide \"Guide\") and [docs][1].",
         "Read the guide and docs."),
        ("See ![a cat](cat.png) and ![](dog.png) here.", "See a cat and here."),
        ("Visit https://www.example.com/path?q=1. Or <https://docs.python.org/3/>.",
         "Visit example.com. Or docs.python.org."),
        ("Go to www.python.org/downloads today.", "Go to python.org today."),
        ("Some <b>bold</b>, <span class=\"x\">span</span> and <img src=\"a.png\" alt=\"a map\">.",
         "Some bold, span and a map."),
        ("Escaped \\# and \\[x\\] stay.", "Escaped # and [x] stay."),
    ],
)  # fmt: skip
def test_inline_markup(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected


def test_reference_definitions_are_dropped():
    assert normalize_paragraphs("Read [the docs][1].\n\n[1]: https://x.org/docs") == [
        "Read the docs."
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Use snake_case_names, a_b and 5 * 3 or 5*3.",
        "C# and F# are languages; List<String> and Map<K, V> stay.",
        "Mail me at ann@example.com.",
        "Don't use the __ blank or a lone * here.",
        "Paths like a/b_c.txt and #tags stay.",
        "Shell pipes | like a | b stay, and a lone * before a period *.",
    ],
)
def test_plain_text_with_markup_characters_is_unchanged(text):
    assert normalize_text(text) == text


def test_model_answer_in_markdown():
    text = (
        "## Answer\n\nYou can **install** it with `pip`:\n\n```sh\npip install voxflow\n```\n\n"
        "| Option | Default |\n|---|---|\n| speed | 1.0 |\n\n> Note: see [the docs](https://x.org)."
    )
    assert normalize_paragraphs(text) == [
        "Answer.",
        "You can install it with pip:",
        "pip install voxflow.",
        "Option, Default.",
        "speed, 1.0.",
        "Note: see the docs.",
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the QA example: read "custom tag slash custom" before
        ("<custom>tag</custom>", "tag"),
        ("Hello <note id=\"1\">world</note>, bye<x/> now.", "Hello world, bye now."),
        ("<name>John</name><age>5</age>", "John 5"),  # a space where words would touch
        # a pair may span lines; the tags go, the lines stay blocks
        ("<aside>\nFirst.\nSecond.\n</aside>", "First. Second."),
        # unpaired names and "<" before a space or digit are not markup
        ("Use List<String> or a <b and c.", "Use List<String> or a <b and c."),
    ],
)  # fmt: skip
def test_tags_that_look_like_markup_are_dropped_keeping_their_text(raw, expected):
    assert normalize_text(raw) == expected
    assert normalize_text(expected) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("It costs ~~10~~ 8 dollars.", "It costs 8 dollars."),
        ("Was <del>old</del><s>older</s> <strike>oldest</strike> new.", "Was new."),
    ],
)
def test_struck_through_text_is_deleted_text_and_dropped(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    ("raw", "blocks"),
    [
        # the QA example: read "a cat old new." before
        ("![a cat](cat.png) ~~old~~ new.", ["a cat.", "new."]),
        ("Our pet. ![a cat](c.png) ![a dog](d.png) They play.",
         ["Our pet.", "a cat.", "a dog.", "They play."]),
        ("Our town: <img src=\"m.png\" alt=\"a map\">", ["Our town:", "a map"]),
        # inside a sentence an image is read in place, like a word (an inline icon)
        ("Click the ![gear](g.png) icon, then ![](x.png) save.",
         ["Click the gear icon, then save."]),
    ],
)  # fmt: skip
def test_image_that_starts_a_sentence_is_a_sentence_of_its_own(raw, blocks):
    assert normalize_paragraphs(raw) == blocks
