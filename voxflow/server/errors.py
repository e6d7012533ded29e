"""Exception handlers: every error leaves the server in the OpenAI error shape.

- `VoxflowError` -> its own status and fields (429 adds `Retry-After`).
- Request validation (bad JSON, wrong types, missing or unknown fields) -> 400 naming the field,
  in our words (never the validation library's) with a stable code.
- Unknown route or method -> 404/405 in the same shape.
- Anything else is a server bug -> 500 with a generic message (details only in the log).

`code` is never null; the codes are listed in docs/api.md ("Errors"). Client values quoted in
a message go through `voxflow.errors.echo`, which cuts them to a short bound.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from voxflow.errors import (
    InvalidRequestError,
    OverloadedError,
    ShuttingDownError,
    VoxflowError,
    clip,
    echo,
)

log = logging.getLogger(__name__)


class ErrorJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a message quoting a client's lone surrogate (valid in JSON
    escapes, not encodable as UTF-8) must still serialize instead of turning into a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(
    error: VoxflowError, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The JSON response for a typed error (with `Retry-After` for 429 and for a 503 while the
    server drains)."""
    headers = dict(headers or {})
    if isinstance(error, (OverloadedError, ShuttingDownError)):
        headers["Retry-After"] = str(error.retry_after)
    return ErrorJSONResponse(error.to_dict(), status_code=error.status, headers=headers)


def _field_path(loc: tuple) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    # Union members (e.g. "str", "VoiceRef") show up in loc; keep the field names only.
    fields = [p for p in parts if not p[:1].isupper() and p not in ("str", "int", "float")]
    return ".".join(fields)


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type: "a string", "an array", "null"...; "" for
    anything that did not come from JSON (a form body)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return ""


# pydantic error type -> what the field takes, for "Invalid type for 'x': expected ..., got ...".
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}

# Our own validators (schemas.py) raise ValueError with our sentence; its code by field.
_VALUE_ERROR_CODES = {"voice": "invalid_type", "instructions": "unsupported_parameter"}

BODY_EXAMPLE = '{"model": "piper", "input": "Hello.", "voice": "joe"}'


def _body_error(first: dict) -> InvalidRequestError:
    """The 400 for a body that is not a JSON object at all (code invalid_json)."""
    kind = first.get("type", "")
    if kind == "json_invalid":
        loc = tuple(first.get("loc", ()))
        where = f" (at character {loc[1]})" if len(loc) > 1 and isinstance(loc[1], int) else ""
        return InvalidRequestError(
            f"Request body is not valid JSON{where}; send a JSON object like {BODY_EXAMPLE}.",
            code="invalid_json",
        )
    if kind == "missing":
        return InvalidRequestError(
            f"Request body is empty; send a JSON object like {BODY_EXAMPLE}.", code="invalid_json"
        )
    got = _json_type(first.get("input"))
    return InvalidRequestError(
        f"Request body must be a JSON object like {BODY_EXAMPLE} (with Content-Type: "
        f"application/json){f', not {got}' if got else ''}.",
        code="invalid_json",
    )


def validation_error(exc: RequestValidationError) -> InvalidRequestError:
    """Turn pydantic's first error into a 400 in our words that names the field.

    Codes: ``invalid_json`` (no JSON object), ``unknown_parameter``,
    ``missing_required_parameter``, ``invalid_type``, ``invalid_value``,
    ``unsupported_parameter`` (docs/api.md, "Errors"). pydantic's own wording never reaches the
    client; values it quotes back are cut by `echo`.
    """
    errors = exc.errors()
    first = errors[0] if errors else {"loc": ("body",), "type": "model_attributes_type"}
    loc = tuple(first.get("loc", ()))
    kind = first.get("type", "")
    if kind == "json_invalid" or loc == ("body",):
        return _body_error(first)
    field = _field_path(loc)
    name = clip(field)
    value = first.get("input")
    ctx: dict[str, Any] = first.get("ctx") or {}  # type: ignore[assignment]
    if kind == "extra_forbidden":
        return InvalidRequestError(
            f"Unrecognized request argument supplied: '{name}'.", param=field,
            code="unknown_parameter",
        )
    if kind == "missing":
        return InvalidRequestError(
            f"Missing required parameter: '{name}'.", param=field,
            code="missing_required_parameter",
        )
    if kind in _EXPECTED:
        return InvalidRequestError(
            f"Invalid type for '{name}': expected {_EXPECTED[kind]}, got {_json_type(value)}.",
            param=field, code="invalid_type",
        )
    if kind == "value_error":
        reason = str(ctx.get("error", "")) or "not accepted"
        code = _VALUE_ERROR_CODES.get(field, "invalid_value")
        what = "type" if code == "invalid_type" else "value"
        return InvalidRequestError(
            f"Invalid {what} for '{name}': {reason}.", param=field, code=code
        )
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", "")).replace("'", "")
        return InvalidRequestError(
            f"Invalid value for '{name}': {echo(value)}; supported values: {expected}.",
            param=field, code="invalid_value",
        )
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        bound = {"greater_than_equal": "at least", "less_than_equal": "at most",
                 "greater_than": "more than", "less_than": "less than"}[kind]
        limit = next(iter(ctx.values()), "")
        return InvalidRequestError(
            f"Invalid value for '{name}': {echo(value)}; it must be {bound} {limit}.",
            param=field, code="invalid_value",
        )
    if kind in ("string_too_short", "string_too_long"):
        n = len(value) if isinstance(value, str) else 0
        if kind == "string_too_short" and n == 0:
            return InvalidRequestError(
                f"Invalid value for '{name}': it must not be empty.", param=field,
                code="invalid_value",
            )
        bound, limit = (
            ("at least", ctx.get("min_length")) if kind == "string_too_short"
            else ("at most", ctx.get("max_length"))
        )
        return InvalidRequestError(
            f"Invalid value for '{name}': {echo(value)} is {_characters(n)} long; it must be "
            f"{bound} {_characters(limit)} long.",
            param=field, code="invalid_value",
        )
    return InvalidRequestError(
        f"Invalid value for '{name}': {echo(value)}.", param=field or None, code="invalid_value"
    )


def _characters(n: object) -> str:
    """``1 character``, ``35 characters``."""
    return f"{n} character" if n == 1 else f"{n} characters"


_HTTP_CODES = {400: "invalid_json", 404: "not_found", 405: "method_not_allowed"}


def http_error(status: int, method: str, path: str) -> VoxflowError:
    """The error for a framework HTTP status: unknown route (404), wrong method (405), a body
    the framework could not read (400); codes ``not_found``, ``method_not_allowed``,
    ``invalid_json``, else ``http_error``."""
    where = clip(path)
    message = {
        400: f"Request body could not be read; send a JSON object like {BODY_EXAMPLE}.",
        404: f"No route {method} {where}; the endpoints are listed at /docs (and in "
             "docs/api.md).",
        405: f"Method {method} is not allowed on {where}.",
    }.get(status, f"HTTP {status} on {method} {where}.")
    error = VoxflowError(message, code=_HTTP_CODES.get(status, "http_error"))
    error.status = status
    error.type = "invalid_request_error" if status < 500 else "server_error"
    return error


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on `app`."""

    @app.exception_handler(VoxflowError)
    async def _voxflow(_: Request, exc: VoxflowError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI raises a 400 HTTPException when it cannot parse the body at all.
        error = http_error(exc.status_code, request.method, request.url.path)
        return error_response(error, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(VoxflowError("The server had an error while processing the request."))
