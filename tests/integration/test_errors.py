"""Bad input gets a 4xx in the OpenAI error shape naming the field; the server keeps serving."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.integration

GOOD = {"model": "piper", "voice": "joe", "input": "Hello there.", "response_format": "pcm"}


def assert_error(r: httpx.Response, status: int, param: str | None, needle: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param
    assert needle in body["error"]["message"], body["error"]["message"]


def still_healthy(url: str) -> None:
    r = httpx.post(f"{url}/v1/audio/speech", json=GOOD, timeout=60)
    assert r.status_code == 200 and len(r.content) > 1000


CASES = [
    # (name, body change, status, param, words the message must contain)
    ("string seed", {"seed": "42"}, 400, "seed", "seed"),
    ("negative seed", {"seed": -1}, 400, "seed", "seed"),
    ("numeric input", {"input": 12}, 400, "input", "input"),
    ("empty input", {"input": ""}, 400, "input", "empty"),
    ("whitespace input", {"input": " \n\t "}, 400, "input", "empty"),
    ("input over limit", {"input": "a" * 4097}, 400, "input", "4096"),
    ("unknown voice", {"voice": "nobody"}, 400, "voice", "nobody"),
    ("unknown model", {"model": "tts-9"}, 404, "model", "tts-9"),
    ("speed too low", {"speed": 0.1}, 400, "speed", "speed"),
    ("speed too high", {"speed": 4.5}, 400, "speed", "speed"),
    ("string speed", {"speed": "fast"}, 400, "speed", "speed"),
    ("unsupported format", {"response_format": "ogg"}, 400, "response_format", "response_format"),
    ("bad stream_format", {"stream_format": "ws"}, 400, "stream_format", "stream_format"),
    # Regression: a lone surrogate quoted back in the message could not be encoded -> 500.
    ("lone surrogate voice", {"voice": "\ud800"}, 400, "voice", "not a voice"),
    ("lone surrogate model", {"model": "\ud800"}, 404, "model", "does not exist"),
    ("voice id not a string", {"voice": {"id": 5}}, 400, "voice", '{"id": string}'),
    ("voice object extra key", {"voice": {"id": "joe", "x": 1}}, 400, "voice", '{"id": string}'),
]


@pytest.mark.parametrize("name,change,status,param,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_field(joe_server, name, change, status, param, needle):
    # json.dumps escapes non-ASCII, so a lone surrogate travels as the JSON escape "\ud800".
    content = json.dumps({**GOOD, **change}).encode()
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", content=content,
                   headers={"content-type": "application/json"}, timeout=60)
    assert_error(r, status, param, needle)
    still_healthy(joe_server.url)


def test_missing_field(joe_server):
    body = {k: v for k, v in GOOD.items() if k != "input"}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", json=body, timeout=60)
    assert_error(r, 400, "input", "input")


def test_malformed_json(joe_server):
    r = httpx.post(
        f"{joe_server.url}/v1/audio/speech", content=b'{"model": "piper", "input": ',
        headers={"content-type": "application/json"}, timeout=60,
    )
    assert_error(r, 400, None, "JSON")
    still_healthy(joe_server.url)


def test_voice_as_object_is_accepted(joe_server):
    body = {**GOOD, "voice": {"id": "joe"}}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", json=body, timeout=60)
    assert r.status_code == 200 and len(r.content) > 1000


@pytest.mark.parametrize("content", [b"[1, 2]", b'"text"', b"null"], ids=["list", "str", "null"])
def test_body_that_is_not_an_object(joe_server, content):
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", content=content,
                   headers={"content-type": "application/json"}, timeout=60)
    assert_error(r, 400, None, "JSON object")


def test_unknown_route_and_method(joe_server):
    assert_error(httpx.get(f"{joe_server.url}/v1/nothing"), 404, None, "No route GET /v1/nothing")
    r = httpx.get(f"{joe_server.url}/v1/audio/speech")
    assert_error(r, 405, None, "Method GET is not allowed")
    assert r.headers["allow"] == "POST"


def test_voices_of_unknown_model(joe_server):
    r = httpx.get(f"{joe_server.url}/v1/audio/voices", params={"model": "nope"})
    assert_error(r, 404, "model", "nope")


def test_saving_a_voice_on_a_model_that_cannot_clone_says_so_whatever_the_files(joe_server):
    # Before: a form without files was told to send audio or features, which could not help.
    url = f"{joe_server.url}/v1/audio/voices"
    fields = {"name": (None, "bob"), "model": (None, "piper")}  # multipart text fields
    for files in ({}, {"audio": ("a.wav", b"RIFF", "audio/wav")}):
        r = httpx.post(url, files={**fields, **files})
        assert_error(r, 400, "model", "'piper' (piper) does not support voice cloning")
        assert r.json()["error"]["code"] == "voice_cloning_unsupported"
    r = httpx.post(url, files={"model": (None, "piper")})  # what every upload needs: first
    assert_error(r, 400, "name", "Missing required parameter: 'name'")


# Issue 8, item 4: one error shape everywhere. (name, raw body or a change to GOOD, status,
# param, code). A raw body is bytes sent as is with Content-Type: application/json.
HUGE = "v" * 100_000
SHAPE_CASES = [
    # wrong types, one per field
    ("model not a string", {"model": 5}, 400, "model", "invalid_type"),
    ("input not a string", {"input": ["a"]}, 400, "input", "invalid_type"),
    ("input null", {"input": None}, 400, "input", "invalid_type"),
    ("voice a number", {"voice": 5}, 400, "voice", "invalid_type"),
    ("voice an array", {"voice": ["joe"]}, 400, "voice", "invalid_type"),
    ("voice object without id", {"voice": {"name": "joe"}}, 400, "voice", "invalid_type"),
    ("response_format a number", {"response_format": 5}, 400, "response_format", "invalid_value"),
    ("speed a string", {"speed": "fast"}, 400, "speed", "invalid_type"),
    ("speed a boolean", {"speed": True}, 400, "speed", "invalid_type"),
    ("stream_format a number", {"stream_format": 1}, 400, "stream_format", "invalid_value"),
    ("instructions a number", {"instructions": 1}, 400, "instructions", "invalid_type"),
    ("seed a string", {"seed": "42"}, 400, "seed", "invalid_type"),
    ("seed a float", {"seed": 1.5}, 400, "seed", "invalid_type"),
    ("stream a string", {"stream": "yes"}, 400, "stream", "invalid_type"),
    ("language a number", {"language": 5}, 400, "language", "invalid_type"),
    # missing fields
    ("missing model", {"_drop": "model"}, 400, "model", "missing_required_parameter"),
    ("missing input", {"_drop": "input"}, 400, "input", "missing_required_parameter"),
    ("missing voice", {"_drop": "voice"}, 400, "voice", "missing_required_parameter"),
    # unknown fields are served and named (test_ignored_fields.py), or refused by a setting
    # (tests/unit/test_ignored_fields.py)
    # bodies that are not a JSON object
    ("array body", b"[]", 400, None, "invalid_json"),
    ("string body", b'"hello"', 400, None, "invalid_json"),
    ("number body", b"1", 400, None, "invalid_json"),
    ("null body", b"null", 400, None, "invalid_json"),
    ("empty body", b"", 400, None, "invalid_json"),
    ("truncated JSON", b'{"model": "piper", "input": ', 400, None, "invalid_json"),
    ("not JSON", b"model=piper&input=hi", 400, None, "invalid_json"),
    # values
    ("speed too low", {"speed": 0.1}, 400, "speed", "speed_out_of_range"),
    ("speed zero", {"speed": 0}, 400, "speed", "speed_out_of_range"),
    ("speed too high", {"speed": 4.5}, 400, "speed", "speed_out_of_range"),
    ("empty input", {"input": ""}, 400, "input", "empty_input"),
    ("whitespace input", {"input": " \n\t "}, 400, "input", "empty_input"),
    ("input over limit", {"input": "a" * 4097}, 400, "input", "input_too_long"),
    ("huge voice", {"voice": HUGE}, 400, "voice", "voice_not_found"),
    ("huge voice id", {"voice": {"id": HUGE}}, 400, "voice", "voice_not_found"),
    ("huge model", {"model": HUGE}, 404, "model", "model_not_found"),
    ("unknown model", {"model": "tts-9"}, 404, "model", "model_not_found"),
    ("unknown voice", {"voice": "nobody"}, 400, "voice", "voice_not_found"),
    ("bad response_format", {"response_format": "ogg"}, 400, "response_format", "invalid_value"),
    ("huge response_format", {"response_format": HUGE}, 400, "response_format", "invalid_value"),
    ("bad stream_format", {"stream_format": "ws"}, 400, "stream_format", "invalid_value"),
    ("negative seed", {"seed": -1}, 400, "seed", "invalid_value"),
    ("huge seed", {"seed": int("9" * 4000)}, 400, "seed", "invalid_value"),
    ("empty language", {"language": ""}, 400, "language", "invalid_value"),
    ("huge language", {"language": HUGE}, 400, "language", "invalid_value"),
    ("unspoken language", {"language": "ja"}, 400, "language", "unsupported_language"),
    ("bad pause", {"input": "Hi [pause:1min] there."}, 400, "input", "invalid_pause"),
    ("bad SSML", {"input": "<speak><foo>hi</foo></speak>"}, 400, "input", "invalid_ssml"),
    ("huge SSML attribute", {"input": f'<speak><break time="{"9" * 4000}"/>hi</speak>'}, 400,
     "input", "invalid_ssml"),
]

# What the validation library says in its own words; none of it may reach a client.
PYDANTIC_WORDING = ("Input should", "Value error", "valid dictionary", "Field required",
                    "Extra inputs", "String should", "pydantic", "JSON decode error")


def documented_codes() -> set[str]:
    """The codes in the table of docs/api.md's "Errors" section."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = text.split("\n## Errors", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)`", section, re.M)) | {"http_error"}


@pytest.mark.parametrize("name,change,status,param,code", SHAPE_CASES,
                         ids=[c[0] for c in SHAPE_CASES])
def test_item4_every_bad_request_gets_one_error_shape(joe_server, name, change, status, param,
                                                      code):
    """Issue 8 item 4: every bad request gets a 4xx in the OpenAI shape with a documented,
    non-null code, the field as param, a short message in our words, no long echo."""
    if isinstance(change, bytes):
        content = change
    else:
        body = {**GOOD, **{k: v for k, v in change.items() if k != "_drop"}}
        body.pop(change.get("_drop", "\0"), None)
        content = json.dumps(body).encode()
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", content=content,
                   headers={"content-type": "application/json"}, timeout=60)
    assert 400 <= r.status_code < 500 and r.status_code == status, r.text[:500]
    error = r.json()["error"]
    assert set(r.json()) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code and code in documented_codes()
    assert error["param"] == param
    message = error["message"]
    assert not any(words in message for words in PYDANTIC_WORDING), message
    assert 10 < len(message) <= 300, message
    assert len(r.content) < 1000
    if "huge" in name:
        assert "…" in message and "characters)" in message, message


def test_item4_every_documented_code_is_in_the_table():
    """Issue 8 item 4: the codes the table test expects are all documented in docs/api.md."""
    codes = documented_codes()
    assert {c[4] for c in SHAPE_CASES} <= codes
    assert {"not_found", "method_not_allowed", "overloaded", "timeout", "server_error"} <= codes
