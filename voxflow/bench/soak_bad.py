"""The bad requests of ``voxflow bench soak``: realistic mistakes, and the answer each must get.

Each `BadCase` spoils a valid speech request body in one way that apps really get wrong (a voice
or model the server does not have, an unknown format, a speed out of range, an empty, missing or
too long input, a truncated JSON body) and names the 4xx status and error ``code`` that
docs/api.md ("Errors") promises for it. `error_code` checks that an answer is in OpenAI's error
shape, ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]


@dataclass(frozen=True)
class BadCase:
    """One way to spoil a body: `spoil(body, max_input_chars)` returns the bytes to send."""

    name: str
    status: int
    code: str
    spoil: Callable[[Body, int], bytes]


def _dumps(body: Body) -> bytes:
    return json.dumps(body).encode()


def _with(**fields: Any) -> Callable[[Body, int], bytes]:
    return lambda body, _limit: _dumps({**body, **fields})


def _without(name: str) -> Callable[[Body, int], bytes]:
    return lambda body, _limit: _dumps({k: v for k, v in body.items() if k != name})


def _too_long(body: Body, limit: int) -> bytes:
    """The body's text repeated past `limit` characters (the server's max_input_chars)."""
    text = str(body["input"]) or "x"
    return _dumps({**body, "input": (text + " ") * (limit // (len(text) + 1) + 1)})


def _truncated(body: Body, _limit: int) -> bytes:
    """The JSON cut before its closing brace, as a client that lost its last write sends it."""
    return _dumps(body)[:-1]


BAD_CASES: tuple[BadCase, ...] = (
    BadCase("unknown_voice", 400, "voice_not_found", _with(voice="no-such-voice")),
    BadCase("unknown_model", 404, "model_not_found", _with(model="no-such-model")),
    BadCase("bad_format", 400, "invalid_value", _with(response_format="ogg")),
    BadCase("speed_out_of_range", 400, "speed_out_of_range", _with(speed=5.0)),
    BadCase("empty_input", 400, "empty_input", _with(input="")),
    BadCase("missing_input", 400, "missing_required_parameter", _without("input")),
    BadCase("input_too_long", 400, "input_too_long", _too_long),
    BadCase("malformed_json", 400, "invalid_json", _truncated),
)
BY_NAME = {case.name: case for case in BAD_CASES}


def bad_body(name: str, body: Body, max_input_chars: int) -> bytes:
    """The bytes of `body` spoiled by the bad case `name`.

    Raises:
        KeyError: no bad case has that name.
    """
    return BY_NAME[name].spoil(body, max_input_chars)


def error_code(data: bytes) -> str | None:
    """The ``code`` of an OpenAI-shaped error body, or None when `data` is not one.

    The shape: a JSON object whose ``error`` object has a string ``message``, ``type`` and
    ``code`` and a ``param`` that is a string or null.
    """
    try:
        error = json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(error, dict):
        return None
    strings = all(isinstance(error.get(k), str) for k in ("message", "type", "code"))
    param = "param" in error and (error["param"] is None or isinstance(error["param"], str))
    return error["code"] if strings and param else None
