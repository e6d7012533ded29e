"""Typed errors and the HTTP status each maps to.

Every error a client can cause is a `VoxflowError` subclass carrying the OpenAI error fields
(`message`, `type`, `param`, `code`) and an HTTP status. The server turns them into
`{"error": {...}}` bodies; anything that is not a `VoxflowError` is an engine bug (500).
"""

from __future__ import annotations


class VoxflowError(Exception):
    """Base class: an error with an HTTP status and the OpenAI error fields."""

    status: int = 500
    type: str = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

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


class ModelNotFoundError(InvalidRequestError):
    """The requested `model` is not served here (404, as OpenAI answers)."""

    status = 404

    def __init__(self, model: str, served: list[str]):
        super().__init__(
            f"The model '{model}' does not exist. Served models: {', '.join(served)}.",
            param="model",
            code="model_not_found",
        )


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


class EngineNotReadyError(VoxflowError):
    """The engine is starting or stopping (503)."""

    status = 503
    type = "server_error"


class SynthesisError(VoxflowError):
    """A model stage failed on this request's input (500, with the stage named)."""

    status = 500
    type = "server_error"
