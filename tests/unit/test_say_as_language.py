"""SSML <say-as> in the language the request is read in (QA of issue 7): in a Japanese
request `<say-as interpret-as="cardinal">1234</say-as>` was spelled out as English words."""

from __future__ import annotations

import pytest

from voxflow.models.kokoro.frontend import KokoroFrontend
from voxflow.models.kokoro.loader import load_vocab
from voxflow.text.say_as import SayAsError, expand_say_as
from voxflow.text.ssml import parse_ssml

JAPANESE = [
    ("cardinal", None, "1234", "千二百三十四"),
    ("number", None, "-1,234.5", "マイナス千二百三十四点五"),
    ("cardinal", None, "0", "零"),
    ("ordinal", None, "3", "三番目"),
    ("ordinal", None, "21st", "二十一番目"),
    ("digits", None, "1234", "1 2 3 4"),
    ("telephone", None, "555-1234", "5 5 5、1 2 3 4"),
    ("telephone", None, "+1 (555) 010-9999", "プラス 1、5 5 5、0 1 0、9 9 9 9"),
    ("characters", None, "ABC", "エー ビー シー"),
    ("spell-out", None, "R2-D2", "アール 2 ハイフン ディー 2"),
    ("characters", None, "x.y@z", "エックス ドット ワイ アット ゼット"),
    ("characters", None, "東京", "東 京"),
    ("date", None, "3/5/2024", "二千二十四年三月五日"),
    ("date", "dmy", "5/3/2024", "二千二十四年三月五日"),
    ("date", "ymd", "2024-03-05", "二千二十四年三月五日"),
    ("date", "md", "12/24", "十二月二十四日"),
    ("date", "my", "3/2024", "二千二十四年三月"),
    ("date", "y", "24", "二十四年"),
]


@pytest.mark.parametrize(("interpret_as", "fmt", "content", "words"), JAPANESE)
def test_say_as_in_japanese(interpret_as, fmt, content, words):
    assert expand_say_as(interpret_as, content, fmt, "ja") == words
    assert expand_say_as(interpret_as, content, fmt, "ja-JP") == words


@pytest.mark.parametrize(
    ("interpret_as", "content", "written"),
    [
        ("cardinal", "-1,234.5", "-1,234.5"),
        ("ordinal", "3rd", "3rd"),
        ("date", "3/5/2024", "3/5/2024"),
        ("digits", "1234", "1 2 3 4"),
        ("telephone", "+1 555-1234", "+1, 5 5 5, 1 2 3 4"),
        ("characters", "AB-1", "A B - 1"),
    ],
)
def test_say_as_in_a_language_without_its_own_rule_is_nearly_as_written(
    interpret_as, content, written
):
    assert expand_say_as(interpret_as, content, None, "fr") == written


def test_say_as_as_written_for_deciding_the_language():
    assert expand_say_as("telephone", " 555-1234 ", None, None) == "555-1234"
    assert expand_say_as("cardinal", "1234", None, "en-GB") == (
        "one thousand two hundred and thirty-four"
    )


@pytest.mark.parametrize("language", ["en", "ja", "fr", None])
def test_content_that_does_not_fit_is_refused_in_every_language(language):
    with pytest.raises(SayAsError, match="'12a' is not a number"):
        expand_say_as("cardinal", "12a", None, language)
    with pytest.raises(SayAsError, match="has month 13"):
        expand_say_as("date", "13/1/2024", None, language)


def test_ssml_spells_say_as_in_the_language_it_is_given():
    ssml = "<speak>電話は<say-as interpret-as='telephone'>555-1234</say-as>です。</speak>"
    assert parse_ssml(ssml, "ja").text == "電話は5 5 5、1 2 3 4です。"
    assert parse_ssml(ssml, None).text == "電話は555-1234です。"
    assert parse_ssml(ssml).text == "電話はfive five five, one two three fourです。"


@pytest.fixture(scope="module")
def frontend() -> KokoroFrontend:
    return KokoroFrontend(load_vocab())


@pytest.mark.parametrize(
    ("interpret_as", "fmt", "content", "phonemes"),
    [
        ("cardinal", None, "1234", "seɴ ɲi çakɯ saɲʥɨːjoɴ"),
        ("cardinal", None, "1234.5", "seɴ ɲi çakɯ saɲʥɨːjoɴ teɴ ɡo"),  # as written: ".5" lost
        ("telephone", None, "555-1234", "ɡo ɡo ɡo, iʨi ɲi saɴ joɴ"),
        ("characters", None, "ABC", "eː bʲiː siː"),  # "A B C" as written: nothing at all
        ("date", None, "3/5/2024", "ɲi seɴ ɲiʥɨːjo neɴ saŋɡaʦɨ iʦɨka"),
    ],
)
def test_kokoro_japanese_front_end_reads_the_japanese_forms(
    frontend, interpret_as, fmt, content, phonemes
):
    assert frontend.phonemize(expand_say_as(interpret_as, content, fmt, "ja"), "ja") == phonemes
