"""`server.max_body_bytes` for the JSON routes: a body over it is refused with 413
``payload_too_large`` before it is parsed: known from ``Content-Length``, or, for a chunked
body, once the bytes read pass the limit. Nothing more is kept: the rest of the body is
read and dropped first (so a proxy writing it sees the 413, not a reset), then the 413 sent and
the connection closed.
Voice uploads (``POST /v1/audio/voices``, multipart) keep their own limit
(``server.max_voice_upload_bytes``, `voxflow.server.voices`)."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voxflow.errors import PayloadTooLargeError
from voxflow.server.errors import error_response

UPLOAD_PATHS = frozenset({"/v1/audio/voices"})
"""Routes whose POST bodies are uploads with their own limit."""


def too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"The request body is larger than the server's limit of {limit} bytes "
        "(server.max_body_bytes).", param=None)


class BodyLimitMiddleware:
    """ASGI middleware: read a limited HTTP request body first, then hand it to the app.

    The app gets the whole body as one ``http.request`` message; later ``receive()`` calls go
    to the connection (a streamed response still sees the client's disconnect).

    Args:
        app: the ASGI app.
        limit: the largest body, in bytes.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS")
                or scope["path"] in UPLOAD_PATHS):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left while sending
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        whole: Message | None = {"type": "http.request", "body": b"".join(chunks),
                                 "more_body": False}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        # drained before the answer: uvicorn closes a `Connection: close` response's socket
        # as soon as its last byte is written, and unread body bytes then reset it
        await _discard_rest(receive)
        response = error_response(too_large(self.limit), {"Connection": "close"})
        await response(scope, receive, send)


DISCARD_MAX_BYTES = 64 * 2**20
DISCARD_TIMEOUT_S = 5.0


async def _discard_rest(receive: Receive) -> None:
    """Before the 413, read and drop what the client still sends (at most `DISCARD_MAX_BYTES`
    within `DISCARD_TIMEOUT_S`), keeping nothing. Closing with unread bytes makes the kernel
    reset the connection, and a proxy still writing the body (nginx sends it whole before it
    reads the answer) would then see a broken pipe and answer 502 instead of the 413."""
    dropped = 0
    try:
        async with asyncio.timeout(DISCARD_TIMEOUT_S):
            while dropped <= DISCARD_MAX_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return
                dropped += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return


__all__ = ["UPLOAD_PATHS", "BodyLimitMiddleware"]
