"""Issue 14 item 2: API keys on the real app built by `create_app`, without loading models (a
bare TestClient runs no lifespan; refusals, listings and /openapi.json need no model): every
401 exactly, the open routes, /metrics by its setting, CORS with keys, WebSockets, and the
constant-time comparison."""

from __future__ import annotations

import hmac
import logging

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from voxflow.config import load_settings
from voxflow.server import auth
from voxflow.server.app import create_app
from voxflow.server.auth import KeyRing

KEY = "sk-unit-0123456789abcdef"
OTHER_KEY = "sk-unit-second"
ORIGIN = "https://app.example.com"
MISSING = {"error": {
    "message": "You didn't provide an API key. Send it in an Authorization header using Bearer "
               "auth: 'Authorization: Bearer YOUR_KEY'.",
    "type": "invalid_request_error", "param": None, "code": "missing_api_key"}}
WRONG = {"error": {
    "message": "Incorrect API key provided. Send one of this server's keys (server.api_keys, "
               "server.api_keys_file, VOXFLOW_API_KEYS) as 'Authorization: Bearer YOUR_KEY'.",
    "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
SCHEME = {"error": {
    "message": "Incorrect API key provided: the Authorization header must use Bearer auth: "
               "'Authorization: Bearer YOUR_KEY'.",
    "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
PROTECTED = [
    ("GET", "/v1/models"), ("GET", "/v1/models/piper"), ("GET", "/v1/audio/voices"),
    ("POST", "/v1/audio/speech"), ("POST", "/v1/audio/voices"),
    ("DELETE", "/v1/audio/voices/joe"), ("GET", "/metrics"), ("GET", "/nowhere"),
]


def client(**server) -> TestClient:
    settings = load_settings(None, {f"server.{k}": v for k, v in server.items()}, environ={})
    return TestClient(create_app(settings), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def keyed() -> TestClient:
    return client(api_keys=[KEY, OTHER_KEY])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_401(r, body: dict) -> None:
    assert r.status_code == 401, r.text
    assert r.json() == body
    assert r.headers["www-authenticate"] == 'Bearer realm="voxflow"'
    assert len(r.headers["x-request-id"]) == 32


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_every_route_but_the_open_ones_needs_the_key(keyed, method, path) -> None:
    assert_401(keyed.request(method, path), MISSING)
    assert_401(keyed.request(method, path, headers=bearer("sk-wrong")), WRONG)


@pytest.mark.parametrize("header", ["", "   ", "Bearer", "Bearer    ", "bearer"])
def test_no_key_in_the_header_is_missing_api_key(keyed, header) -> None:
    assert_401(keyed.get("/v1/models", headers={"Authorization": header}), MISSING)


@pytest.mark.parametrize("header", [
    f"Basic {KEY}", "Basic dXNlcjpwYXNz", KEY, f"Token {KEY}", f"Bearer {KEY}x",
    f"Bearer {KEY[:-1]}", f"Bearer {KEY} {KEY}", f"Bearer {KEY.upper()}", "Bearer \xe9t\xe9",
])
def test_a_wrong_key_or_scheme_is_invalid_api_key(keyed, header) -> None:
    r = keyed.get("/v1/models", headers={"Authorization": header.encode("latin-1")})
    assert_401(r, SCHEME if not header.startswith("Bearer ") else WRONG)


def test_either_key_opens_every_route(keyed) -> None:
    for key in (KEY, OTHER_KEY):
        r = keyed.get("/v1/models", headers=bearer(key))
        assert r.status_code == 200 and r.json()["object"] == "list"
    for header in (f"bearer {KEY}", f"BEARER   {KEY}  "):  # scheme case and spaces, as RFC 7235
        assert keyed.get("/v1/models", headers={"Authorization": header}).status_code == 200
    # Past the key, the route's own errors: 404 for an unknown route, a 400 for a bad body.
    r = keyed.get("/nowhere", headers=bearer(KEY))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = keyed.post("/v1/audio/speech", content=b"{not json", headers=bearer(KEY))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert keyed.get("/metrics", headers=bearer(KEY)).status_code == 200


def test_the_key_is_checked_before_the_body_is_read(keyed) -> None:
    r = keyed.post("/v1/audio/speech", content=b"{not json")
    assert_401(r, MISSING)
    form = {"Content-Type": "multipart/form-data; boundary=b"}
    r = keyed.post("/v1/audio/voices", content=b"x" * 1000, headers={**bearer("nope"), **form})
    assert_401(r, WRONG)


def test_health_and_the_docs_stay_open_and_say_a_key_is_needed(keyed) -> None:
    r = keyed.get("/health")
    assert r.status_code == 503  # no lifespan here: models not loaded, but not a 401
    assert r.json()["api_key_required"] is True
    for path in ("/docs", "/redoc", "/openapi.json", "/", "/playground.js", "/playground.css"):
        assert keyed.get(path).status_code == 200, path  # the playground asks for the key itself
    body = keyed.get("/health").text + keyed.get("/openapi.json").text
    assert KEY not in body and OTHER_KEY not in body
    assert client().get("/health").json()["api_key_required"] is False


def test_openapi_declares_the_bearer_scheme_and_the_401s(keyed) -> None:
    schema = keyed.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    speech = schema["paths"]["/v1/audio/speech"]["post"]
    assert speech["security"] == [{"bearerAuth": []}]
    assert speech["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"}
    assert "security" not in schema["paths"]["/health"]["get"]
    assert "401" not in schema["paths"]["/health"]["get"]["responses"]
    assert "401" in schema["paths"]["/metrics"]["get"]["responses"]
    open_schema = client().get("/openapi.json").json()
    assert "securitySchemes" not in open_schema["components"]
    assert "401" not in open_schema["paths"]["/v1/audio/speech"]["post"]["responses"]


def test_metrics_public_opens_metrics_only() -> None:
    c = client(api_keys=[KEY], metrics_public=True)
    r = c.get("/metrics")
    assert r.status_code == 200 and "voxflow_requests_total" in r.text
    assert_401(c.get("/v1/models"), MISSING)
    schema = c.get("/openapi.json").json()
    assert "401" not in schema["paths"]["/metrics"]["get"]["responses"]


def test_without_keys_everything_is_open() -> None:
    c = client()
    assert c.get("/v1/models").status_code == 200
    assert c.get("/metrics").status_code == 200
    # a header sent anyway (the openai client always sends one) is ignored
    assert c.get("/v1/models", headers=bearer("anything")).status_code == 200


def test_with_cors_preflights_need_no_key_and_401s_reach_the_page() -> None:
    c = client(api_keys=[KEY], cors_origins=[ORIGIN])
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    r = c.options("/v1/audio/speech", headers=preflight)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    r = c.get("/v1/models", headers={"Origin": ORIGIN})
    assert_401(r, MISSING)
    assert r.headers["access-control-allow-origin"] == ORIGIN
    r = c.get("/v1/models", headers={"Origin": ORIGIN, **bearer(KEY)})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN


def test_a_websocket_handshake_without_the_key_is_closed_1008(keyed) -> None:
    with pytest.raises(WebSocketDisconnect) as closed, keyed.websocket_connect("/v1/realtime"):
        pass
    assert closed.value.code == 1008
    with pytest.raises(WebSocketDisconnect) as closed, keyed.websocket_connect(
        "/v1/realtime", headers=bearer(KEY)
    ):
        pass
    assert closed.value.code != 1008  # past the key: no such route, the router closes it


def test_the_speech_stream_route_is_behind_the_key(keyed) -> None:
    with pytest.raises(WebSocketDisconnect) as closed, keyed.websocket_connect(
        "/v1/audio/speech/stream"
    ):
        pass
    assert closed.value.code == 1008
    with keyed.websocket_connect("/v1/audio/speech/stream", headers=bearer(KEY)) as ws:
        ws.send_json({"type": "config", "model": "piper", "voice": "joe"})
        event = ws.receive_json()  # past the key: the route answers (no model loaded here)
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert event["error"]["code"] == "model_not_ready"
    assert (closed.value.code, closed.value.reason) == (4503, "model_not_ready")


def test_a_refusal_is_logged_without_the_key(keyed, caplog) -> None:
    caplog.set_level(logging.INFO, logger="voxflow.server.auth")
    keyed.get("/v1/models", headers={**bearer("sk-attempted-secret"), "X-Request-Id": "rid-7"})
    keyed.get("/v1/models", headers={"Authorization": f"Basic {KEY}"})
    lines = [r.getMessage() for r in caplog.records if r.name == "voxflow.server.auth"]
    assert len(lines) == 2
    assert lines[0] == ("refused GET /v1/models: invalid_api_key "
                        "(request_id=rid-7 client=testclient)")
    assert lines[1].startswith("refused GET /v1/models: invalid_api_key (request_id=")
    assert "sk-attempted-secret" not in caplog.text and KEY not in caplog.text


def test_every_key_is_compared_every_time(monkeypatch) -> None:
    """No early exit: one `hmac.compare_digest` per key whatever was sent (a match on the
    first key, on the last, or none), each on two 32-byte digests (no length leaks)."""
    ring = KeyRing(["k1", "k2", "k3"])
    calls: list[tuple[int, int]] = []
    compare = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return compare(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    for token, expected in ((b"k1", True), (b"k3", True), (b"k", False), (b"x" * 5000, False)):
        calls.clear()
        assert ring.matches(token) is expected
        assert calls == [(32, 32)] * 3
    assert "k1" not in repr(vars(ring))  # only digests are kept
    with pytest.raises(ValueError):
        KeyRing([])


def test_settings_that_skipped_the_key_file_fail_closed(tmp_path) -> None:
    from voxflow.config import ConfigError, Settings

    settings = Settings.model_validate({
        "server": {"api_keys_file": str(tmp_path / "keys")},
        "models": [{"name": "piper", "family": "piper"}],
    })
    with pytest.raises(ConfigError, match="no key was read from it"):
        create_app(settings)


def test_the_401_codes_and_messages_are_documented() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    errors = text.split("\n## Errors", 1)[1].split("\n## ", 1)[0]
    keys = text.split("\n## API keys", 1)[1].split("\n## ", 1)[0]
    for code in ("missing_api_key", "invalid_api_key"):
        assert f"| `{code}` | 401 |" in errors
    for body in (MISSING, WRONG, SCHEME):
        assert body["error"]["message"] in keys
