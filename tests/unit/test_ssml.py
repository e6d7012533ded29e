"""SSML inputs -> runs, pauses and rates (voxflow.text.ssml), and the 400s for bad SSML.

Pure parsing: no voice, no server. Each error test checks the exact line and column.
"""

from __future__ import annotations

import pytest

from voxflow.errors import InvalidRequestError
from voxflow.text.document import MAX_BREAK_S, SpeechDocument, TextRun, parse_input
from voxflow.text.normalize import normalize_text
from voxflow.text.say_as import expand_say_as, year_words
from voxflow.text.ssml import (
    BREAK_STRENGTH_S,
    MAX_DEPTH,
    PARAGRAPH_PAUSE_S,
    RATE_WORDS,
    parse_ssml,
)


def runs(ssml: str) -> list[tuple[str, float, float]]:
    """(text, rate, break_after_s) of each run."""
    return [(r.text, r.rate, r.break_after_s) for r in parse_ssml(ssml).runs]


def error(ssml: str) -> str:
    with pytest.raises(InvalidRequestError) as info:
        parse_ssml(ssml)
    err = info.value
    assert (err.status, err.param, err.code) == (400, "input", "invalid_ssml")
    return err.message


# ------------------------------------------------------------------------------------------
# The document
# ------------------------------------------------------------------------------------------


def test_hi_break_one_second_there_through_parse_input():
    doc = parse_input("<speak>Hi<break time='1s'/>there</speak>")
    assert doc == SpeechDocument(
        (TextRun("Hi", break_after_s=1.0), TextRun("there")), lead_silence_s=0.0, ssml=True
    )
    assert doc.text == "Hi there"


def test_leading_whitespace_before_speak_is_still_ssml():
    doc = parse_input("\n  <speak>Hello.</speak>\n")
    assert doc.ssml and [r.text for r in doc.runs] == ["Hello."]


def test_speak_attributes_of_the_w3c_example_are_accepted():
    ssml = (
        '<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        'xsi:schemaLocation="http://www.w3.org/2001/10/synthesis '
        'http://www.w3.org/TR/speech-synthesis11/synthesis.xsd" xml:lang="en-US">Hello.</speak>'
    )
    assert runs(ssml) == [("Hello.", 1.0, 0.0)]


def test_xml_declaration_with_another_encoding_reads_the_text_as_given():
    assert runs('<?xml version="1.0" encoding="ISO-8859-1"?><speak>café</speak>') == [
        ("café", 1.0, 0.0)
    ]


def test_empty_speak_is_one_empty_run():
    doc = parse_ssml("<speak></speak>")
    assert doc.runs == (TextRun(""),) and doc.lead_silence_s == 0.0


def test_newlines_and_tabs_inside_text_collapse_to_one_space_without_a_boundary():
    assert runs("<speak>Shopping list:\n\tApples\n   Pears</speak>") == [
        ("Shopping list: Apples Pears", 1.0, 0.0)
    ]


def test_escapes_character_references_cdata_and_comments():
    ssml = "<speak>Tom &amp; Jerry &#65;&#x42; <![CDATA[a < b]]><!-- not read --> end</speak>"
    assert runs(ssml) == [("Tom & Jerry AB a < b end", 1.0, 0.0)]


# ------------------------------------------------------------------------------------------
# break
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("time", "seconds"),
    [("500ms", 0.5), ("1s", 1.0), ("1.5s", 1.5), ("250 ms", 0.25), ("0s", 0.0), ("10s", 10.0)],
)
def test_break_time_values(time, seconds):
    assert runs(f"<speak>a<break time='{time}'/>b</speak>") == [
        ("a", 1.0, seconds),
        ("b", 1.0, 0.0),
    ]


@pytest.mark.parametrize(("strength", "seconds"), list(BREAK_STRENGTH_S.items()))
def test_break_strength_values(strength, seconds):
    assert runs(f"<speak>a<break strength='{strength}'/>b</speak>")[0] == ("a", 1.0, seconds)


def test_break_strength_table():
    assert BREAK_STRENGTH_S == {
        "none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 0.75, "x-strong": 1.25
    }  # fmt: skip


def test_break_without_attributes_is_medium_half_a_second():
    assert runs("<speak>a<break/>b</speak>")[0] == ("a", 1.0, 0.5)


def test_break_time_wins_over_strength():
    assert runs("<speak>a<break time='2s' strength='weak'/>b</speak>")[0] == ("a", 1.0, 2.0)


def test_consecutive_breaks_add_up():
    ssml = "<speak>a<break time='1s'/> <break time='500ms'/><break strength='weak'/>b</speak>"
    assert runs(ssml) == [("a", 1.0, 1.75), ("b", 1.0, 0.0)]


def test_breaks_at_the_very_start_are_lead_silence():
    doc = parse_ssml("<speak> <break time='1s'/><break time='200ms'/>Welcome back.</speak>")
    assert doc.lead_silence_s == pytest.approx(1.2)
    assert doc.runs == (TextRun("Welcome back."),)


def test_break_at_the_end_is_trailing_silence_of_the_last_run():
    assert runs("<speak>Done.<break time='2s'/></speak>") == [("Done.", 1.0, 2.0)]


def test_only_a_break_is_lead_silence_and_one_empty_run():
    doc = parse_ssml("<speak><break time='1s'/></speak>")
    assert doc.lead_silence_s == 1.0 and doc.runs == (TextRun(""),)


@pytest.mark.parametrize("time", ["5x", "1", "ms", "-1s", "1.5.2s", "", "1 h"])
def test_bad_break_time_is_a_400_naming_the_value_and_place(time):
    message = error(f"<speak>Hi\n  <break time='{time}'/></speak>")
    assert message == (
        f"SSML <break> at line 2, column 3: time '{time}' is not a duration like 500ms or 1.5s."
    )


def test_break_longer_than_the_cap_is_a_400():
    assert error("<speak><break time='10001ms'/></speak>") == (
        f"SSML <break> at line 1, column 8: time '10001ms' is longer than {MAX_BREAK_S:g} s."
    )


def test_breaks_in_a_row_adding_past_the_cap_are_a_400():
    assert error("<speak>a<break time='6s'/><break time='6s'/>b</speak>") == (
        "SSML <break> at line 1, column 27: breaks in a row add up to 12 s, longer than 10 s."
    )


def test_bad_break_strength_is_a_400():
    assert "strength 'loud' is not one of none, x-weak" in error(
        "<speak><break strength='loud'/></speak>"
    )


def test_text_inside_break_is_a_400():
    assert error("<speak><break>x</break></speak>") == (
        "SSML <break> at line 1, column 8: text inside an element that must be empty."
    )


# ------------------------------------------------------------------------------------------
# p and s
# ------------------------------------------------------------------------------------------


def test_each_sentence_is_its_own_run_without_extra_pause():
    assert runs("<speak><s>One two</s><s>three four</s></speak>") == [
        ("One two", 1.0, 0.0),
        ("three four", 1.0, 0.0),
    ]


def test_paragraphs_get_the_paragraph_pause_between_them_only():
    ssml = "<speak><p><s>First one.</s><s>First two.</s></p>\n<p>Second.</p></speak>"
    assert runs(ssml) == [
        ("First one.", 1.0, 0.0),
        ("First two.", 1.0, PARAGRAPH_PAUSE_S),
        ("Second.", 1.0, 0.0),
    ]
    assert PARAGRAPH_PAUSE_S == 0.4


def test_text_before_a_paragraph_ends_its_run_with_the_paragraph_pause():
    assert runs("<speak>Intro<p>Body</p>Outro</speak>") == [
        ("Intro", 1.0, PARAGRAPH_PAUSE_S),
        ("Body", 1.0, PARAGRAPH_PAUSE_S),
        ("Outro", 1.0, 0.0),
    ]


def test_paragraph_pause_is_not_lead_silence():
    doc = parse_ssml("<speak><p>Only.</p></speak>")
    assert doc.lead_silence_s == 0.0 and doc.runs == (TextRun("Only."),)


def test_a_break_between_paragraphs_replaces_the_paragraph_pause():
    assert runs("<speak><p>a</p><break time='2s'/><p>b</p></speak>")[0] == ("a", 1.0, 2.0)
    assert runs("<speak><p>a</p><break strength='none'/><p>b</p></speak>")[0] == ("a", 1.0, 0.0)


def test_sentence_inside_sentence_is_a_400():
    assert error("<speak><s>a<s>b</s></s></speak>") == (
        "SSML <s> at line 1, column 12: not allowed inside <s>, nor <p> inside <p>."
    )


def test_paragraph_inside_paragraph_is_a_400():
    assert "at line 1, column 11: not allowed inside <s>" in error("<speak><p><p>b</p></p></speak>")


# ------------------------------------------------------------------------------------------
# prosody
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "factor"),
    [("x-slow", 0.5), ("slow", 0.75), ("medium", 1.0), ("default", 1.0), ("fast", 1.25),
     ("x-fast", 1.75), ("80%", 0.8), ("150%", 1.5), ("1.5", 1.5), ("+20%", 1.2),
     ("-10%", 0.9), ("FAST", 1.25), ("25%", 0.25), ("4", 4.0)],
)  # fmt: skip
def test_prosody_rate_values(rate, factor):
    assert runs(f"<speak><prosody rate='{rate}'>Words.</prosody></speak>") == [
        ("Words.", pytest.approx(factor), 0.0)
    ]


def test_rate_words_table():
    assert RATE_WORDS == {
        "x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.75
    }  # fmt: skip


def test_nested_prosody_rates_multiply():
    ssml = "<speak>a <prosody rate='slow'>b <prosody rate='200%'>c</prosody> d</prosody> e</speak>"
    assert runs(ssml) == [
        ("a", 1.0, 0.0),
        ("b", 0.75, 0.0),
        ("c", 1.5, 0.0),
        ("d", 0.75, 0.0),
        ("e", 1.0, 0.0),
    ]


def test_prosody_product_may_leave_one_rates_range_the_engine_checks_it():
    ssml = "<speak><prosody rate='4'><prosody rate='4'>fast</prosody></prosody></speak>"
    assert runs(ssml) == [("fast", 16.0, 0.0)]


def test_prosody_of_the_same_rate_merges_with_its_neighbours():
    ssml = "<speak>a <prosody rate='100%'>b</prosody> <prosody>c</prosody> d</speak>"
    assert runs(ssml) == [("a b c d", 1.0, 0.0)]


def test_prosody_pitch_and_volume_are_accepted_and_ignored():
    ssml = "<speak><prosody pitch='+2st' volume='loud' range='x-high'>Hi.</prosody></speak>"
    assert runs(ssml) == [("Hi.", 1.0, 0.0)]


@pytest.mark.parametrize("rate", ["5", "4.01", "20%", "0", "-80%", "+400%"])
def test_prosody_rate_outside_a_quarter_to_four_is_a_400(rate):
    message = error(f"<speak><prosody rate='{rate}'>x</prosody></speak>")
    assert message.startswith(f"SSML <prosody> at line 1, column 8: rate '{rate}' is ")
    assert message.endswith("times the speed, outside 0.25 to 4.")


@pytest.mark.parametrize("rate", ["quick", "1.5x", "+1.5", "%", ""])
def test_prosody_rate_that_is_no_rate_is_a_400(rate):
    assert error(f"<speak><prosody rate='{rate}'>x</prosody></speak>").startswith(
        f"SSML <prosody> at line 1, column 8: rate '{rate}' is not one of x-slow"
    )


# ------------------------------------------------------------------------------------------
# say-as, sub, phoneme, emphasis, mark
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interpret_as", "fmt", "content", "words"),
    [
        ("characters", None, "ABC", "eh B C"),
        ("spell-out", None, "r2-d2", "R two dash D two"),
        ("characters", None, "IBM", "I B M"),
        ("cardinal", None, "1234", "one thousand two hundred and thirty-four"),
        ("cardinal", None, "1,000,000", "one million"),
        ("number", None, "-5", "minus five"),
        ("number", None, "3.5", "three point five"),
        ("ordinal", None, "3", "third"),
        ("ordinal", None, "21st", "twenty-first"),
        ("digits", None, "123", "one two three"),
        ("digits", None, "0 7", "zero seven"),
        ("date", None, "3/5/2024", "March fifth, twenty twenty-four"),
        ("date", "mdy", "12-25-1999", "December twenty-fifth, nineteen ninety-nine"),
        ("date", "dmy", "5.3.2005", "March fifth, two thousand five"),
        ("date", "ymd", "2024-02-29", "February twenty-ninth, twenty twenty-four"),
        ("date", "md", "7/4", "July fourth"),
        ("date", "dm", "4 7", "July fourth"),
        ("date", "ym", "1905/1", "January nineteen oh five"),
        ("date", "my", "10/1900", "October nineteen hundred"),
        ("date", "d", "1", "the first"),
        ("date", "m", "11", "November"),
        ("date", "y", "2010", "twenty ten"),
        ("date", "mdy", "1/2/05", "January second, oh five"),
        ("telephone", None, "555-1234", "five five five, one two three four"),
        (
            "telephone",
            None,
            "+1 (555) 010-9999",
            "plus one, five five five, zero one zero, nine nine nine nine",
        ),
    ],
)
def test_say_as_expansions(interpret_as, fmt, content, words):
    assert expand_say_as(interpret_as, content, fmt) == words
    fmt_attr = f" format='{fmt}'" if fmt else ""
    element = f"<say-as interpret-as='{interpret_as}'{fmt_attr}>{content}</say-as>"
    ssml = f"<speak>Say {element} now.</speak>"
    assert runs(ssml) == [(f"Say {words} now.", 1.0, 0.0)]


@pytest.mark.parametrize(
    ("year", "words"),
    [("1999", "nineteen ninety-nine"), ("2024", "twenty twenty-four"),
     ("2005", "two thousand five"), ("2000", "two thousand"), ("1066", "ten sixty-six"),
     ("1800", "eighteen hundred"), ("1001", "one thousand one"),
     ("476", "four hundred and seventy-six")],
)  # fmt: skip
def test_years_read_in_pairs(year, words):
    assert year_words(year) == words


def test_say_as_words_survive_english_normalization():
    for words in (
        "eh B C",
        "five five five, one two three four",
        "March fifth, twenty twenty-four",
    ):
        assert normalize_text(words) == words


@pytest.mark.parametrize(
    ("interpret_as", "fmt", "content", "why"),
    [
        ("cardinal", None, "12a", "'12a' is not a number"),
        ("number", None, "one", "'one' is not a number"),
        ("ordinal", None, "third", "'third' is not an ordinal"),
        ("digits", None, "12-3", "'12-3' is not a string of digits 0-9"),
        ("date", None, "2/30/2024", "'2/30/2024' has day 30, not 1 to 29"),
        ("date", None, "2/29/2023", "'2/29/2023' has day 29, not 1 to 28"),
        ("date", None, "13/1/2024", "'13/1/2024' has month 13, not 1 to 12"),
        ("date", None, "March 5", "'March 5' is not a date of format 'mdy'"),
        ("date", "dmy", "5/3", "'5/3' is not a date of format 'dmy'"),
        ("date", "qq", "5/3", "date format 'qq' is not one of mdy"),
        ("telephone", None, "555-CALL", "'555-CALL' is not a telephone number"),
        ("characters", None, "!?", "'!?' has no letters or digits to spell out"),
        ("cardinal", None, " ", "the element is empty"),
    ],
)
def test_say_as_content_that_does_not_fit_is_a_400(interpret_as, fmt, content, why):
    fmt_attr = f" format='{fmt}'" if fmt else ""
    message = error(
        f"<speak>\nOn <say-as interpret-as='{interpret_as}'{fmt_attr}>{content}</say-as></speak>"
    )
    assert message.startswith(
        f'SSML <say-as> at line 2, column 4: interpret-as="{interpret_as}": {why}'
    )


def test_say_as_unknown_interpretation_is_a_400_at_its_start_tag():
    assert error("<speak><say-as interpret-as='currency'>$5</say-as></speak>").startswith(
        "SSML <say-as> at line 1, column 8: interpret-as 'currency' is not supported "
        "(supported: characters, spell-out"
    )


def test_sub_alias_replaces_its_content():
    ssml = "<speak>Visit the <sub alias='World Wide Web'>WWW</sub> today.</speak>"
    assert runs(ssml) == [("Visit the World Wide Web today.", 1.0, 0.0)]


def test_sub_without_alias_is_a_400():
    assert error("<speak><sub>WWW</sub></speak>") == (
        "SSML <sub> at line 1, column 8: missing attribute 'alias'."
    )


def test_phoneme_is_a_run_of_its_own_with_its_ipa():
    doc = parse_ssml(
        "<speak>I say <phoneme alphabet='ipa' ph='təˈmɑːtoʊ'>tomato</phoneme> today.</speak>"
    )
    assert doc.runs == (
        TextRun("I say"),
        TextRun("tomato", phonemes="təˈmɑːtoʊ"),
        TextRun("today."),
    )


def test_phoneme_without_alphabet_is_ipa_and_takes_the_prosody_rate():
    doc = parse_ssml(
        "<speak><prosody rate='slow'><phoneme ph='pɪˈkɑːn'>pecan</phoneme></prosody></speak>"
    )
    assert doc.runs == (TextRun("pecan", rate=0.75, phonemes="pɪˈkɑːn"),)


def test_phoneme_after_a_break_keeps_the_break_before_it():
    assert runs("<speak>a<break time='1s'/><phoneme ph='biː'>b</phoneme></speak>") == [
        ("a", 1.0, 1.0),
        ("b", 1.0, 0.0),
    ]


def test_phoneme_in_x_sampa_is_a_400():
    assert error("<speak><phoneme alphabet='x-sampa' ph='t@'>to</phoneme></speak>") == (
        "SSML <phoneme> at line 1, column 8: alphabet 'x-sampa' is not supported (only ipa)."
    )


def test_phoneme_with_empty_ph_is_a_400():
    assert error("<speak><phoneme ph=' '>x</phoneme></speak>") == (
        "SSML <phoneme> at line 1, column 8: empty 'ph'."
    )


def test_emphasis_content_is_spoken_and_mark_is_nothing():
    ssml = "<speak>This is <emphasis level='strong'>very</emphasis> good<mark name='m1'/>.</speak>"
    assert runs(ssml) == [("This is very good.", 1.0, 0.0)]


# ------------------------------------------------------------------------------------------
# Refusals: unknown and unsupported tags and attributes, nesting, root, depth
# ------------------------------------------------------------------------------------------


def test_unknown_tag_is_a_400_naming_it_and_its_line_and_column():
    assert error("<speak>\n  Hello <foo/>\n</speak>") == (
        "SSML <foo> at line 2, column 9: unknown tag (supported: speak, p, s, break, prosody, "
        "say-as, sub, phoneme, emphasis, mark)."
    )


def test_namespaced_vendor_tag_is_an_unknown_tag():
    assert error("<speak><amazon:effect name='whispered'>x</amazon:effect></speak>").startswith(
        "SSML <amazon:effect> at line 1, column 8: unknown tag"
    )


@pytest.mark.parametrize("tag", ["voice", "audio", "lang"])
def test_voice_audio_and_lang_are_not_supported(tag):
    assert error(f"<speak>a\n<{tag}>b</{tag}></speak>") == (
        f"SSML <{tag}> at line 2, column 1: not supported (docs/api.md lists the SSML that is)."
    )


def test_unknown_attribute_is_a_400_listing_the_allowed_ones():
    assert error("<speak><break time='1s' duration='2s'/></speak>") == (
        "SSML <break> at line 1, column 8: unknown attribute 'duration' (allowed: strength, time)."
    )


def test_tag_inside_say_as_is_a_400():
    assert error("<speak><say-as interpret-as='digits'>1<break/>2</say-as></speak>") == (
        "SSML <break> at line 1, column 39: not allowed inside <say-as>."
    )


def test_root_other_than_speak_is_a_400():
    assert error("<speaker>x</speaker>") == (
        "SSML <speaker> at line 1, column 1: not allowed as the root (SSML is one <speak> element)."
    )


def test_speak_inside_speak_is_a_400():
    assert error("<speak><speak>x</speak></speak>") == (
        "SSML <speak> at line 1, column 8: not allowed inside <speak>."
    )


def test_nesting_deeper_than_the_limit_is_a_400():
    depth = MAX_DEPTH  # speak + MAX_DEPTH - 1 emphasis is the deepest accepted
    ok = "<speak>" + "<emphasis>" * (depth - 1) + "x" + "</emphasis>" * (depth - 1) + "</speak>"
    assert runs(ok) == [("x", 1.0, 0.0)]
    deep = "<speak>" + "<emphasis>" * depth + "x" + "</emphasis>" * depth + "</speak>"
    column = len("<speak>" + "<emphasis>" * (depth - 1)) + 1
    assert error(deep) == (
        f"SSML <emphasis> at line 1, column {column}: nested deeper than {MAX_DEPTH} elements."
    )


# ------------------------------------------------------------------------------------------
# Malformed XML and entities
# ------------------------------------------------------------------------------------------


def test_mismatched_tag_names_line_and_column():
    assert error("<speak>\n  Hi <break time='1s'/></spea>") == (
        "SSML is not well-formed: mismatched tag at line 2, column 26."
    )


def test_unclosed_speak_is_a_400():
    assert (
        error("<speak>Hello") == "SSML is not well-formed: no element found at line 1, column 13."
    )


def test_text_after_speak_is_a_400():
    assert error("<speak>a</speak> more") == (
        "SSML is not well-formed: junk after document element (text or tags after </speak>) "
        "at line 1, column 18."
    )


def test_trailing_whitespace_after_speak_is_fine():
    assert runs("<speak>a</speak>\n\n  ") == [("a", 1.0, 0.0)]


def test_unescaped_ampersand_is_a_400():
    # expat points just past the "&" (column 12), at the character that makes it no reference.
    assert error("<speak>Tom & Jerry</speak>") == (
        "SSML is not well-formed: not well-formed (invalid token) at line 1, column 13."
    )


def test_lone_surrogate_is_a_400_not_a_crash():
    assert error("<speak>a\ud800b</speak>") == (
        "SSML is not well-formed: not well-formed (invalid token) at line 1, column 9."
    )


def test_undefined_entity_is_a_400():
    assert error("<speak>&lol;</speak>") == (
        "SSML is not well-formed: undefined entity at line 1, column 8."
    )


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
        for i in range(1, 10)
    )
    + "]>\n<speak>&lol9;</speak>"
)


def test_billion_laughs_is_refused_before_any_entity_is_expanded():
    message = error(BILLION_LAUGHS)
    assert message.startswith(
        "SSML may not contain a DOCTYPE, entity declarations or external references at line 2,"
    )


def test_external_entity_is_refused():
    ssml = '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>'
    assert error(ssml).startswith("SSML may not contain a DOCTYPE")


def test_doctype_with_an_external_dtd_is_refused():
    ssml = '<!DOCTYPE speak SYSTEM "http://example.invalid/ssml.dtd"><speak>a</speak>'
    assert error(ssml).startswith("SSML may not contain a DOCTYPE")


def test_doctype_inside_speak_is_malformed_xml():
    assert error('<speak><!DOCTYPE x [<!ENTITY a "b">]>&a;</speak>') == (
        "SSML is not well-formed: not well-formed (invalid token) at line 1, column 10."
    )
