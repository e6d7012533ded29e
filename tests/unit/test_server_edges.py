"""Server edges from the fresh-user test of issue 8 (follow-up items 2 and 5) on the real app
built by `create_app`, without loading models (a bare TestClient runs no lifespan): what
/openapi.json declares, trailing slashes, `GET /v1/models/{id}`, and two messages."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from voxflow.config import load_settings
from voxflow.server.app import create_app

ERROR_SHAPE = {"$ref": "#/components/schemas/ErrorBody"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(load_settings(None)), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def schema(client) -> dict:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def _error(r, status: int, code: str, message: str, param: str | None = None) -> None:
    assert r.status_code == status, r.text
    assert r.json() == {"error": {"message": message, "type": "invalid_request_error",
                                  "param": param, "code": code}}


# ---- item 2: /docs declares the responses the server sends ------------------------------------
def test_item2_openapi_has_no_422_anywhere(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (method, path)
    names = set(schema["components"]["schemas"])
    assert not names & {"HTTPValidationError", "ValidationError"}, names


def test_item2_speech_declares_its_real_error_responses(schema):
    responses = schema["paths"]["/v1/audio/speech"]["post"]["responses"]
    assert sorted(responses) == ["200", "400", "404", "405", "429", "500", "503", "504"]
    for status in ("400", "404", "405", "429", "500", "503", "504"):
        assert responses[status]["content"]["application/json"]["schema"] == ERROR_SHAPE
    assert "Retry-After" in responses["429"]["description"]
    assert {"audio/mpeg", "audio/wav", "audio/pcm", "text/event-stream"} <= set(
        responses["200"]["content"])
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert sorted(error["properties"]) == ["code", "message", "param", "type"]
    assert sorted(error["required"]) == ["code", "message", "param", "type"]
    assert schema["components"]["schemas"]["ErrorBody"]["required"] == ["error"]


def test_item2_listings_declare_404_and_405(schema):
    for path in ("/v1/audio/voices", "/v1/models/{model_id}"):
        responses = schema["paths"][path]["get"]["responses"]
        assert sorted(responses) == ["200", "404", "405"], path
        assert responses["404"]["content"]["application/json"]["schema"] == ERROR_SHAPE
    assert sorted(schema["paths"]["/health"]["get"]["responses"]) == ["200", "405", "503"]


def test_item2_speech_fields_are_described_with_their_bounds(schema):
    body = schema["components"]["schemas"]["SpeechBody"]["properties"]
    for name, field in body.items():
        assert field.get("description"), name
    assert (body["speed"]["minimum"], body["speed"]["maximum"]) == (0.25, 4.0)
    assert body["seed"]["minimum"] == 0 and "2**63-1" in body["seed"]["description"]
    assert (body["input"]["minLength"], body["input"]["maxLength"]) == (1, 4096)


def test_item2_schema_bounds_are_documentation_only():
    """The engine's checks (voxflow.engine.checks) stay the one place that enforces them: the
    body model lets an out-of-range speed or seed through to the engine's own 400."""
    from voxflow.server.schemas import SpeechBody

    body = SpeechBody.model_validate({"model": "m", "input": "", "voice": "v", "speed": 10.0,
                                      "seed": -1})
    assert (body.speed, body.seed, body.input) == (10.0, -1, "")


# ---- item 5 -------------------------------------------------------------------------------------
def test_item5_a_trailing_slash_is_a_404_in_our_shape_not_a_redirect(client):
    r = client.post("/v1/audio/speech/", json={"model": "piper", "input": "Hi.", "voice": "joe"},
                    follow_redirects=False)
    _error(r, 404, "not_found", "No route POST /v1/audio/speech/; the endpoints are listed at "
                                "/docs (and in docs/api.md).")
    assert "location" not in r.headers
    assert client.get("/v1/models/", follow_redirects=False).status_code == 404


@pytest.mark.parametrize("model_id", ["piper", "tts-1", "gpt-4o-mini-tts"])
def test_item5_get_one_model_is_its_list_entry(client, model_id):
    listed = {entry["id"]: entry for entry in client.get("/v1/models").json()["data"]}
    r = client.get(f"/v1/models/{model_id}")
    assert r.status_code == 200
    assert r.json() == listed[model_id]
    assert r.json().get("alias_of") == (None if model_id == "piper" else "piper")


def test_item5_get_an_unknown_model_is_model_not_found(client):
    _error(client.get("/v1/models/tts-2"), 404, "model_not_found",
           "The model 'tts-2' does not exist. Served models: piper, gpt-4o-mini-tts (alias of "
           "piper), tts-1 (alias of piper), tts-1-hd (alias of piper).", param="model")
    r = client.get("/v1/models/" + "x" * 1000)
    assert r.status_code == 404 and len(r.content) < 400


def test_item5_unknown_route_points_to_docs_page(client):
    # (`/` itself is the playground page, issue 14 item 1)
    _error(client.get("/index.html"), 404, "not_found",
           "No route GET /index.html; the endpoints are listed at /docs (and in docs/api.md).")


@pytest.mark.parametrize(("language", "message"), [
    ("", "Invalid value for 'language': it must not be empty."),
    ("x" * 36, "Invalid value for 'language': '" + "x" * 36 + "' is 36 characters long; it must "
               "be at most 35 characters long."),
])
def test_item5_language_length_messages_read_well(client, language, message):
    r = client.post("/v1/audio/speech", json={"model": "piper", "input": "Hi.", "voice": "joe",
                                              "language": language})
    _error(r, 400, "invalid_value", message, param="language")


def test_item5_the_openai_client_retrieves_a_model_and_its_alias(client):
    openai = pytest.importorskip("openai")
    api = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client)
    model = api.models.retrieve("tts-1")
    assert (model.id, model.owned_by, model.model_extra["alias_of"]) == ("tts-1", "voxflow",
                                                                         "piper")
    with pytest.raises(openai.NotFoundError) as info:
        api.models.retrieve("tts-2")
    assert info.value.body["code"] == "model_not_found"
