"""HTTP requests and the drain (`voxflow.engine.drain`): while the server drains, a new request
is refused with 503 ``shutting_down`` and ``Retry-After`` (``/health`` and ``/metrics`` still
answer: ``/health`` says ``draining``); until then every request is tracked for its whole
response, streamed bodies included, so the drain waits for it."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from voxflow.engine.drain import Drain
from voxflow.errors import ShuttingDownError
from voxflow.server.errors import error_response

OPEN_WHILE_DRAINING = frozenset({"/health", "/metrics"})
"""Paths answered while the server drains: a load balancer reads /health to stop sending."""


class DrainMiddleware:
    """ASGI middleware: refuse (while draining) or track each HTTP request (module docstring).

    WebSocket sessions are refused and tracked by their route (`voxflow.server.speech_stream`),
    which can say why in the protocol's own error event.
    """

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_WHILE_DRAINING:
            await self.app(scope, receive, send)
            return
        try:
            self.drain.check()
        except ShuttingDownError as exc:
            await error_response(exc, {"Connection": "close"})(scope, receive, send)
            return
        with self.drain.activity():
            await self.app(scope, receive, send)


__all__ = ["OPEN_WHILE_DRAINING", "DrainMiddleware"]
