"""CORS (issue 8, item 3) on the real app built by `create_app`, without loading models: the
lifespan does not run under a bare TestClient, and preflights and listings need no model."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from voxflow.config import ConfigError, load_settings
from voxflow.server.app import create_app

ORIGIN = "https://app.example.com"
PREFLIGHT = {
    "Origin": ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, x-stainless-lang",
}


def client(**overrides) -> TestClient:
    settings = load_settings(None, {f"server.{k}": v for k, v in overrides.items()})
    return TestClient(create_app(settings), raise_server_exceptions=False)


def test_item3_preflight_from_an_allowed_origin_is_answered():
    c = client(cors_origins=[ORIGIN, "http://localhost:5173"])
    r = c.options("/v1/audio/speech", headers=PREFLIGHT)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    allowed = r.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "x-stainless-lang" in allowed
    assert len(r.headers["x-request-id"]) == 32
    r = c.get("/v1/models", headers={"Origin": ORIGIN})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
    assert {"x-request-id", "x-sample-rate"} <= exposed
    # Errors carry it too, so a page can read the error body.
    r = c.get("/nowhere", headers={"Origin": ORIGIN})
    assert r.status_code == 404 and r.headers["access-control-allow-origin"] == ORIGIN


def test_item3_other_origins_get_no_cors_headers():
    c = client(cors_origins=[ORIGIN])
    r = c.options("/v1/audio/speech", headers={**PREFLIGHT, "Origin": "https://evil.example"})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    # Only Vary (caches keep origins apart) and our own headers: no Access-Control-* at all.
    assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers
    assert "Origin" in r.headers["vary"]
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"error": {
        "message": "CORS preflight refused: origin 'https://evil.example' is not allowed "
                   "(server.cors_origins).",
        "type": "invalid_request_error", "param": None, "code": "cors_not_allowed"}}
    assert len(r.headers["x-request-id"]) == 32
    for path in ("/v1/models", "/nowhere"):
        r = c.get(path, headers={"Origin": "https://evil.example"})
        assert r.status_code in (200, 404)
        assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers
        assert r.headers["vary"] == "Origin"


def test_item3_a_refused_method_from_an_allowed_origin_is_an_openai_error():
    c = client(cors_origins=[ORIGIN])
    r = c.options("/v1/audio/speech",
                  headers={**PREFLIGHT, "Access-Control-Request-Method": "PATCH"})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "CORS preflight refused: method 'PATCH' is not allowed "
                   "(GET, POST, PUT, DELETE, OPTIONS).",
        "type": "invalid_request_error", "param": None, "code": "cors_not_allowed"}
    assert r.headers["access-control-allow-origin"] == ORIGIN  # Starlette's headers kept


@pytest.mark.parametrize(("value", "got"), [("https://app.example.com", "a string"), (5, "5")])
def test_item3_cors_origins_not_a_list_is_our_message(value, got):
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"server.cors_origins": value})
    message = str(info.value)
    assert message == (
        f"invalid configuration: server.cors_origins: Value error, must be a list of origins, "
        f"not {got}: write [\"https://app.example.com\"] (YAML: a list; --set: "
        """'server.cors_origins=["https://app.example.com"]')""")
    assert "valid list" not in message


def test_item3_any_origin_with_star():
    r = client(cors_origins=["*"]).options("/v1/audio/speech", headers=PREFLIGHT)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


def test_item3_cors_is_off_by_default():
    assert load_settings(None).server.cors_origins == []
    c = client()
    r = c.options("/v1/audio/speech", headers=PREFLIGHT)
    assert r.status_code == 405 and "access-control-allow-origin" not in r.headers
    r = c.get("/v1/models", headers={"Origin": ORIGIN})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("bad", ["https://app.example.com/", "app.example.com",
                                 "https://app.example.com/path", ""])
def test_item3_an_origin_that_browsers_never_send_is_a_config_error(bad):
    with pytest.raises(ConfigError, match=r"server\.cors_origins.*is not an origin"):
        load_settings(None, {"server.cors_origins": [bad]})
