"""Exception handlers: every error leaves the server in the OpenAI error shape.

- `VoxflowError` -> its own status and fields (429 adds `Retry-After`).
- Request validation (bad JSON, wrong types, missing or unknown fields) -> 400 naming the field.
- Unknown route or method -> 404/405 in the same shape.
- Anything else is a server bug -> 500 with a generic message (details only in the log).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from voxflow.errors import InvalidRequestError, OverloadedError, VoxflowError

log = logging.getLogger(__name__)


class ErrorJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a message quoting a client's lone surrogate (valid in JSON
    escapes, not encodable as UTF-8) must still serialize instead of turning into a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(error: VoxflowError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON response for a typed error (with `Retry-After` for 429)."""
    headers = dict(headers or {})
    if isinstance(error, OverloadedError):
        headers["Retry-After"] = str(error.retry_after)
    return ErrorJSONResponse(error.to_dict(), status_code=error.status, headers=headers)


def _field_path(loc: tuple) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    # Union members (e.g. "str", "VoiceRef") show up in loc; keep the field names only.
    fields = [p for p in parts if not p[:1].isupper() and p not in ("str", "int", "float")]
    return ".".join(fields)


def validation_error(exc: RequestValidationError) -> InvalidRequestError:
    """Turn pydantic's first error into a 400 that names the field."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return InvalidRequestError(f"Request body is not valid JSON: {first['msg']}.",
                                   code="invalid_json")
    loc = tuple(first.get("loc", ()))
    if loc == ("body",):
        if first.get("type") == "missing":
            return InvalidRequestError("Request body is empty; send a JSON object.",
                                       code="invalid_json")
        return InvalidRequestError(
            "Request body must be a JSON object (send Content-Type: application/json): "
            f"{first['msg']}.", code="invalid_json",
        )
    field = _field_path(loc)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        message = f"Unrecognized request argument supplied: {field}."
    elif kind == "missing":
        message = f"Missing required parameter: '{field}'."
    else:
        message = f"Invalid value for '{field}': {first['msg']}."
    return InvalidRequestError(message, param=field or None, code=kind or None)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on `app`."""

    @app.exception_handler(VoxflowError)
    async def _voxflow(_: Request, exc: VoxflowError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI raises a 400 HTTPException when it cannot parse the body at all.
        code = "invalid_json" if exc.status_code == 400 else str(exc.status_code)
        error = VoxflowError(str(exc.detail), code=code)
        error.status = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return error_response(error, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(VoxflowError("The server had an error while processing the request."))
