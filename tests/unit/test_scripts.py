"""Scripts a voice cannot read (issue 7, item 7): `今日は天気がいいです。` to the English voice
joe was 7.8 s of "Chinese letter ..."; now text mostly in a script the voice cannot read is a
400 naming the script, and a few foreign words inside readable text are dropped."""

from __future__ import annotations

import asyncio

import pytest
from fakes import register_fake_family

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import InvalidRequestError
from voxflow.text.document import SpeechDocument, TextRun, parse_plain
from voxflow.text.scripts import (
    check_document,
    count_letters,
    drop_unreadable,
    language_scripts,
    letter_scripts,
    readable_scripts,
)

ENGLISH = readable_scripts(("en-US",))
KOKORO = readable_scripts(("ja", "en-us", "en-gb"))  # Kokoro's voices speak all three
JOE = "voice 'joe' of model 'piper' (en-US)"
SERVED = {
    "piper/joe": ENGLISH,
    "kokoro/jf_alpha": KOKORO,
    "kokoro/jm_kumo": KOKORO,
}


def check(text: str, readable=ENGLISH, voice: str = JOE, voices=None):
    document, dropped = check_document(parse_plain(text), readable, voice, voices or SERVED)
    return document.text, dropped


@pytest.mark.parametrize(
    ("char", "scripts"),
    [
        ("a", {"Latn"}), ("é", {"Latn"}), ("ß", {"Latn"}),
        ("今", {"Hani"}), ("は", {"Hira"}), ("カ", {"Kana"}), ("ー", {"Hira", "Kana"}),
        ("Ж", {"Cyrl"}), ("α", {"Grek"}), ("ש", {"Hebr"}), ("ع", {"Arab"}),
        ("क", {"Deva"}), ("ก", {"Thai"}), ("한", {"Hang"}), ("ა", {"Geor"}), ("Ա", {"Armn"}),
        # not letters, or letters of no particular script: neutral
        ("1", set()), ("。", set()), ("€", set()), (" ", set()), ("\u0301", set()),
        ("\u093f", set()),  # Devanagari vowel sign i: a mark, part of its consonant's word
    ],
)
def test_script_of_letters_across_scripts(char, scripts):
    assert letter_scripts(char) == scripts


@pytest.mark.parametrize(
    ("tag", "scripts"),
    [
        ("en-US", {"Latn"}), ("en_GB", {"Latn"}), ("de", {"Latn"}), ("vi", {"Latn"}),
        ("ja", {"Hani", "Hira", "Kana"}), ("ko", {"Hang", "Hani"}),
        ("zh", {"Hani"}), ("zh-TW", {"Hani"}), ("cmn", {"Hani"}), ("yue", {"Hani"}),
        ("ru", {"Cyrl"}), ("uk", {"Cyrl"}), ("sr", {"Cyrl"}), ("sr-Latn", {"Latn"}),
        ("ar", {"Arab"}), ("fa", {"Arab"}), ("el", {"Grek"}), ("he", {"Hebr"}),
        ("hi", {"Deva"}), ("ne", {"Deva"}), ("th", {"Thai"}), ("ka", {"Geor"}),
        ("ml", {"Mlym"}), ("te", {"Telu"}),
    ],
)
def test_scripts_of_a_language_tag_from_cldr_likely_subtags(tag, scripts):
    assert language_scripts(tag) == scripts


@pytest.mark.parametrize("tag", ["xx", "und", "!!", ""])
def test_an_unknown_language_tag_reads_any_script(tag):
    assert language_scripts(tag) is None
    assert readable_scripts(("en-US", tag)) is None


def test_kokoro_voices_read_japanese_and_latin():
    assert KOKORO == {"Hani", "Hira", "Kana", "Latn"}


def test_japanese_sentence_is_han_and_hiragana():
    counts = count_letters("今日は天気がいいです。")
    assert counts.letters == 10
    assert counts.by_scripts == {frozenset({"Hani"}): 4, frozenset({"Hira"}): 6}
    assert counts.unreadable(ENGLISH) == {"Hiragana": 6, "Han": 4}
    assert counts.mostly_unreadable(ENGLISH)
    assert not counts.mostly_unreadable(KOKORO)


def test_japanese_sentence_to_the_english_voice_is_refused_naming_the_kokoro_voices():
    with pytest.raises(InvalidRequestError) as err:
        check("今日は天気がいいです。")
    assert err.value.param == "input" and err.value.code == "unsupported_script"
    assert err.value.message == (
        "input is mostly in Hiragana and Han scripts (10 of 10 letters), which voice 'joe' of "
        "model 'piper' (en-US) cannot read. Voices that read it: kokoro/jf_alpha, "
        "kokoro/jm_kumo."
    )


@pytest.mark.parametrize(
    ("text", "script", "letters"),
    [
        ("Привет, как дела?", "Cyrillic", 13),
        ("مرحبا بالعالم", "Arabic", 12),
        ("Καλημέρα κόσμε.", "Greek", 13),
        ("שלום עולם", "Hebrew", 8),
        ("नमस्ते दुनिया", "Devanagari", 7),
        ("สวัสดีครับ", "Thai", 7),
        ("안녕하세요, 반갑습니다.", "Hangul", 10),
        ("Բարեւ աշխարհ", "Armenian", 11),
    ],
)
def test_sentences_in_other_scripts_to_the_english_voice_are_refused(text, script, letters):
    with pytest.raises(InvalidRequestError) as err:
        check(text)
    assert err.value.code == "unsupported_script"
    assert err.value.message == (
        f"input is mostly in {script} script ({letters} of {letters} letters), which voice "
        f"'joe' of model 'piper' (en-US) cannot read. No served voice reads {script}."
    )


def test_korean_sentence_to_a_kokoro_voice_is_refused_and_a_korean_voice_is_named():
    voices = {**SERVED, "other/ko_voice": readable_scripts(("ko-KR",))}
    with pytest.raises(InvalidRequestError) as err:
        check("안녕하세요.", KOKORO, "voice 'jm_kumo' of model 'kokoro' (ja, en-us, en-gb)", voices)
    assert err.value.message.endswith("Voices that read it: other/ko_voice.")


@pytest.mark.parametrize(
    ("text", "spoken", "dropped"),
    [
        ("I love 寿司 a lot.", "I love a lot.", 2),
        ("He said привет to me.", "He said to me.", 6),
        ("寿司 is what I want.", "is what I want.", 2),
        ("The word is 한국 here.", "The word is here.", 2),
        ("Say it, or नमस्ते if you like.", "Say it, or if you like.", 4),
        ("Apples\n林檎\nPears", "Apples\n\nPears", 2),
    ],
)
def test_a_foreign_word_inside_english_is_dropped_and_counted(text, spoken, dropped):
    assert check(text) == (spoken, dropped)


@pytest.mark.parametrize(
    "text",
    [
        "The α particle is a helium nucleus.",  # a lone Greek letter: read by name, "alpha"
        "A resistor of 5 Ω in the circuit.",
        "Order a café au lait in Zürich or Kraków.",  # Latin with diacritics is Latin
        "Room 101, floor 3: €20.",
    ],
)
def test_english_with_a_lone_greek_letter_or_accents_is_unchanged(text):
    assert check(text) == (text, 0)


def test_half_or_fewer_foreign_letters_is_not_mostly():
    assert check("Hello мир") == ("Hello ", 3)  # 5 Latin, 3 Cyrillic
    with pytest.raises(InvalidRequestError):
        check("Hi мир")  # 2 Latin, 3 Cyrillic


def test_japanese_and_english_text_to_a_kokoro_voice_are_accepted_unchanged():
    texts = ("今日は天気がいいです。", "The weather is nice today.", "今日は iPhone を買った。")
    for text in texts:
        assert check(text, KOKORO, "voice 'jf_alpha' of model 'kokoro'") == (text, 0)


def test_a_voice_of_unknown_language_reads_anything():
    assert check("今日は天気がいいです。", None) == ("今日は天気がいいです。", 0)


def test_dropping_applies_to_each_run_and_keeps_its_properties():
    document = SpeechDocument(
        (TextRun("First 寿司 part.", rate=1.5, break_after_s=0.5), TextRun("Second part.")),
        lead_silence_s=0.2,
    )
    checked, dropped = check_document(document, ENGLISH, JOE, SERVED)
    assert dropped == 2
    assert checked.runs == (
        TextRun("First part.", rate=1.5, break_after_s=0.5), TextRun("Second part.")
    )
    assert checked.lead_silence_s == 0.2


def test_text_of_a_phoneme_run_is_not_checked():
    document = SpeechDocument((TextRun("Say"), TextRun("東京", phonemes="toːkjoː")))
    assert check_document(document, ENGLISH, JOE, SERVED) == (document, 0)


def test_drop_unreadable_keeps_marks_of_readable_letters():
    assert drop_unreadable("cafe\u0301 क\u093f", ENGLISH) == ("cafe\u0301 ", 1)


def test_engine_checks_scripts_at_validation_across_served_models(monkeypatch):
    register_fake_family(monkeypatch)
    settings = load_settings(None, {
        "engine.warmup": False,
        "models": [
            {"name": "fake", "family": "fake", "options": {}},  # en-US voices alice, bob
            {"name": "fake2", "family": "fake", "options": {"voices": ["carol"]}},
        ],
    })

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            with pytest.raises(InvalidRequestError) as err:
                engine.prepare(SpeechRequest("fake", "Привет, как дела?", "alice"))
            assert err.value.code == "unsupported_script"
            assert err.value.message == (
                "input is mostly in Cyrillic script (13 of 13 letters), which voice 'alice' of "
                "model 'fake' (en-US) cannot read. No served voice reads Cyrillic."
            )
            _, document = engine.prepare(SpeechRequest("fake2", "I love 寿司 a lot.", "carol"))
            assert document.text == "I love a lot." and document.dropped_letters == 2
            _, document = engine.prepare(SpeechRequest("fake", "The α particle.", "bob"))
            assert document.text == "The α particle." and document.dropped_letters == 0
        finally:
            engine.stop()

    asyncio.run(main())
