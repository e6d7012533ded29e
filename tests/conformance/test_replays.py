"""Replays of what apps that are not Python libraries send to `POST /v1/audio/speech`: the
literal bodies and headers in the project's research notes (shared/research/real-clients.md,
sections 4, 5c and 6), each checked for what that app does with the answer.

Bodies are serialized as each app does (Python's `json.dumps` for Open WebUI's aiohttp and Home
Assistant; compact `JSON.stringify` for the JavaScript apps). An empty API key gives
`Authorization: Bearer ` with its trailing space, which httpx (h11) refuses to send, so requests
carrying it go through the standard library's http.client, byte for byte; the others use httpx.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import httpx
import pytest
from audio_checks import (
    CLIENT_DRAWS,
    MODELS,
    NATIVE_RATES,
    TEXTS,
    assert_duration,
    assert_openai_error,
    codec_allowance_s,
    decoded_seconds,
    is_mp3,
)

PY_JSON: dict = {}  # json.dumps defaults: ", " and ": "
JS_JSON = {"separators": (",", ":")}


def raw_post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """POST with http.client, which sends header values as given (a trailing space too);
    the answer as an httpx.Response (chunked bodies joined)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("POST", parts.path, body=body, headers=headers)
        answer = connection.getresponse()
        return httpx.Response(answer.status, headers=answer.getheaders(), content=answer.read())
    finally:
        connection.close()


def send(server_url: str, payload: dict, headers: dict[str, str], dumps: dict) -> httpx.Response:
    """POST `payload` to /v1/audio/speech with exactly `headers`."""
    url = f"{server_url}/v1/audio/speech"
    body = json.dumps(payload, **dumps).encode()
    if any(v != v.strip() for v in headers.values()):
        return raw_post(url, body, headers)
    return httpx.post(url, content=body, headers=headers, timeout=120)


# Each app: (its body for this model and text, its headers, how it serializes JSON).
def open_webui(model: str, text: str, voice: str = "alloy"):
    """Open WebUI's backend (aiohttp): no response_format, `Bearer ` with an empty key."""
    return ({"input": text, "voice": voice, "model": model},
            {"Content-Type": "application/json", "Authorization": "Bearer "}, PY_JSON)


def librechat(model: str, text: str, voice: str = "alloy"):
    """LibreChat's TTSService (axios): no response_format, its `backend` field."""
    return ({"input": text, "model": model, "voice": voice, "backend": "default"},
            {"Content-Type": "application/json", "Authorization": "Bearer librechat-key"},
            JS_JSON)


def sillytavern(model: str, text: str, voice: str = "alloy"):
    """SillyTavern's "OpenAI Compatible" provider with no key: `Bearer ${key ?? ''}`."""
    return ({"input": text, "response_format": "mp3", "voice": voice, "speed": 1, "model": model},
            {"Content-Type": "application/json", "Authorization": "Bearer "}, JS_JSON)


def lobechat(model: str, text: str, voice: str = "alloy"):
    """LobeChat's server helper (openai-node with `Accept: */*`)."""
    return ({"input": text, "model": model, "voice": voice},
            {"Content-Type": "application/json", "Authorization": "Bearer lobe-key",
             "Accept": "*/*"}, JS_JSON)


def home_assistant(model: str, text: str, voice: str = "alloy"):
    """Home Assistant's OpenAI TTS custom integration (sfortis/openai_tts), no key set."""
    return ({"model": model, "input": text, "voice": voice, "response_format": "mp3",
             "speed": 1.0},
            {"Content-Type": "application/json", "User-Agent": "HomeAssistant-OpenAI-TTS"},
            PY_JSON)


APPS = {"open_webui": open_webui, "librechat": librechat, "sillytavern": sillytavern,
        "lobechat": lobechat, "home_assistant": home_assistant}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("app", list(APPS))
def test_app_gets_mp3_of_the_right_length(server_url, reference, app, model):
    """Every one of these apps plays (or stores as .mp3) an MP3: 200, `audio/mpeg`, MP3 frames
    at the voice's rate, decoding to the whole WAV's length."""
    durations = []
    for _ in range(CLIENT_DRAWS[model]):
        payload, headers, dumps = APPS[app](model, TEXTS[model])
        response = send(server_url, payload, headers, dumps)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "audio/mpeg"
        assert is_mp3(response.content), response.content[:8]
        seconds, rate = decoded_seconds(response.content)
        assert rate == NATIVE_RATES[model]
        ignored = response.headers.get("x-voxflow-ignored")
        assert ignored == ("backend" if app == "librechat" else None), ignored
        durations.append(seconds)
    assert_duration(sum(durations) / len(durations), reference.seconds(model),
                    f"{app} mp3, model {model}", codec_allowance_s("mp3", model))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("app", list(APPS))
def test_app_sees_an_openai_error(server_url, app, model):
    """A voice the model does not have: 400 with `{"error": {...}}`, the shape Open WebUI
    shows as "External: ..." and the others log."""
    payload, headers, dumps = APPS[app](model, "Hello there.", voice="no-such-voice")
    response = send(server_url, payload, headers, dumps)
    error = assert_openai_error(response, 400,
                                f"Voice 'no-such-voice' is not a voice of model '{model}'")
    assert (error["param"], error["code"]) == ("voice", "voice_not_found")


def test_librechat_without_voices_is_a_missing_voice_error(server_url):
    """LibreChat leaves `voice` out when its configured voice list is empty: voice is
    required (as in OpenAI's API), so that is a 400 naming the parameter."""
    payload, headers, dumps = librechat("piper", "Hello there.")
    del payload["voice"]
    response = send(server_url, payload, headers, dumps)
    error = assert_openai_error(response, 400, "Missing required parameter: 'voice'.")
    assert (error["param"], error["code"]) == ("voice", "missing_required_parameter")


@pytest.mark.parametrize("model", ["tts-1", "kokoro"])
def test_home_assistant_key_check_probe(server_url, model):
    """Home Assistant's key check posts `input: "."` and passes on any status under 400:
    200, an MP3 of 0.2 s of silence, `X-Voxflow-Unspeakable: true`."""
    payload = {"model": model, "input": ".", "voice": "alloy", "response_format": "mp3"}
    response = send(server_url, payload, home_assistant(model, ".")[1], PY_JSON)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/mpeg"
    assert response.headers["x-voxflow-unspeakable"] == "true"
    assert is_mp3(response.content)
    seconds, _ = decoded_seconds(response.content)
    assert 0.15 <= seconds <= 0.3, seconds


@pytest.mark.parametrize("authorization", ["Bearer ", "Bearer", "Bearer undefined", None])
def test_empty_api_keys_are_accepted(server_url, authorization):
    """With no server.api_keys, what apps send without a key is served: `Bearer ` (aiohttp,
    http.client), `Bearer` (fetch strips the space), `Bearer undefined` (a JavaScript app's
    unset key), or no header."""
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    response = send(server_url, {"input": "Hi.", "model": "tts-1", "voice": "alloy"}, headers,
                    JS_JSON)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/mpeg"
    assert is_mp3(response.content)


def test_open_webui_listings_without_auth(server_url):
    """Open WebUI's voice and model pickers: `GET /audio/voices` ({"voices": [{id, name}]}),
    `GET /audio/models` ({"models": [{id}]}) and the fallback `GET /models` (OpenAI's list),
    all without an Authorization header."""
    base = f"{server_url}/v1"
    voices = httpx.get(f"{base}/audio/voices", timeout=30)
    assert voices.status_code == 200
    entries = voices.json()["voices"]
    assert all(isinstance(v, dict) and set(v) == {"id", "name"} for v in entries), entries
    ids = [v["id"] for v in entries]
    assert {"joe", "jf_alpha", "jm_kumo", "alloy"} <= set(ids) and len(ids) == len(set(ids))
    models = httpx.get(f"{base}/audio/models", timeout=30)
    assert models.status_code == 200
    model_ids = [m["id"] for m in models.json()["models"]]
    assert {"piper", "kokoro", "tts-1"} <= set(model_ids)
    listing = httpx.get(f"{base}/models", timeout=30).json()
    assert listing["object"] == "list"
    assert {"piper", "kokoro"} <= {m["id"] for m in listing["data"]}
    assert all(m["object"] == "model" for m in listing["data"])
