"""Issue 38 item 2: unknown top-level fields of a speech body under `server.unknown_fields:
refuse` get the 400 they always got, in the OpenAI shape, before any engine work (the bare
TestClient starts no engine); and the header value made of ignored names is ASCII and short
whatever the client sent."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from voxflow.config import load_settings
from voxflow.server.app import create_app
from voxflow.server.ignored import MAX_NAMES, header_value
from voxflow.server.schemas import SpeechBody

GOOD = {"model": "piper", "voice": "joe", "input": "Hello there.", "response_format": "pcm"}


@pytest.fixture(scope="module")
def refusing() -> TestClient:
    settings = load_settings(None, {"server.unknown_fields": "refuse"})
    return TestClient(create_app(settings), raise_server_exceptions=False)


def test_refuse_names_the_first_unknown_field(refusing: TestClient) -> None:
    r = refusing.post("/v1/audio/speech", json={**GOOD, "backend": "openai", "temperature": 1})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "Unrecognized request argument supplied: 'backend'.",
                                  "type": "invalid_request_error", "param": "backend",
                                  "code": "unknown_parameter"}}


def test_refuse_clips_a_huge_field_name(refusing: TestClient) -> None:
    r = refusing.post("/v1/audio/speech", json={**GOOD, "x" * 10_000: 1})
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "unknown_parameter"
    assert error["param"].startswith("xxx") and len(error["param"]) < 100
    assert "…" in error["message"] and "characters)" in error["message"]
    assert len(r.content) < 1000


def test_a_known_field_of_the_wrong_type_is_still_a_400(refusing: TestClient) -> None:
    r = refusing.post("/v1/audio/speech", json={**GOOD, "seed": "42"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_type"
    assert r.json()["error"]["param"] == "seed"


def test_unknown_fields_are_kept_in_the_order_sent() -> None:
    body = SpeechBody.model_validate({**GOOD, "backend": "x", "temperature": 0.3})
    assert body.unknown_fields == ["backend", "temperature"]
    assert SpeechBody.model_validate(GOOD).unknown_fields == []


def test_header_value_is_ascii_and_bounded() -> None:
    assert header_value(["backend", "instructions"]) == "backend, instructions"
    assert header_value(["é", "a b", "x" * 65, "ok_1.2-3"]) == "?, ?, ?, ok_1.2-3"
    many = [f"f{i}" for i in range(MAX_NAMES + 3)]
    assert header_value(many).endswith(f"f{MAX_NAMES - 1}, +3 more")
