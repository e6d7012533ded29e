"""Pronunciation lexicons (issue 44): the JSON and PLS shapes, matching, the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voxflow.errors import InvalidRequestError
from voxflow.lexicons.apply import apply_lexicon
from voxflow.lexicons.lexicon import parse_lexicon
from voxflow.lexicons.pls import parse_pls
from voxflow.lexicons.store import LexiconFileError, LexiconStore
from voxflow.text.document import TextRun, parse_input


def lex(*entries: dict, **top):
    return parse_lexicon({"entries": list(entries), **top})


def refused(raw) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        parse_lexicon(raw)
    assert caught.value.status == 400 and caught.value.code == "invalid_lexicon"
    return caught.value


@pytest.mark.parametrize(("entry", "message"), [
    ({"word": "Zorbleck"}, "entries[1] ('Zorbleck'): give exactly one of 'phonemes' (IPA) and "
                           "'respelling', not neither."),
    ({"word": "Zorbleck", "phonemes": "tˈeɪbəl", "respelling": "table"},
     "entries[1] ('Zorbleck'): give exactly one of 'phonemes' (IPA) and 'respelling', not both."),
    ({"word": "Zorbleck", "phonemes": "ˈˌ"}, "entries[1] ('Zorbleck'): 'phonemes' 'ˈˌ' has no "
                                              "IPA letter"),
    ({"word": "Zorbleck", "phonemes": 5}, "entries[1] ('Zorbleck'): 'phonemes' must be a string."),
    ({"word": "", "respelling": "x"}, "entries[1] (''): 'word' is empty."),
    ({"phonemes": "a"}, "entries[1]: 'word' is missing."),
    ({"word": "--", "respelling": "dash"}, "'word' has no letter or digit to match."),
    ({"word": "SQL", "respelling": "sequel", "case": True},
     "entries[1] ('SQL'): unknown field(s) 'case'"),
    ({"word": "SQL", "respelling": "sequel", "case_sensitive": "yes"},
     "'case_sensitive' must be true or false."),
    ("SQL", "entries[1] must be an object"),
    ({"word": "ok", "respelling": "okay"}, "entries[1] ('ok'): the word is already entries[0]"),
])
def test_a_bad_entry_is_a_400_naming_it(entry, message):
    error = refused({"entries": [{"word": "OK", "respelling": "okay"}, entry]})
    assert message in error.message


def test_bad_lexicon_shapes_are_refused():
    assert "JSON object" in refused([]).message
    assert "non-empty list" in refused({"entries": []}).message
    assert "Unknown lexicon field(s) 'words'" in refused({"words": []}).message
    assert refused({"entries": [{"word": "a", "respelling": "b"}],
                    "language": "english!"}).param == "language"


def test_the_version_is_the_hash_of_what_it_says_not_of_how_it_was_sent():
    a = parse_lexicon(json.loads('{"entries": [{"word": "SQL", "respelling": "sequel"}]}'))
    b = parse_lexicon({"entries": [{"respelling": "sequel", "case_sensitive": False,
                                    "word": " SQL "}]})
    c = lex({"word": "SQL", "respelling": "squeal"})
    assert a.version == b.version != c.version
    assert len(a.version) == 64
    assert json.loads(a.canonical) == {"language": None, "entries": [
        {"word": "SQL", "respelling": "sequel", "case_sensitive": False}]}


def test_whole_words_and_case_rules():
    lexicon = lex({"word": "US", "respelling": "you ess", "case_sensitive": True},
                  {"word": "tomato", "respelling": "tomahto"},
                  {"word": "New York", "respelling": "Noo Yawk"})
    found = [(m[0], m[1], m[2].respelling) for m in lexicon.find(
        "us and US; Tomato, tomatoes, TOMATO; New York's")]
    assert found == [(7, 9, "you ess"), (11, 17, "tomahto"), (29, 35, "tomahto"),
                     (37, 45, "Noo Yawk")]


def test_respellings_rewrite_the_run_in_place():
    lexicon = lex({"word": "tomato", "respelling": "tomahto"})
    document = apply_lexicon(parse_input("One tomato.[pause:1s] Two Tomato!"), lexicon, True)
    assert document.runs == (TextRun("One tomahto.", break_after_s=1.0),
                             TextRun("Two tomahto!"))
    assert document.source == "One tomato.[pause:1s] Two Tomato!"


def test_a_phoneme_entry_becomes_a_phoneme_run_of_the_word_as_written():
    lexicon = lex({"word": "zorbleck", "phonemes": "tˈeɪbəl"})
    document = apply_lexicon(parse_input("Put it on the Zorbleck, please.[pause:0.5s]"),
                             lexicon, True)
    assert document.runs == (TextRun("Put it on the"),
                             TextRun("Zorbleck", phonemes="tˈeɪbəl"),
                             TextRun(", please.", break_after_s=0.5))
    # a family without phoneme input reads the word as written: nothing changes
    plain = parse_input("Put it on the Zorbleck.")
    assert apply_lexicon(plain, lexicon, False) is plain


def test_ssml_phoneme_runs_win_over_the_lexicon():
    lexicon = lex({"word": "read", "phonemes": "ɹˈɛd"})
    document = apply_lexicon(parse_input(
        '<speak><phoneme ph="ɹˈiːd">read</phoneme> it</speak>'), lexicon, True)
    assert document.runs == (TextRun("read", phonemes="ɹˈiːd"), TextRun("it"))


PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"
         alphabet="ipa" xml:lang="en-US">
  <lexeme><grapheme>Zorbleck</grapheme><grapheme>Zorblek</grapheme>
    <phoneme>tˈeɪbəl</phoneme><phoneme>tˈæbəl</phoneme></lexeme>
  <lexeme><grapheme>SQL</grapheme><alias>sequel</alias><example>SQL rocks</example></lexeme>
</lexicon>"""


def test_pls_files_read_as_case_sensitive_entries():
    lexicon = parse_pls(PLS.encode())
    assert lexicon.language == "en-US"
    assert [e.json() for e in lexicon.entries] == [
        {"word": "Zorbleck", "phonemes": "tˈeɪbəl", "case_sensitive": True},
        {"word": "Zorblek", "phonemes": "tˈeɪbəl", "case_sensitive": True},
        {"word": "SQL", "respelling": "sequel", "case_sensitive": True}]


@pytest.mark.parametrize(("text", "message"), [
    (PLS.replace('alphabet="ipa"', 'alphabet="x-sampa"'),
     "PLS <lexicon>: alphabet 'x-sampa' is not supported"),
    (PLS.replace("<alias>sequel</alias>", ""), "PLS <lexeme> 2 ('SQL'): no <phoneme> or <alias>"),
    ("<lexicon><lexeme>", "not well-formed XML"),
    ('<!DOCTYPE lexicon [<!ENTITY a "b">]><lexicon/>', "may not contain a DOCTYPE"),
    ("<speak/>", "root is <lexicon>, not <speak>"),
    (PLS.replace("<phoneme>tˈeɪbəl</phoneme>", "<phoneme>ˈ</phoneme>"),
     "entries[0] ('Zorbleck'): 'phonemes' 'ˈ' has no IPA letter"),
])
def test_bad_pls_files_are_a_400(text, message):
    with pytest.raises(InvalidRequestError) as caught:
        parse_pls(text.encode())
    assert message in caught.value.message


def test_the_store_persists_across_a_reopen_and_tells_its_listeners(tmp_path: Path):
    store = LexiconStore(tmp_path / "lex")
    heard: list[tuple[str, str | None]] = []
    store.add_listener(lambda name, version: heard.append((name, version)))
    first = lex({"word": "SQL", "respelling": "sequel"})
    second = lex({"word": "SQL", "respelling": "squeal"})
    assert store.put("tech", first) is True
    assert store.put("tech", second) is False
    assert store.put("other", first) is True
    assert sorted(p.name for p in (tmp_path / "lex").iterdir()) == ["other.json", "tech.json"]
    (tmp_path / "lex" / ".tech.abc.tmp").write_text("half")  # left by a crash
    again = LexiconStore(tmp_path / "lex")
    assert again.names() == ["other", "tech"]
    assert again.get("tech") == second and again.version("tech") == second.version
    assert not (tmp_path / "lex" / ".tech.abc.tmp").exists()
    assert store.delete("tech") is True and store.delete("tech") is False
    assert LexiconStore(tmp_path / "lex").names() == ["other"]
    assert heard == [("tech", first.version), ("tech", second.version),
                     ("other", first.version), ("tech", None)]


@pytest.mark.parametrize("name", ["../x", ".hidden", "a/b", "x.json", "", "a" * 65, "é"])
def test_the_store_refuses_names_that_are_not_voice_names(tmp_path: Path, name: str):
    with pytest.raises(ValueError, match="bad lexicon name"):
        LexiconStore(tmp_path).put(name, lex({"word": "a", "respelling": "b"}))
    assert list(tmp_path.iterdir()) == []


def test_a_bad_file_in_the_folder_fails_the_start_naming_it(tmp_path: Path):
    (tmp_path / "broken.json").write_text('{"entries": [{"word": "x"}]}')
    with pytest.raises(LexiconFileError, match=r"broken.json: Lexicon entry entries\[0\] \('x'\)"):
        LexiconStore(tmp_path)


def test_phoneme_gaps_read_the_kokoro_vocabulary():
    from voxflow.models.base import missing_symbols
    from voxflow.models.kokoro.loader import load_vocab

    vocab = load_vocab()
    assert missing_symbols("tˈeɪbəl ðə", vocab) == ""
    assert missing_symbols("жaжq", vocab) == "ж"
