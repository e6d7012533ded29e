"""API keys: with ``server.api_keys`` set, every route but the open ones needs a key.

`ApiKeyMiddleware` (plain ASGI, so streamed bodies pass through untouched) checks the
``Authorization: Bearer KEY`` header of each HTTP request and WebSocket handshake before any
route runs (before a body is read): a missing key is a 401 ``missing_api_key``, a wrong key or
another scheme (``Basic ...``) a 401 ``invalid_api_key``, both in the OpenAI error shape with
``WWW-Authenticate: Bearer realm="voxflow"``; a refused WebSocket handshake is closed with
1008. The key is compared in constant time: the SHA-256 digest of what was sent against the
digest of every key with `hmac.compare_digest`, all keys every time, so neither the time
taken nor an early exit tells how much of a key was right, which key matched, or how long
the keys are. Only the digests are kept. Nothing the client sent is quoted in the answer or
the log line of a refusal.

Open without a key: `OPEN_PATHS` (``/health``, which says whether a key is needed, the
API docs pages ``/docs``, ``/redoc``, ``/openapi.json`` and their files under `DOCS_ASSETS`, and
the playground's page and files,
`voxflow.server.playground.PAGE_PATHS`, which ask for a key themselves) and ``/metrics`` when
``server.metrics_public``; the read-only listings (`LISTINGS`) when ``server.listings_public``.
Everything else, unknown routes included, needs the key. CORS
preflights never reach this middleware when CORS is on (`voxflow.server.cors` answers them;
browsers send no ``Authorization`` on a preflight), and a 401 goes back through CORS, so a page
can read it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from voxflow.config import ServerSettings
from voxflow.errors import AuthenticationError
from voxflow.server.errors import error_response
from voxflow.server.playground import PAGE_PATHS
from voxflow.server.request_id import log_value

log = logging.getLogger(__name__)

DOCS_ASSETS = "/docs/assets"
"""Where the API pages' scripts and styles are served (`voxflow.server.app`)."""

OPEN_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json",
                        f"GET {DOCS_ASSETS}/*"} | PAGE_PATHS)
"""Paths served without a key even when keys are set (the playground's files and the docs
pages' assets among them)."""

METRICS_PATH = "/metrics"

WWW_AUTHENTICATE = 'Bearer realm="voxflow"'
"""The ``WWW-Authenticate`` header of every 401 (RFC 6750)."""

SCHEME_NAME = "bearerAuth"
"""The security scheme's name in /openapi.json."""

MISSING_MESSAGE = (
    "You didn't provide an API key. Send it in an Authorization header using Bearer auth: "
    "'Authorization: Bearer YOUR_KEY'."
)
SCHEME_MESSAGE = (
    "Incorrect API key provided: the Authorization header must use Bearer auth: "
    "'Authorization: Bearer YOUR_KEY'."
)
WRONG_KEY_MESSAGE = (
    "Incorrect API key provided. Send one of this server's keys (server.api_keys, "
    "server.api_keys_file, VOXFLOW_API_KEYS) as 'Authorization: Bearer YOUR_KEY'."
)


LISTINGS = frozenset({"GET /v1/models", "GET /v1/models/*", "GET /v1/audio/voices",
                      "GET /v1/audio/models"})
"""The read-only listings, open without a key under ``server.listings_public`` (Open WebUI reads
voices and models without sending its key). ``METHOD PATH`` entries open that method only; a
path ending in ``/*`` opens everything below it."""


def open_paths(server: ServerSettings) -> frozenset[str]:
    """The paths (and ``METHOD PATH`` entries) served without a key under `server`'s
    settings."""
    public = (OPEN_PATHS | {METRICS_PATH}) if server.metrics_public else OPEN_PATHS
    return public | LISTINGS if server.listings_public else public


def is_open(public: frozenset[str], method: str, path: str) -> bool:
    """Whether `method` `path` is served without a key: `path` is in `public`, or
    ``METHOD PATH`` is, or a ``METHOD PREFIX/*`` entry covers it."""
    if path in public or f"{method} {path}" in public:
        return True
    head, _, _ = path.rpartition("/")
    return bool(head) and f"{method} {head}/*" in public


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class KeyRing:
    """The SHA-256 digests of the API keys; `matches` checks a presented key in constant time."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = tuple(_digest(key.encode("utf-8")) for key in keys)
        if not self._digests:
            raise ValueError("a KeyRing needs at least one key")

    def matches(self, token: bytes) -> bool:
        """Whether `token` is one of the keys: its digest compared with every key's digest
        (`hmac.compare_digest`, no early exit), so the time does not depend on which key
        matched or on how much of one did."""
        digest = _digest(token)
        found = False
        for key in self._digests:
            found |= hmac.compare_digest(digest, key)
        return found

    def check(self, authorization: bytes | None) -> AuthenticationError | None:
        """None when the ``Authorization`` header value `authorization` carries a valid key,
        else the 401 to answer (`missing_api_key` or `invalid_api_key`)."""
        parts = (authorization or b"").split(None, 1)
        if not parts:
            return AuthenticationError(MISSING_MESSAGE, code="missing_api_key")
        if parts[0].lower() != b"bearer":
            return AuthenticationError(SCHEME_MESSAGE, code="invalid_api_key")
        token = parts[1].strip() if len(parts) > 1 else b""
        if not token:
            return AuthenticationError(MISSING_MESSAGE, code="missing_api_key")
        if not self.matches(token):
            return AuthenticationError(WRONG_KEY_MESSAGE, code="invalid_api_key")
        return None


def _authorization(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return value
    return None


class ApiKeyMiddleware:
    """ASGI middleware: refuse requests without a valid key, except on `public` paths.

    Add it before (inside) CORS and the request-id middleware, so its 401s carry
    ``Access-Control-Allow-Origin`` and ``X-Request-Id`` like every other answer.
    """

    def __init__(self, app: ASGIApp, keys: KeyRing, public: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.keys = keys
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or is_open(
                self.public, scope.get("method", "WEBSOCKET"), scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        error = self.keys.check(_authorization(scope))
        if error is None:
            await self.app(scope, receive, send)
            return
        _log_refusal(scope, error)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": error.code})
            return
        response = error_response(error, headers={"WWW-Authenticate": WWW_AUTHENTICATE})
        await response(scope, receive, send)


def _log_refusal(scope: Scope, error: AuthenticationError) -> None:
    state: dict[str, Any] = scope.get("state") or {}
    client = scope.get("client")
    log.info(
        "refused %s %s: %s (request_id=%s client=%s)",
        scope.get("method", "WEBSOCKET"), log_value(scope.get("path", "")), error.code,
        state.get("request_id", "-"), client[0] if client else "-",
    )


def document_bearer_auth(schema: dict[str, Any], public: frozenset[str]) -> None:
    """Declare the bearer scheme in an OpenAPI document (the Authorize button of /docs) and a
    401 on every operation outside `public`."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SCHEME_NAME] = {
        "type": "http", "scheme": "bearer",
        "description": "One of the server's API keys (server.api_keys).",
    }
    unauthorized = {
        "description": "No API key (`missing_api_key`) or a wrong one (`invalid_api_key`).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if is_open(public, method.upper(), path):
                continue
            operation["security"] = [{SCHEME_NAME: []}]
            operation.setdefault("responses", {})["401"] = unauthorized


__all__ = [
    "OPEN_PATHS",
    "WWW_AUTHENTICATE",
    "ApiKeyMiddleware",
    "KeyRing",
    "document_bearer_auth",
    "is_open",
    "open_paths",
]
