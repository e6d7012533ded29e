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
    ("unknown field", {"temperature": 0.3}, 400, "temperature", "temperature"),
    ("only emoji", {"input": "🙂🙂 🎉"}, 400, "input", "speakable"),
    ("instructions", {"instructions": "whisper"}, 400, "instructions", "instructions"),
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
