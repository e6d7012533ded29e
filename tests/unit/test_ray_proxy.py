"""The middleware that puts Ray Serve's own proxy answers in the OpenAI error shape (no Ray
needed: it is plain ASGI, driven here with the messages Ray's proxy sends)."""

from __future__ import annotations

import asyncio
import json

import pytest

from voxflow.ray.proxy import OneRequestId, OpenAIErrorShape, middlewares

SCOPE = {"type": "http", "method": "POST", "path": "/v1/audio/speech", "headers": []}
# what Ray 2.60's proxy sends when max_queued_requests is exceeded (BackpressureConfig 429)
RAY_429 = [
    {"type": "http.response.start", "status": 429,
     "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1")]},
    {"type": "http.response.body", "body": b"Request dropped due to backpressure "
     b"(num_queued_requests=2, max_queued_requests=2)."},
]


def run(messages: list[dict], raise_after: Exception | None = None,
        middleware: type = OpenAIErrorShape) -> list[dict]:
    """The messages the client gets when the proxy app sends `messages` (then raises)."""
    sent: list[dict] = []

    async def app(scope, receive, send):
        for message in messages:
            await send(message)
        if raise_after is not None:
            raise raise_after

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(middleware(app)(SCOPE, receive, send))
    return sent


def body_of(sent: list[dict]) -> dict:
    return json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def test_rays_backpressure_429_gets_the_openai_shape_and_keeps_retry_after():
    sent = run(RAY_429)
    start = sent[0]
    assert start["status"] == 429
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"1"
    assert headers[b"content-type"] == b"application/json"
    error = body_of(sent)["error"]
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "overloaded"
    assert error["param"] is None
    assert error["message"].startswith("Every replica is busy and the queue of waiting "
                                       "requests is full; retry after 1 s.")
    assert "max_queued_requests=2" in error["message"]
    assert int(headers[b"content-length"]) == len(sent[1]["body"])


def test_a_replica_that_died_before_answering_is_a_503_replica_failed():
    for raised in (None, RuntimeError("actor died")):
        sent = run([], raise_after=raised)
        assert sent[0]["status"] == 503
        assert body_of(sent)["error"]["code"] == "replica_failed"


def test_rays_plain_503_is_reshaped_and_json_answers_pass_untouched():
    sent = run([{"type": "http.response.start", "status": 503,
                 "headers": [(b"content-type", b"text/plain; charset=utf-8")]},
                {"type": "http.response.body", "body": b"Deployment is unavailable."}])
    assert sent[0]["status"] == 503
    assert body_of(sent)["error"]["code"] == "unavailable"
    ours = [{"type": "http.response.start", "status": 429,
             "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]},
            {"type": "http.response.body", "body": b'{"error": {"code": "overloaded"}}'}]
    assert run(ours) == ours


def test_a_stream_cut_after_its_start_is_not_dressed_up_as_a_whole_response():
    start = {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", b"audio/pcm")]}
    piece = {"type": "http.response.body", "body": b"\x00\x01", "more_body": True}
    with pytest.raises(RuntimeError):
        run([start, piece], raise_after=RuntimeError("actor died"))
    assert run([start, piece]) == [start, piece]  # no final message: the client sees a cut


def test_the_second_request_id_ray_appends_is_dropped():
    start = {"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"audio/wav"), (b"x-request-id", b"abc"), (b"x-sample-rate", b"22050"),
        (b"X-Request-ID", b"abc")]}
    body = {"type": "http.response.body", "body": b"RIFF"}
    sent = run([start, body], middleware=OneRequestId)
    assert sent[0]["headers"] == [(b"content-type", b"audio/wav"), (b"x-request-id", b"abc"),
                                  (b"x-sample-rate", b"22050")]
    assert sent[1] == body


def test_rays_callback_gets_both_middlewares_errors_outermost():
    assert [m.cls for m in middlewares()] == [OneRequestId, OpenAIErrorShape]
