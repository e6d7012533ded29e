"""Request ids and the access line (issue 8, item 5) on a small app: ids accepted or made,
the header on every kind of response (a 500 from an unhandled exception too), the log line."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from voxflow.server.errors import install_error_handlers
from voxflow.server.request_id import (
    AccessRecord,
    RequestIdMiddleware,
    accepted_request_id,
    log_access,
    log_value,
)


@pytest.mark.parametrize(("given", "kept"), [
    ("abc-123", True), ("0f8fad5b-d9cb-469f-a165-70867728950e", True), ("a.b_c:d", True),
    ("x" * 128, True), ("x" * 129, False), ("", False), ("a b", False), ("a\r\nSet-Cookie", False),
    ("é", False), ("<script>", False),
])
def test_item5_client_ids_are_kept_only_when_short_and_safe(given, kept):
    assert accepted_request_id(given) == (given if kept else None)


@pytest.fixture
def client() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(RequestIdMiddleware)

    @app.get("/ok")
    async def ok() -> dict:
        return {"ok": True}

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("bug")

    return TestClient(app, raise_server_exceptions=False)


def test_item5_every_response_carries_an_id(client):
    for method, path in [("GET", "/ok"), ("GET", "/missing"), ("POST", "/ok"), ("GET", "/boom")]:
        r = client.request(method, path)
        assert r.status_code == {"/ok": 200 if method == "GET" else 405, "/missing": 404,
                                 "/boom": 500}[path]
        rid = r.headers["x-request-id"]
        assert len(rid) == 32 and int(rid, 16) >= 0, (path, rid)
    r = client.get("/boom", headers={"X-Request-Id": "trace-500"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "trace-500"
    assert r.json()["error"]["message"] == "The server had an error while processing the request."
    assert client.get("/ok", headers={"X-Request-Id": "mine-1"}).headers["x-request-id"] == "mine-1"
    made = client.get("/ok", headers={"X-Request-Id": "bad id"}).headers["x-request-id"]
    assert made != "bad id" and len(made) == 32
    assert client.get("/ok").headers["x-request-id"] != client.get("/ok").headers["x-request-id"]


def test_item5_access_line_names_every_field(caplog):
    record = AccessRecord("rid-7", started_at=0.0, model="piper", voice="joe", chars=12,
                          fmt="mp3", stream=True, audio=lambda: 1.23456, status=200,
                          first_byte_at=0.25, complete=True, client="203.0.113.9",
                          cache="hit")
    with caplog.at_level(logging.INFO, logger="voxflow.access"):
        log_access(record)
    (line,) = [r for r in caplog.records if r.name == "voxflow.access"]
    message = line.getMessage()
    assert message.startswith("request_id=rid-7 status=200 model=piper voice=joe chars=12 "
                              "audio_s=1.235 ttfa_s=0.25 total_s=")
    assert message.endswith(" stream=true format=mp3 complete=true ignored=- client=203.0.113.9"
                            " cache=hit")
    assert (line.request_id, line.status, line.audio_s, line.ttfa_s) == ("rid-7", 200, 1.235, 0.25)
    unknown = AccessRecord("rid-8", status=400)
    assert unknown.fields(unknown.started_at)["model"] is None
    extras = AccessRecord("rid-9", status=200, ignored="backend,instructions\nforged=1")
    assert extras.fields(1.0)["ignored"] == "backend,instructions\\nforged=1"  # escaped


FORGED = "joe\n2026-11-30 INFO voxflow.access: request_id=forged status=200"  # 64 characters


def test_item1_client_values_cannot_forge_or_flood_the_access_line(caplog):
    record = AccessRecord("rid-9", started_at=0.0, model="x" * 100_000, voice=FORGED,
                          fmt="mp3\r\x1b[31m", status=400)
    with caplog.at_level(logging.INFO, logger="voxflow.access"):
        log_access(record)
    (line,) = [r for r in caplog.records if r.name == "voxflow.access"]
    message = line.getMessage()
    assert "\n" not in message and "\r" not in message and "\x1b" not in message
    assert len(message) < 600
    fields = dict(part.split("=", 1) for part in message.split(" "))
    assert list(fields) == ["request_id", "status", "model", "voice", "chars", "audio_s",
                            "ttfa_s", "total_s", "stream", "format", "complete", "ignored",
                            "client", "cache"]
    assert fields["request_id"] == "rid-9"
    assert fields["model"] == "x" * 64 + "…[100,000_characters]"
    assert fields["voice"] == (r"joe\n2026-11-30\x20INFO\x20voxflow.access:"
                               r"\x20request_id=forged\x20status=200")
    assert fields["format"] == r"mp3\r\x1b[31m"
    # The attributes a structured handler reads are the same safe values.
    assert (line.model, line.voice, line.format) == (fields["model"], fields["voice"],
                                                     fields["format"])


@pytest.mark.parametrize(("given", "logged"), [
    ("joe", "joe"), ("a b", r"a\x20b"), ("back\\slash", r"back\\slash"), ("é日本", "é日本"),
    ("\u2028x", r"\u2028x"), ("\ud800", r"\ud800"), ("\t", r"\t"), ("\x00", r"\x00"),
])
def test_item1_log_value_escapes_like_repr(given, logged):
    assert log_value(given) == logged
