"""Pronunciation lexicons through the real server (issue 44): saved, listed, read, deleted,
applied to speech with the joe voice, and refused in the OpenAI error shape."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from conftest import start_server

from voxflow.eval.normalize import normalize_for_wer

pytestmark = pytest.mark.integration

RATE = 22050
TABLE = "tˈeɪbəl"  # espeak-ng's IPA for "table"
ENTRIES = {"entries": [{"word": "Zorbleck", "phonemes": TABLE},
                       {"word": "colour", "respelling": "purple"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = start_server({"server.lexicons_dir": str(tmp_path_factory.mktemp("lexicons"))})
    yield live
    live.stop()


def speak(url: str, text: str, **extra) -> httpx.Response:
    body = {"model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
            "sample_rate": "native", "seed": 7, **extra}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def put(url: str, name: str, body, content_type: str = "application/json") -> httpx.Response:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return httpx.put(f"{url}/v1/audio/lexicons/{name}", content=data,
                     headers={"content-type": content_type}, timeout=30)


def error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_put_get_list_delete(server):
    url = server.url
    first = put(url, "house", ENTRIES)
    assert first.status_code == 200, first.text
    summary = first.json()
    assert summary["id"] == "house" and summary["entries"] == 2 and summary["created"] is True
    assert len(summary["version"]) == 64
    assert put(url, "house", ENTRIES).json()["created"] is False
    listed = httpx.get(f"{url}/v1/audio/lexicons").json()
    assert [d["id"] for d in listed["data"]] == ["house"]
    one = httpx.get(f"{url}/v1/audio/lexicons/house").json()
    assert one["entries"][0] == {"word": "Zorbleck", "phonemes": TABLE, "case_sensitive": False}
    gone = httpx.delete(f"{url}/v1/audio/lexicons/house")
    assert gone.json() == {"id": "house", "object": "lexicon", "deleted": True}
    missing = error(httpx.get(f"{url}/v1/audio/lexicons/house"), 404)
    assert missing["code"] == "lexicon_not_found"
    assert error(httpx.delete(f"{url}/v1/audio/lexicons/house"), 404)["param"] == "name"


def test_a_pls_file_is_saved_like_json(server):
    pls = ('<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" '
           f'alphabet="ipa" xml:lang="en-US"><lexeme><grapheme>Zorbleck</grapheme><phoneme>{TABLE}'
           '</phoneme></lexeme></lexicon>')
    saved = put(server.url, "pls1", pls.encode(), "application/pls+xml")
    assert saved.status_code == 200, saved.text
    assert saved.json()["language"] == "en-US" and saved.json()["entries"] == 1


@pytest.mark.parametrize(("name", "body", "content_type", "param", "code", "message"), [
    ("bad", {"entries": [{"word": "x", "phonemes": "a", "respelling": "b"}]},
     "application/json", "entries", "invalid_lexicon",
     "Lexicon entry entries[0] ('x'): give exactly one of 'phonemes' (IPA) and 'respelling', "
     "not both."),
    ("bad", "{not json", "application/json", "body", "invalid_body", "not valid JSON"),
    ("bad", "entries", "text/plain", "body", "invalid_body", "not 'text/plain'"),
    ("a..b", ENTRIES, "application/json", "name", "invalid_lexicon_name", "must not contain"),
    ("bad", "<lexicon alphabet='x-sampa'/>", "application/xml", "entries", "invalid_lexicon",
     "alphabet 'x-sampa' is not supported"),
])
def test_bad_lexicons_are_a_400_in_the_openai_shape(server, name, body, content_type, param,
                                                    code, message):
    refused = error(put(server.url, name, body, content_type), 400)
    assert (refused["param"], refused["code"]) == (param, code)
    assert message in refused["message"]
    assert httpx.get(f"{server.url}/v1/audio/lexicons/bad").status_code == 404


def test_an_unknown_lexicon_or_unsayable_phonemes_are_a_400(server):
    unknown = error(speak(server.url, "Hello.", lexicon="nope"), 400)
    assert (unknown["param"], unknown["code"]) == ("lexicon", "lexicon_not_found")
    assert unknown["message"] == "No lexicon 'nope'; GET /v1/audio/lexicons lists the saved ones."
    put(server.url, "clicks", {"entries": [{"word": "ok", "respelling": "okay"},
                                           {"word": "tsk", "phonemes": "жʘж"}]})
    bad = error(speak(server.url, "Hello.", lexicon="clicks"), 400)
    assert bad["code"] == "unsayable_phonemes"
    assert bad["message"].startswith("Lexicon 'clicks' entry entries[1] ('tsk'): phonemes "
                                     "'жʘж' use 'ж', which voice 'joe' of model 'piper'")


def test_a_phoneme_entry_speaks_as_ssml_phoneme_does_and_timestamps_name_the_word(server):
    put(server.url, "house", ENTRIES)
    plain = speak(server.url, "Put it on the Zorbleck.")
    lexed = speak(server.url, "Put it on the Zorbleck.", lexicon="house")
    ssml = speak(server.url, f'<speak>Put it on the <phoneme ph="{TABLE}">Zorbleck</phoneme>.'
                 "</speak>")
    assert lexed.status_code == 200 and lexed.content == ssml.content != plain.content
    none = speak(server.url, "Put it on the Zorbleck.", lexicon="")
    assert none.content == plain.content
    timed = httpx.post(f"{server.url}/v1/audio/speech/timestamps", timeout=120, json={
        "model": "piper", "voice": "joe", "input": "Put it on the Zorbleck.", "seed": 7,
        "response_format": "wav", "lexicon": "house"}).json()
    assert [(w["word"], w["text_start"], w["text_end"]) for w in timed["words"]][-2:] == [
        ("the", 10, 13), ("Zorbleck", 14, 22)]
    respelled = httpx.post(f"{server.url}/v1/audio/speech/timestamps", timeout=120, json={
        "model": "piper", "voice": "joe", "input": "The colour is red.", "seed": 7,
        "response_format": "wav", "lexicon": "house"}).json()
    assert [w["word"] for w in respelled["words"]] == ["The", "colour", "is", "red"]


@pytest.mark.slow  # Whisper
def test_whisper_hears_the_entries(server, transcribe):
    put(server.url, "house", ENTRIES)
    response = speak(server.url, "Put the book on the Zorbleck. My favourite colour is red.",
                     lexicon="house")
    assert response.status_code == 200, response.text
    audio = np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767.0
    words = normalize_for_wer(transcribe(audio, RATE))
    assert "on the table" in words
    assert "purple" in words and "colour" not in words and "color" not in words


def test_a_configured_default_applies_and_cannot_be_deleted(tmp_path):
    folder = tmp_path / "lexicons"
    folder.mkdir()
    (folder / "house.json").write_text(json.dumps(ENTRIES), encoding="utf-8")
    live = start_server({"server.lexicons_dir": str(folder), "models.0.lexicon": "house"})
    try:
        by_default = speak(live.url, "Put it on the Zorbleck.")
        named = speak(live.url, "Put it on the Zorbleck.", lexicon="house")
        without = speak(live.url, "Put it on the Zorbleck.", lexicon="")
        assert by_default.content == named.content != without.content
        refused = error(httpx.delete(f"{live.url}/v1/audio/lexicons/house"), 403)
        assert refused["code"] == "lexicon_in_use"
    finally:
        live.stop()


def test_a_default_naming_no_saved_lexicon_stops_the_start(tmp_path):
    from voxflow.config import ConfigError, load_settings
    from voxflow.engine.engine import Engine

    settings = load_settings(None, {"server.lexicons_dir": str(tmp_path),
                                    "models.0.lexicon": "house"})
    with pytest.raises(ConfigError, match=r"models\[0\].lexicon: no saved lexicon 'house'"):
        Engine(settings)
