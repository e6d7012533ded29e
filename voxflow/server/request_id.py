"""Request ids on every response, and one access-log line per speech request.

`RequestIdMiddleware` (plain ASGI, so streamed bodies and disconnects pass through untouched)
gives each HTTP request an id: the client's ``X-Request-Id`` header when it is 1 to 128
characters of letters, digits and ``. _ : -``, else a new uuid4 hex. The id is put in
``request.state.request_id`` (the speech handler makes it the engine's request id, so the
engine's own log lines name it) and sent back as ``X-Request-Id`` on every response: audio,
errors, 404s, validation 400s, CORS preflights, `/health`, and a 500 from an unhandled exception.

For ``POST /v1/audio/speech`` (and ``/v1/audio/speech/timestamps``) it logs one line on the
``voxflow.access`` logger (INFO) when the response is over::

    request_id=4f2c... status=200 model=piper voice=joe chars=64 audio_s=3.215 ttfa_s=0.112
    total_s=0.654 stream=true format=mp3 complete=true

``ttfa_s`` is the time from the request's arrival to the first body byte of a 2xx response
(``-`` when none was sent), ``total_s`` to the end of the response, ``complete=false`` a body
cut off after its headers (timeout, stage failure, client gone), ``cache`` what the audio cache
said (``hit``, ``miss``, ``bypass``; ``-`` with the cache off: `voxflow.server.speech_cache`).
Fields the request never reached (a body that failed validation has no model) are ``-``. The
record also carries each field as an attribute (``record.request_id``, ``record.status``, ...)
for structured handlers.

Client-supplied text (``model``, ``voice``, ``format``) is made safe before it is written, in the
line and the attributes alike (`log_value`): cut to `LOG_VALUE_LIMIT` characters (a longer one
ends ``…[100,000_characters]``), and backslashes, spaces, control characters and other
non-printables escaped as Python writes them (``\\n``, ``\\x1b``, ``\\x20``, ``\\u2028``), so
one request is always exactly one line of space-separated ``key=value`` fields, whatever it sent.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voxflow.errors import ECHO_LIMIT, VoxflowError
from voxflow.server.errors import error_response

HEADER = "X-Request-Id"
MAX_LENGTH = 128
_SAFE = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_LENGTH}}}")
SPEECH_PATH = "/v1/audio/speech"
SPEECH_PATHS = (SPEECH_PATH, f"{SPEECH_PATH}/timestamps")
"""Routes that leave an access line (speech, and speech with word timestamps)."""

access_log = logging.getLogger("voxflow.access")

LOG_VALUE_LIMIT = ECHO_LIMIT
"""Characters of a client's value the access line keeps (before escaping)."""


def _escape(text: str) -> str:
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == " ":
            out.append("\\x20")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])  # \n, \x1b, \u2028, a lone surrogate's \ud800
    return "".join(out)


def log_value(text: str, limit: int = LOG_VALUE_LIMIT) -> str:
    """A client's text made safe for one ``key=value`` field of a log line: cut to `limit`
    characters (then ``…[N_characters]``), backslashes, spaces, control characters and other
    non-printables escaped, so it can neither add a line nor a field nor flood the log."""
    if len(text) <= limit:
        return _escape(text)
    return f"{_escape(text[:limit])}…[{len(text):,}_characters]"


def accepted_request_id(value: str | None) -> str | None:
    """`value` when it is a usable request id (1-128 characters of letters, digits, ``._:-``),
    else None (then the server makes its own)."""
    if value is not None and _SAFE.fullmatch(value):
        return value
    return None


def new_request_id() -> str:
    """A fresh request id (uuid4 hex, as the engine makes its own)."""
    return uuid.uuid4().hex


@dataclass
class AccessRecord:
    """What the access line of one speech request says; the speech handler fills the request's
    fields, the middleware the response's.

    Attributes:
        request_id: the request's id (the ``X-Request-Id`` sent back).
        started_at: `time.perf_counter()` at arrival.
        model, voice: the served model and voice (aliases resolved), once the body is valid.
        chars: characters of `input`.
        fmt: `response_format`.
        stream: whether the body was streamed (None before the handler decided).
        audio: a callable giving the audio seconds produced so far (set once submitted).
        status: the response's status code (None until headers leave).
        first_byte_at: perf_counter of the first non-empty body of a 2xx response.
        complete: True once the final body message was sent.
        ignored: the body's fields the server did not act on, comma-separated (unknown
            fields; instructions a model cannot follow), or None.
        client: the client's address: the peer's, or the one a trusted proxy forwarded
            (``X-Forwarded-For`` from an address in ``server.trusted_proxies``).
        cache: what the audio cache said (hit, miss, bypass; None with the cache off or
            before the check).
    """

    request_id: str
    started_at: float = field(default_factory=time.perf_counter)
    model: str | None = None
    voice: str | None = None
    chars: int | None = None
    fmt: str | None = None
    stream: bool | None = None
    audio: Any = None
    status: int | None = None
    first_byte_at: float | None = None
    complete: bool = False
    ignored: str | None = None
    client: str | None = None
    cache: str | None = None

    def fields(self, now: float) -> dict[str, Any]:
        """The access line's fields, in order (None for unknown); text fields made safe by
        `log_value` (the client chose them)."""
        audio_s = self.audio() if self.audio is not None else None
        ttfa = None if self.first_byte_at is None else self.first_byte_at - self.started_at
        return {
            "request_id": self.request_id,
            "status": self.status,
            "model": self.model,
            "voice": self.voice,
            "chars": self.chars,
            "audio_s": None if audio_s is None else round(audio_s, 3),
            "ttfa_s": None if ttfa is None else round(ttfa, 3),
            "total_s": round(now - self.started_at, 3),
            "stream": self.stream,
            "format": self.fmt,
            "complete": self.complete,
            "ignored": self.ignored,
            "client": self.client,
            "cache": self.cache,
        } | {key: log_value(value) for key, value in (
            ("model", self.model), ("voice", self.voice), ("format", self.fmt),
            ("ignored", self.ignored), ("client", self.client))
            if isinstance(value, str)}  # request_id is safe by construction (accepted_request_id)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def log_access(record: AccessRecord) -> None:
    """Write `record`'s line to ``voxflow.access`` (INFO), its fields also as attributes."""
    values = record.fields(time.perf_counter())
    line = " ".join(f"{key}={_text(value)}" for key, value in values.items())
    access_log.info(line, extra=values)


def _record_for(scope: Scope) -> AccessRecord:
    """A new access record for an HTTP request: its id (the client's ``X-Request-Id`` when
    usable, else a new one) and the client's address (uvicorn puts a trusted proxy's
    ``X-Forwarded-For`` in ``scope["client"]``)."""
    given = None
    for key, value in scope.get("headers", ()):
        if key == b"x-request-id":
            given = accepted_request_id(value.decode("latin-1"))
            break
    record = AccessRecord(given or new_request_id())
    if scope.get("client"):
        record.client = str(scope["client"][0])
    return record


class RequestIdMiddleware:
    """ASGI middleware: request ids on every response, access lines for speech (module doc).

    Add it last (outermost), so CORS preflights and every error response pass through it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = _record_for(scope)
        state = scope.setdefault("state", {})
        state["request_id"] = record.request_id
        state["access"] = record
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                headers[HEADER] = record.request_id  # replaces one the route set
                record.status = message["status"]
            elif message["type"] == "http.response.body":
                if (message.get("body") and record.first_byte_at is None
                        and record.status is not None and record.status < 300):
                    record.first_byte_at = time.perf_counter()
                if not message.get("more_body", False):
                    record.complete = True
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            if not started:
                # The app's 500 handler answers outside this middleware (Starlette's
                # ServerErrorMiddleware); answer here so the 500 carries the id too. The
                # exception goes on to that handler, which logs it and sends nothing more.
                error = VoxflowError("The server had an error while processing the request.")
                response = error_response(error, headers={HEADER: record.request_id})
                await response(scope, receive, send_with_id)
            raise
        finally:
            if scope.get("path") in SPEECH_PATHS and scope.get("method") == "POST":
                log_access(record)


__all__ = [
    "HEADER",
    "AccessRecord",
    "RequestIdMiddleware",
    "accepted_request_id",
    "log_access",
    "log_value",
    "new_request_id",
]
