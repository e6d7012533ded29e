"""Which language a request is read in (QA of issue 7): decided once, at validation, from the
majority of the letters as written, among the voice's languages, unless `language` names one;
then the script check and SSML say-as follow that language.

`I love 寿司 for dinner.` to a Kokoro voice was read as Japanese ("Rubble's the chiffordina")
because any kanji made the front end pick Japanese."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeFamily, FakeSettings

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import InvalidRequestError
from voxflow.models import registry
from voxflow.text.document import parse_plain
from voxflow.text.language import choose_language
from voxflow.text.scripts import check_document, count_letters, readable_scripts
from voxflow.text.ssml import parse_ssml

KOKORO = ("ja", "en-us", "en-gb")  # what a Kokoro voice speaks, its own first


class BilingualFamily(FakeFamily):
    """The fake family with Kokoro's languages: voices of "ja" that also speak English, and
    Latin words kept inside Japanese."""

    family = "bilingual"

    def languages(self, voice_id: str) -> tuple[str, ...]:
        return KOKORO

    def kept_scripts(self, voice_id: str, language: str) -> frozenset[str]:
        return frozenset({"Latn"}) if language == "ja" else frozenset()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I love 寿司 for dinner.", "en-us"),  # 13 Latin letters, 2 kanji
        ("We went to Tokyo and ate ラーメン every single day of the trip.", "en-us"),
        ("今日はAppleの発表会です。", "ja"),  # 9 Japanese letters, 5 Latin
        ("今日は iPhone を買った。", "ja"),
        # 15 Latin letters and 10 Japanese ones: a kana or kanji weighs two Latin letters
        ("Appleの新しいMacBook Proが発表された", "ja"),
        ("こんにちは。", "ja"),
        ("Good morning.", "en-us"),  # both English tags read Latin: the first listed wins
        ("12:30, 1,000円.", "ja"),  # no letters: the voice's own
        ("안녕하세요", "ja"),  # no language of the voice reads it: the voice's own
    ],
)
def test_majority_of_letters_chooses_among_a_kokoro_voices_languages(text, expected):
    assert choose_language(text, KOKORO) == expected


def test_a_tie_and_a_shared_script_go_to_the_voices_own_language():
    assert choose_language("Good morning.", ("en-gb", "en-us", "ja")) == "en-gb"
    assert choose_language("ab 寿", ("ja", "en-us")) == "ja"  # 2 Latin, 1 kanji weighing 2
    assert choose_language("ab 寿", ("en-us", "ja")) == "en-us"


def test_a_tag_of_unknown_script_scores_nothing_and_no_language_is_an_error():
    assert choose_language("Hello", ("xx", "en-us")) == "en-us"
    with pytest.raises(ValueError):
        choose_language("Hello", ())


@pytest.fixture
def bilingual() -> BilingualFamily:
    return BilingualFamily("bi", FakeSettings(voices=("alice",)))


def test_family_reads_the_requested_language_else_the_majority(bilingual):
    assert bilingual.resolve_language("alice", "en", "今日は天気がいいです。") == "en-us"
    assert bilingual.resolve_language("alice", "EN_gb", "Hello") == "en-gb"
    assert bilingual.resolve_language("alice", "ja-JP", "Hello") == "ja"
    assert bilingual.resolve_language("alice", None, "I love 寿司 for dinner.") == "en-us"
    assert bilingual.resolve_language("alice", None, "今日は晴れ。") == "ja"


def test_family_of_one_language_always_reads_its_own():
    family = FakeFamily("fake", FakeSettings(voices=("carol",)))
    assert family.resolve_language("carol", None, "今日は天気がいいです。") == "en-US"
    assert family.resolve_language("carol", "en", "Hello") == "en-US"
    with pytest.raises(InvalidRequestError) as err:
        family.resolve_language("carol", "fr", "Bonjour")
    assert (err.value.param, err.value.code) == ("language", "unsupported_language")
    assert err.value.message == (
        "Voice 'carol' of model 'fake' does not speak language 'fr'; it speaks: en-US."
    )


@pytest.fixture
def engine(monkeypatch):
    """Model "bi" (voices alice, bob: ja + English, like Kokoro) and "fake" (carol: en-US)."""
    monkeypatch.setitem(
        registry._FAMILIES, "bilingual", ("test_language_resolve:BilingualFamily",
                                          "fakes:FakeSettings")
    )
    monkeypatch.setitem(registry._FAMILIES, "fake", ("fakes:FakeFamily", "fakes:FakeSettings"))
    settings = load_settings(None, {
        "engine.warmup": False,
        "models": [
            {"name": "bi", "family": "bilingual", "options": {"voices": ["alice", "bob"]}},
            {"name": "fake", "family": "fake", "options": {"voices": ["carol"]}},
        ],
    })  # fmt: skip
    engine = Engine(settings)
    asyncio.run(engine.start())
    yield engine
    engine.stop()


def prepare(engine, text, voice="alice", model="bi", language=None):
    return engine.prepare(SpeechRequest(model, text, voice, language=language))[1]


def test_english_with_one_japanese_word_is_english_and_the_word_is_dropped(engine):
    document = prepare(engine, "I love 寿司 for dinner.")
    assert (document.language, document.text, document.dropped_letters) == (
        "en-us", "I love for dinner.", 2
    )
    document = prepare(engine, "We went to Tokyo and ate ラーメン every single day of the trip.")
    assert document.language == "en-us" and document.dropped_letters == 4
    assert document.text == "We went to Tokyo and ate every single day of the trip."


@pytest.mark.parametrize(
    "text",
    [
        "今日はAppleの発表会です。",
        "今日は iPhone を買った。",
        "Appleの新しいMacBook Proが発表された",
    ],
)
def test_japanese_with_a_few_english_words_stays_japanese_and_keeps_them(engine, text):
    document = prepare(engine, text)
    assert (document.language, document.text, document.dropped_letters) == ("ja", text, 0)


def test_the_requested_language_wins_and_the_check_follows_it(engine):
    # In English the Japanese letters are the foreign ones: 9 of 14.
    with pytest.raises(InvalidRequestError) as err:
        prepare(engine, "今日はAppleの発表会です。", language="en")
    assert err.value.message.startswith("input is mostly in Han and Hiragana scripts (9 of 14 ")
    # In Japanese, Latin words are read (kept), other scripts dropped.
    document = prepare(engine, "今日は iPhone とпривет を買った。", language="ja")
    assert (document.language, document.text, document.dropped_letters) == (
        "ja", "今日は iPhone と を買った。", 6
    )


def test_latin_text_with_language_ja_names_the_voices_english_not_the_voice_itself(engine):
    ssml = (
        '<speak>Call <say-as interpret-as="telephone">555-1234</say-as> today.</speak>'
    )
    with pytest.raises(InvalidRequestError) as err:
        prepare(engine, ssml, language="ja")
    assert err.value.code == "unsupported_script"
    # 9 letters as written: the say-as spelled out in English would be 36.
    assert err.value.message == (
        "input is mostly in Latin script (9 of 9 letters), which voice 'alice' of model 'bi' "
        "(ja) cannot read. Voice 'alice' reads Latin script with language 'en-us'; drop or "
        "change `language`. Voices that read it: bi/bob, fake/carol."
    )


def test_japanese_text_with_language_en_names_the_voices_japanese(engine):
    with pytest.raises(InvalidRequestError) as err:
        prepare(engine, "今日は天気がいいです。", language="en-us")
    assert err.value.message == (
        "input is mostly in Hiragana and Han scripts (10 of 10 letters), which voice 'alice' of "
        "model 'bi' (en-us) cannot read. Voice 'alice' reads Hiragana and Han scripts with "
        "language 'ja'; drop or change `language`. Voices that read it: bi/bob."
    )


def test_an_english_voice_refusing_japanese_still_lists_the_other_voices(engine):
    with pytest.raises(InvalidRequestError) as err:
        prepare(engine, "今日は天気がいいです。", voice="carol", model="fake")
    assert err.value.message == (
        "input is mostly in Hiragana and Han scripts (10 of 10 letters), which voice 'carol' "
        "of model 'fake' (en-US) cannot read. Voices that read it: bi/alice, bi/bob."
    )


def test_say_as_is_spelled_out_in_the_language_the_text_is_read_in(engine):
    ja = prepare(engine, '<speak>電話は<say-as interpret-as="cardinal">1234</say-as>です。</speak>')
    assert (ja.language, ja.text) == ("ja", "電話は千二百三十四です。")
    en = prepare(engine, '<speak>Call <say-as interpret-as="cardinal">1234</say-as> now.</speak>')
    assert (en.language, en.text) == ("en-us", "Call one thousand two hundred and thirty-four now.")
    date = prepare(
        engine, '<speak>今日は<say-as interpret-as="date">3/5/2024</say-as>です。</speak>'
    )
    assert date.text == "今日は二千二十四年三月五日です。"


def test_the_language_is_decided_before_say_as_is_spelled_out(engine):
    # Spelled out in English first, the 43 Latin letters of "one million two hundred ..."
    # would outweigh the two kanji and make the text English.
    document = prepare(
        engine, '<speak>東京 <say-as interpret-as="cardinal">1234567</say-as></speak>'
    )
    assert (document.language, document.text) == ("ja", "東京 百二十三万四千五百六十七")


def test_requested_english_spells_say_as_in_english_for_a_japanese_voice(engine):
    document = prepare(
        engine, '<speak>Dial <say-as interpret-as="digits">42</say-as>.</speak>', language="en"
    )
    assert (document.language, document.text) == ("en-us", "Dial four two.")


# ---- the script check in the resolved language ------------------------------------------------

ENGLISH = readable_scripts(("en-us",))
JAPANESE = readable_scripts(("ja",))


def test_kept_scripts_count_against_the_language_but_are_not_dropped():
    document = parse_plain("今日は iPhone と Кремль を見た。")
    checked, dropped = check_document(
        document, JAPANESE, "voice 'v' (ja)", {}, kept=frozenset({"Latn"})
    )
    assert (checked.text, dropped) == ("今日は iPhone と を見た。", 6)
    with pytest.raises(InvalidRequestError):  # mostly Latin is still refused in Japanese
        check_document(parse_plain("Call me today."), JAPANESE, "v", {}, kept=frozenset({"Latn"}))


def test_letters_are_counted_as_written_and_dropped_as_read():
    written = parse_ssml("<speak>寿司 <say-as interpret-as='digits'>12</say-as> ok</speak>", None)
    read = parse_ssml("<speak>寿司 <say-as interpret-as='digits'>12</say-as> ok</speak>")
    assert (written.text, read.text) == ("寿司 12 ok", "寿司 one two ok")
    # As written: 2 kanji weighing 4 against 2 Latin letters: mostly unreadable in English.
    with pytest.raises(InvalidRequestError) as err:
        check_document(read, ENGLISH, "v", {}, written=written)
    assert err.value.message.startswith(
        "input is mostly in Han script (2 of 4 letters; a Han, Hiragana or Katakana letter "
        "counts as 2), which v cannot read."
    )


def test_a_few_kanji_among_english_weigh_two_letters_each():
    counts = count_letters("I ate 寿司 and 天ぷら")  # 7 Latin, 5 Japanese letters
    assert (counts.letters, counts.weight(), counts.weight(ENGLISH)) == (12, 17, 7)
    assert counts.mostly_unreadable(ENGLISH) and not counts.mostly_unreadable(JAPANESE)
