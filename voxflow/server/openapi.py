"""What `/docs` and `/openapi.json` say about errors: the responses the server really sends.

FastAPI documents a 422 ``HTTPValidationError`` on every route with a body or parameters; the
server never sends one (`voxflow.server.errors` answers every validation failure with a 400 in
the OpenAI error shape). `install_openapi` drops the 422s and their schemas from the generated
document, and `error_responses` declares the real ones on a route, each with `ErrorBody`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """The ``error`` object of every error response."""

    message: str = Field(description="What went wrong, in a sentence (at most 1,000 characters).")
    type: str = Field(description="`invalid_request_error`, `rate_limit_error`, "
                      "`timeout_error` or `server_error`.")
    param: str | None = Field(description="The request field at fault; null when no one is.")
    code: str = Field(description="A stable code (never null); the table is in docs/api.md, "
                      "\"Errors\".")


class ErrorBody(BaseModel):
    """Every error the server sends: the OpenAI error shape."""

    error: ErrorDetail


ERROR_STATUSES: dict[int, str] = {
    400: "A malformed request (bad JSON, a wrong type, a missing or unknown field, a value out "
         "of range, an unknown voice, an empty input...), or a refused CORS preflight.",
    403: "A voice that cannot be deleted: built-in or default (`voice_not_deletable`).",
    404: "Unknown model (`model_not_found`), voice (`voice_not_found`) or route "
         "(`not_found`).",
    405: "Wrong method for the route (`Allow` says which).",
    409: "A voice of that name exists, or was deleted and is still in use "
         "(`voice_exists`, `voice_in_use`).",
    413: "A JSON body over `server.max_body_bytes`, or an upload over "
         "`server.max_voice_upload_bytes` (`payload_too_large`).",
    429: "Admission limits reached (`overloaded`); `Retry-After` says when to retry.",
    500: "A model stage failed (`synthesis_failed`), a worker thread died and was restarted "
         "(`worker_died`), a file could not be written "
         "(`storage_failed`, the cause and folder named) or an engine bug (`server_error`).",
    503: "A model is not ready (`model_not_ready`), or the server is stopping "
         "(`shutting_down`, with `Retry-After`).",
    504: "Past `engine.request_timeout_s` (`timeout`).",
    507: "No space left to save the voice (`insufficient_storage`; the folder named).",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status with its description and `ErrorBody`."""
    return {status: {"model": ErrorBody, "description": ERROR_STATUSES[status]}
            for status in statuses}


_NEVER_SENT = ("HTTPValidationError", "ValidationError")


def install_openapi(app: FastAPI, extend: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Make `app`'s OpenAPI document drop FastAPI's 422 responses and their schemas; then
    `extend`, when given, edits the document (the API keys' security scheme)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = schema.get("components", {}).get("schemas", {})
            for name in _NEVER_SENT:
                schemas.pop(name, None)
            if extend is not None:
                extend(schema)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]


__all__ = ["ERROR_STATUSES", "ErrorBody", "ErrorDetail", "error_responses", "install_openapi"]
