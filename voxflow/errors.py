"""Typed errors and the HTTP status each maps to.

Every error a client can cause is a `VoxflowError` subclass carrying the OpenAI error fields
(`message`, `type`, `param`, `code`) and an HTTP status. The server turns them into
`{"error": {...}}` bodies; anything that is not a `VoxflowError` is an engine bug (500).
"""

from __future__ import annotations

import errno
from pathlib import Path

ECHO_LIMIT = 64
"""Characters of a client's value an error message quotes back (`echo`)."""

MESSAGE_LIMIT = 1000
"""Characters of an error message sent at most; the rest is cut (a backstop to `echo`)."""


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` cut to `limit` characters: ``abc`` or ``abcd…`` + `` (100,000 characters)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """A client's value quoted for an error message, cut to `limit` characters.

    Every message that names what the client sent goes through here, so a 100,000-character
    voice name costs 100 bytes in its 400, not 100 kB: ``'joe'``, or
    ``'xxxx…' (100,000 characters)``. Non-strings are shown as JSON would write them.
    """
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, bool):
        text = {None: "null", True: "true", False: "false"}[value]
    else:
        text = repr(value)
    if len(text) <= limit:
        return f"'{text}'"
    return f"'{text[:limit]}…' ({len(text):,} characters)"


class VoxflowError(Exception):
    """Base class: an error with an HTTP status and the OpenAI error fields.

    `code` is never null: a subclass's `default_code` stands in when none is given (the codes
    are listed in docs/api.md, "Errors"). A message longer than `MESSAGE_LIMIT` is cut.
    """

    status: int = 500
    type: str = "server_error"
    default_code: str = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        if len(message) > MESSAGE_LIMIT:
            message = message[:MESSAGE_LIMIT] + "…"
        super().__init__(message)
        self.message = message
        self.param = clip(param) if param is not None else None
        self.code = code or self.default_code

    def to_dict(self) -> dict:
        """The OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequestError(VoxflowError):
    """The request is malformed or names something that does not exist (400)."""

    status = 400
    type = "invalid_request_error"
    default_code = "invalid_request"


class AuthenticationError(InvalidRequestError):
    """A request without a valid API key where the server requires one (401).

    Codes: ``missing_api_key`` (no key sent) and ``invalid_api_key`` (a key that is not one
    of the server's, or an ``Authorization`` header that is not ``Bearer KEY``). The message
    never quotes what the client sent.
    """

    status = 401
    default_code = "invalid_api_key"


class ModelNotFoundError(InvalidRequestError):
    """The requested `model` is not served here (404, as OpenAI answers)."""

    status = 404

    def __init__(self, model: str, served: list[str], hint: str = ""):
        """`hint`: a sentence added at the end (where another deployment serves `model`)."""
        message = f"The model {echo(model)} does not exist. Served models: {', '.join(served)}."
        super().__init__(
            f"{message} {hint}." if hint else message,
            param="model",
            code="model_not_found",
        )


class VoiceNotFoundError(InvalidRequestError):
    """A voice named in the path does not exist (404)."""

    status = 404
    default_code = "voice_not_found"


class VoiceForbiddenError(InvalidRequestError):
    """A change to a voice that is not allowed, e.g. deleting a built-in voice (403)."""

    status = 403
    default_code = "voice_not_deletable"


class ConflictError(InvalidRequestError):
    """The request conflicts with the current state, e.g. a voice name taken (409)."""

    status = 409
    default_code = "conflict"


class PayloadTooLargeError(InvalidRequestError):
    """A request body over the server's size limit (413); the body is not read further."""

    status = 413
    default_code = "payload_too_large"


class OverloadedError(VoxflowError):
    """Admission control refused the request (429); `retry_after` is in seconds."""

    status = 429
    type = "rate_limit_error"

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message, code="overloaded")
        self.retry_after = retry_after


class RequestTimeoutError(VoxflowError):
    """The request ran past its deadline (504)."""

    status = 504
    type = "timeout_error"

    def __init__(self, timeout_s: float):
        super().__init__(
            f"Synthesis did not finish within the {timeout_s:g} s request timeout.",
            code="timeout",
        )


class ClientStalledError(VoxflowError):
    """The client read nothing of its streamed audio for `server.client_stall_timeout_s`
    seconds: its request is cancelled (408 ``client_stalled``; the client, not reading, rarely
    sees it: its response ends incomplete)."""

    status = 408
    type = "timeout_error"

    def __init__(self, stall_s: float):
        super().__init__(
            f"The client read none of its audio for {stall_s:g} s; the request was cancelled.",
            code="client_stalled",
        )


class TextStalledError(VoxflowError):
    """A request fed with text while it runs (a WebSocket stream feeding one generation) got
    no text, and no end, for its model's text timeout: it is ended and its state freed (408
    ``text_timeout``)."""

    status = 408
    type = "timeout_error"

    def __init__(self, idle_s: float):
        super().__init__(
            f"No text arrived for {idle_s:g} s and the stream did not end; the generation was "
            "ended. Send text (or an end message) more often.",
            code="text_timeout",
        )


class EngineNotReadyError(VoxflowError):
    """The engine is starting or stopping (503)."""

    status = 503
    type = "server_error"
    default_code = "model_not_ready"


class ShuttingDownError(VoxflowError):
    """The server is draining before it stops (503 ``shutting_down``, with ``Retry-After``):
    a new request is refused, and one still running when the drain times out ends with it."""

    status = 503
    type = "server_error"
    default_code = "shutting_down"

    def __init__(self, message: str = "The server is shutting down; retry on another "
                 "replica or after the restart.", retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class VoiceStoreError(VoxflowError):
    """The store that shares saved voices between Ray Serve replicas cannot be reached (503
    ``voice_store_unavailable``): the voice was neither created nor deleted; retry."""

    status = 503
    type = "server_error"
    default_code = "voice_store_unavailable"


class StorageError(VoxflowError):
    """A file the server had to write could not be: 507 ``insufficient_storage`` when the disk
    (or quota) is full, else 500 ``storage_failed`` (read-only folder, no permission...); the
    message names the cause and the folder."""

    type = "server_error"

    def __init__(self, message: str, *, full: bool):
        super().__init__(message, code="insufficient_storage" if full else "storage_failed")
        self.status = 507 if full else 500


_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_error(exc: OSError, action: str, folder: Path) -> StorageError:
    """The `StorageError` for `exc`, raised while doing `action` (e.g. "save voice 'anna'")
    in `folder`: 507 when the disk or quota is full, else 500; the message names the cause
    (the OS's words) and the folder."""
    full = exc.errno in _FULL
    cause = exc.strerror or type(exc).__name__
    return StorageError(f"Cannot {action} in {folder}: {cause}"
                        + (" (the disk is full)." if full else "."), full=full)


class SynthesisError(VoxflowError):
    """A model stage failed on this request's input (500, with the stage named)."""

    status = 500
    type = "server_error"
    default_code = "synthesis_failed"


class WorkerDiedError(SynthesisError):
    """The worker thread running this request's batch died (an exception in the engine's code
    around a stage's run, not the stage's own) and was restarted (500 ``worker_died``;
    `voxflow.engine.supervisor`). The message names the stage and thread, not the exception's
    text (that is in the server log)."""

    default_code = "worker_died"

    def __init__(self, stage: str, thread: str, error: str):
        super().__init__(f"The worker thread {thread} of stage '{stage}' died ({error}) while "
                         "running this request; it was restarted. Details are in the server log.")
