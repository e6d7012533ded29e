"""``/v1/audio/lexicons``: list, save, read and delete pronunciation lexicons (issue 44).

``PUT /v1/audio/lexicons/{name}`` takes the lexicon JSON (``application/json``,
`voxflow.lexicons.lexicon`) or a W3C PLS file (``application/pls+xml``, ``application/xml`` or
``text/xml``; `voxflow.lexicons.pls`), at most `server.max_body_bytes`, and saves it atomically
(`voxflow.lexicons.store`); it answers the lexicon's summary with ``created`` (true for a new
name). GET lists them or answers one with its entries; DELETE removes one, unless the
configuration names it as a default (403). Every error is in the OpenAI shape (docs/api.md,
"Pronunciation lexicons").
"""

from __future__ import annotations

import json

from fastapi import Request

from voxflow.atomic_files import name_problem
from voxflow.engine.engine import Engine
from voxflow.errors import (
    InvalidRequestError,
    VoiceForbiddenError,
    VoiceNotFoundError,
    echo,
    storage_error,
)
from voxflow.lexicons.lexicon import Lexicon, parse_lexicon
from voxflow.lexicons.pls import parse_pls
from voxflow.lexicons.store import SUFFIX
from voxflow.server.voices import read_limited_body

__all__ = ["delete_lexicon", "get_lexicon", "list_lexicons", "put_lexicon"]

PLS_TYPES = ("application/pls+xml", "application/xml", "text/xml")


def _summary(name: str, lexicon: Lexicon) -> dict:
    return {"id": name, "object": "lexicon", "version": lexicon.version,
            "language": lexicon.language, "entries": len(lexicon.entries)}


def _check_name(name: str) -> None:
    problem = name_problem(name, SUFFIX)
    if problem is not None:
        raise InvalidRequestError(f"Invalid lexicon name {echo(name)}; {problem}.",
                                  param="name", code="invalid_lexicon_name")


def _found(engine: Engine, name: str) -> Lexicon:
    lexicon = engine.lexicons.store.get(name)
    if lexicon is None:
        raise VoiceNotFoundError(f"No lexicon {echo(name)}; GET /v1/audio/lexicons lists "
                                 "them.", param="name", code="lexicon_not_found")
    return lexicon


def _parse(content_type: str, body: bytes) -> Lexicon:
    kind = content_type.split(";")[0].strip().lower()
    if kind in PLS_TYPES:
        return parse_pls(body)
    if kind != "application/json":
        raise InvalidRequestError(
            f"PUT /v1/audio/lexicons/{{name}} takes application/json (the entries) or "
            f"application/pls+xml (a PLS file), not {echo(kind or 'no Content-Type')}.",
            param="body", code="invalid_body")
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"The body is not valid JSON: {exc}.", param="body",
                                  code="invalid_body") from None
    return parse_lexicon(raw)


async def put_lexicon(request: Request, name: str) -> dict:
    """`PUT /v1/audio/lexicons/{name}`: save (or replace) a lexicon; its summary."""
    engine: Engine = request.app.state.engine
    _check_name(name)
    body = await read_limited_body(request, request.app.state.settings.server.max_body_bytes)
    lexicon = _parse(request.headers.get("content-type", ""), body)
    store = engine.lexicons.store
    try:
        created = store.put(name, lexicon)
    except OSError as exc:
        raise storage_error(exc, f"save lexicon {echo(name)}", store.directory) from exc
    return _summary(name, lexicon) | {"created": created}


async def list_lexicons(request: Request) -> dict:
    """`GET /v1/audio/lexicons`: every saved lexicon's summary, by name."""
    store = request.app.state.engine.lexicons.store
    data = []
    for name in store.names():
        lexicon = store.get(name)
        if lexicon is not None:
            data.append(_summary(name, lexicon))
    return {"object": "list", "data": data}


async def get_lexicon(request: Request, name: str) -> dict:
    """`GET /v1/audio/lexicons/{name}`: the summary and its entries (404 when none)."""
    lexicon = _found(request.app.state.engine, name)
    return _summary(name, lexicon) | {"entries": lexicon.json()["entries"]}


async def delete_lexicon(request: Request, name: str) -> dict:
    """`DELETE /v1/audio/lexicons/{name}`; 403 while the configuration names it."""
    engine: Engine = request.app.state.engine
    _found(engine, name)
    if name in engine.lexicons.defaults():
        raise VoiceForbiddenError(
            f"Lexicon '{name}' is a default in the configuration (a model's lexicon or "
            "voice_lexicons); remove it there first.", param="name", code="lexicon_in_use")
    store = engine.lexicons.store
    try:
        store.delete(name)
    except OSError as exc:
        raise storage_error(exc, f"delete lexicon {echo(name)}", store.directory) from exc
    return {"id": name, "object": "lexicon", "deleted": True}
