"""The setting a misspelt key most likely meant: ``engine.max_inflight_request`` -> "did you
mean 'max_inflight_requests'?" for an unknown key in a config file or a ``--set`` override.

The valid keys at the typo's place come from the settings model itself (pydantic's fields,
followed down the error's location through nested models, lists and dicts), so a new setting
is suggested as soon as it exists; the closest one is picked by `difflib.get_close_matches`.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from difflib import SequenceMatcher, get_close_matches
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

CUTOFF = 0.6
"""`difflib.get_close_matches`'s similarity floor (its default): "portt" finds "port", an
unrelated word finds nothing."""

TIE = 0.05
"""Keys this much less similar than the best are named too: "replicas" is as close to
``min_replicas`` as to ``max_replicas`` and ``replica_cpus``, and picking one would guess."""


def _models_in(annotation: Any) -> list[Any]:
    """`annotation` itself, or each member of an ``X | None`` / ``Union[...]``."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _step(annotation: Any, part: str | int) -> Any:
    """The type found at key or index `part` inside a value of type `annotation` (None when
    the location leaves the typed settings, e.g. inside an ``Any`` field)."""
    for candidate in _models_in(annotation):
        origin = get_origin(candidate)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            field = candidate.model_fields.get(str(part))
            if field is not None:
                return field.annotation
        elif origin in (list, tuple, Sequence) and isinstance(part, int):
            args = get_args(candidate)
            return args[0] if args else None
        elif origin is dict:
            args = get_args(candidate)
            return args[1] if len(args) == 2 else None
    return None


def valid_keys(schema: type[BaseModel], parent: Sequence[str | int]) -> list[str]:
    """The field names a mapping at location `parent` inside `schema` may hold ([] when the
    location is not a settings model)."""
    annotation: Any = schema
    for part in parent:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    keys: list[str] = []
    for candidate in _models_in(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            keys.extend(candidate.model_fields)
    return keys


def closest_keys(word: str, keys: Sequence[str]) -> list[str]:
    """The keys closest to `word`: the best match (`difflib.get_close_matches`, at least
    `CUTOFF` similar) and any as close as it within `TIE` (at most 3), best first."""
    close = get_close_matches(word, keys, n=3, cutoff=CUTOFF)
    if not close:
        return []
    best = SequenceMatcher(None, word, close[0]).ratio()
    return [k for k in close if SequenceMatcher(None, word, k).ratio() >= best - TIE]


def did_you_mean(schema: type[BaseModel], loc: Sequence[str | int]) -> str:
    """``"; did you mean 'KEY'?"`` for the unknown key at `loc` (its last part), naming the
    valid keys there that are closest to it (``'a', 'b' or 'c'`` on a tie), or "" when none
    is close."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    close = [f"'{key}'" for key in closest_keys(loc[-1], valid_keys(schema, loc[:-1]))]
    if not close:
        return ""
    names = close[0] if len(close) == 1 else ", ".join(close[:-1]) + " or " + close[-1]
    return f"; did you mean {names}?"


__all__ = ["CUTOFF", "TIE", "closest_keys", "did_you_mean", "valid_keys"]
