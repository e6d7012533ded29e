"""Issue 38 items 2 and 3 on the real server: fields an app sends that voxflow does not act on
(LibreChat's `backend`, any extra; `instructions` for a model that cannot follow them) are
served, named in `X-Voxflow-Ignored` and the access line, and change no byte of the audio."""

from __future__ import annotations

import logging

import httpx
import pytest
from access_log import access_lines

pytestmark = pytest.mark.integration

GOOD = {"model": "piper", "voice": "joe", "input": "Hello there.", "response_format": "pcm",
        "stream": False, "seed": 7}


def speak(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)


def test_unknown_fields_and_instructions_are_ignored_and_named(joe_server, caplog) -> None:
    plain = speak(joe_server.url, GOOD)
    assert plain.status_code == 200 and "x-voxflow-ignored" not in plain.headers
    caplog.set_level(logging.INFO, logger="voxflow.access")
    extras = speak(joe_server.url, {**GOOD, "backend": "openai", "temperature": 0.3,
                                    "instructions": "Speak in a cheerful tone."})
    assert extras.status_code == 200, extras.text
    assert extras.headers["x-voxflow-ignored"] == "backend, temperature, instructions"
    assert extras.headers["x-voxflow-instructions"] == "ignored"  # Piper has no style prompt
    assert "x-voxflow-instructions" not in plain.headers
    assert extras.content == plain.content and len(plain.content) > 10_000
    (line,) = access_lines(caplog, extras.headers["x-request-id"])
    assert " ignored=backend,temperature,instructions client=" in line.getMessage()


def test_streamed_and_sse_responses_carry_the_header(joe_server) -> None:
    with httpx.stream("POST", f"{joe_server.url}/v1/audio/speech", timeout=60,
                      json={**GOOD, "stream": True, "backend": "x"}) as r:
        assert r.status_code == 200 and r.headers["x-voxflow-ignored"] == "backend"
        streamed = r.read()
    assert streamed == speak(joe_server.url, GOOD).content
    sse = speak(joe_server.url, {**GOOD, "stream_format": "sse", "instructions": "Whisper."})
    assert sse.status_code == 200 and sse.headers["x-voxflow-ignored"] == "instructions"
    assert sse.text.rstrip().endswith("}") and "speech.audio.done" in sse.text


def test_a_name_that_cannot_be_a_header_shows_as_a_question_mark(joe_server) -> None:
    r = speak(joe_server.url, {**GOOD, "Größe\n": 1, "": 2})
    assert r.status_code == 200 and r.headers["x-voxflow-ignored"] == "?, ?"
    assert speak(joe_server.url, {**GOOD, "instructions": ""}).headers.get(
        "x-voxflow-ignored") is None  # empty instructions ask for nothing
