"""The errors Ray Serve's HTTP proxy answers itself, in the OpenAI error shape.

Requests reach a replica's FastAPI app, whose errors already have the OpenAI shape. A few
answers never reach it and come from Ray's proxy as plain text: the 429 of a full queue
(``ray.max_queued_requests``; Ray adds ``Retry-After``), a 503 when no replica is up, a 408 on
Ray's own request timeout, and nothing at all when the replica died before answering (uvicorn
then sends a bare 500). `OpenAIErrorShape` rewrites those into the OpenAI shape, keeping the
status and ``Retry-After``; a replica that died before answering becomes a 503
``replica_failed``. Responses that already started (a stream cut by a dead replica) are left
alone: their body ends without its last chunk, which clients report as an error.
`OneRequestId` drops the second ``X-Request-Id`` Ray's proxy adds to each response.

Ray loads it into its proxy from the environment when Ray starts (``voxflow serve --ray`` sets
it; docs/scale-out.md)::

    RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=voxflow.ray.proxy:middlewares

Plain ASGI: importing it needs no Ray.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
"""The environment variable Ray's proxy reads its extra middlewares from (at its start)."""

CALLBACK = "voxflow.ray.proxy:middlewares"
"""Its value for voxflow: `middlewares` below."""

# status -> (OpenAI error type, code) for the proxy's own answers
_KINDS = {
    408: ("timeout_error", "timeout"),
    429: ("rate_limit_error", "overloaded"),
    503: ("server_error", "unavailable"),
}
_FALLBACK = ("server_error", "proxy_error")


def error_body(status: int, message: str, code: str | None = None) -> bytes:
    """The OpenAI error JSON for a proxy answer with `status` and `message`:
    ``{"error": {"message", "type", "param": null, "code"}}``; `code` by default 408
    ``timeout``, 429 ``overloaded``, 503 ``unavailable``, 404 ``not_found``, other
    ``proxy_error``."""
    kind, default = _KINDS.get(status, ("invalid_request_error", "not_found") if status == 404
                               else _FALLBACK)
    error = {"message": message, "type": kind, "param": None, "code": code or default}
    return json.dumps({"error": error}, ensure_ascii=True).encode("ascii")


def _message_for(status: int, text: str, retry_after: bytes | None) -> str:
    """Our sentence for the proxy's plain-text answer `text` (kept in parentheses)."""
    text = text.strip()[:500]
    if status == 429:
        wait = f" after {retry_after.decode('latin-1')} s" if retry_after else " later"
        return (f"Every replica is busy and the queue of waiting requests is full; retry{wait}. "
                f"({text})")
    if status == 503:
        return f"No replica can take the request now; retry later. ({text})"
    return text or f"HTTP {status}"


REPLICA_FAILED = ("The replica serving this request stopped before answering (it is being "
                  "replaced); retry the request.")


class OpenAIErrorShape:
    """ASGI middleware for Ray Serve's proxy: its plain-text error answers (status >= 400,
    ``text/plain``) become OpenAI error JSON with the same status and ``Retry-After``; an app
    that returns or raises without starting a response gets a 503 ``replica_failed``.
    Everything else (every answer of the voxflow app, any response already started) passes
    through unchanged.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        held: Message | None = None  # a plain-text error's start, sent once its body is read
        body = bytearray()

        async def reshape(message: Message) -> None:
            nonlocal started, held
            if message["type"] == "http.response.start":
                started = True
                if message["status"] >= 400 and _is_plain_text(message.get("headers", [])):
                    held = message
                    return
            elif message["type"] == "http.response.body" and held is not None:
                body.extend(message.get("body", b""))
                if message.get("more_body", False):
                    return
                status = held["status"]
                retry_after = _header(held.get("headers", []), b"retry-after")
                text = _message_for(status, body.decode("utf-8", "replace"), retry_after)
                await send_error(send, status, text, retry_after)
                return
            await send(message)

        try:
            await self.app(scope, receive, reshape)
        except Exception:
            if started:
                raise
            log.warning("request failed before its response started", exc_info=True)
        if not started:
            await send_error(send, 503, REPLICA_FAILED, None, code="replica_failed")


async def send_error(send: Send, status: int, message: str, retry_after: bytes | None,
                     code: str | None = None) -> None:
    """Send a whole JSON error response (`error_body`; `code` replaces its code when given)."""
    payload = error_body(status, message, code)
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", retry_after))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _header(headers: Any, name: bytes) -> bytes | None:
    for key, value in headers:
        if bytes(key).lower() == name:
            return bytes(value)
    return None


def _is_plain_text(headers: Any) -> bool:
    content_type = _header(headers, b"content-type") or b""
    return content_type.lower().startswith(b"text/plain")


class OneRequestId:
    """ASGI middleware for Ray Serve's proxy: one ``X-Request-Id`` per response.

    Ray's proxy gives a request without ``X-Request-Id`` an id of its own (in the request's
    headers, so the app answers with it) and appends ``X-Request-ID`` to every response, which
    already carries the app's: clients would read ``"ID, ID"``. The first one (the app's, which
    its access line names) is kept.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_one(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _first_request_id(message.get("headers", []))}
            await send(message)

        await self.app(scope, receive, send_one if scope["type"] == "http" else send)


def _first_request_id(headers: Any) -> list[tuple[bytes, bytes]]:
    kept: list[tuple[bytes, bytes]] = []
    seen = False
    for key, value in headers:
        if bytes(key).lower() == b"x-request-id":
            if seen:
                continue
            seen = True
        kept.append((bytes(key), bytes(value)))
    return kept


def middlewares() -> list[Middleware]:
    """What Ray's proxy calls through `CALLBACK_ENV`: the middlewares to wrap itself in
    (the last is outermost)."""
    return [Middleware(OneRequestId), Middleware(OpenAIErrorShape)]


__all__ = ["CALLBACK", "CALLBACK_ENV", "OneRequestId", "OpenAIErrorShape", "error_body",
           "middlewares", "send_error"]
