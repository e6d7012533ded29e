"""Issue 38 item 6: with API keys set, `server.listings_public` opens the read-only listings
(Open WebUI reads them without its key) and nothing else: `POST /v1/audio/voices` under the same
path still needs the key. On the real app, no models loaded (a bare TestClient)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from voxflow.config import load_settings
from voxflow.server.app import create_app
from voxflow.server.auth import LISTINGS, is_open

KEY = "sk-test-0123456789"
READS = ("/v1/models", "/v1/models/piper", "/v1/audio/voices", "/v1/audio/models")


def client(listings_public: bool) -> TestClient:
    settings = load_settings(None, {"server.api_keys": [KEY],
                                    "server.listings_public": listings_public})
    return TestClient(create_app(settings), raise_server_exceptions=False)


def test_listings_need_the_key_by_default() -> None:
    c = client(False)
    for path in READS:
        r = c.get(path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key", path


def test_listings_public_opens_reads_only() -> None:
    c = client(True)
    for path in READS:
        assert c.get(path).status_code != 401, path
    assert c.get("/v1/audio/models").json() == {"models": [
        {"id": "piper"}, {"id": "tts-1"}, {"id": "tts-1-hd"}, {"id": "gpt-4o-mini-tts"}]}
    # no voices loaded (no lifespan ran)
    assert c.get("/v1/audio/voices").json() == {"object": "list", "data": [], "voices": []}
    assert c.post("/v1/audio/voices").status_code == 401
    assert c.delete("/v1/audio/voices/x").status_code == 401
    assert c.post("/v1/audio/speech", json={}).status_code == 401
    schema = c.get("/openapi.json").json()["paths"]
    assert "security" not in schema["/v1/audio/voices"]["get"]
    assert schema["/v1/audio/voices"]["post"]["security"] == [{"bearerAuth": []}]
    assert "security" not in schema["/v1/models/{model_id}"]["get"]


def test_is_open_matches_methods_and_prefixes() -> None:
    assert is_open(LISTINGS, "GET", "/v1/models/tts-1")
    assert not is_open(LISTINGS, "POST", "/v1/models/tts-1")
    assert not is_open(LISTINGS, "GET", "/v1/models/a/b")  # one level below only
    assert not is_open(LISTINGS, "GET", "/v1/audio/speech")
