"""The one line `voxflow serve` logs at start-up: the models, the address, and the settings
that differ from their defaults; every setting goes to DEBUG (`log_settings`), and to INFO too
for `voxflow bench compare` (`voxflow.logging_setup.SETTINGS_JSON_ENV`).

The whole settings as JSON are about 2 KB on one line for the default config, most of it
defaults nobody changed; the summary names what a reader needs to tell two servers apart.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from voxflow.config import (
    CacheSettings,
    EngineSettings,
    ServerSettings,
    Settings,
    WyomingSettings,
)
from voxflow.logging_setup import SETTINGS_JSON_ENV
from voxflow.ray.settings import RaySettings

SHOWN_ELSEWHERE = frozenset({"server.host", "server.port"})
"""Left out of the changed settings: the summary's address says them."""

MAX_CHANGED = 8
"""Changed settings named in the line; more are counted ("and 3 more")."""

MAX_VALUE_CHARS = 40
"""A longer value is cut, ending in "..."."""


def _flat(tree: Any, prefix: str) -> dict[str, Any]:
    """`tree`'s leaves by dotted key (lists are leaves)."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}"))
    return out


def _dump(model: BaseModel | dict) -> Any:
    return model.model_dump(mode="json") if isinstance(model, BaseModel) else model


def changed_settings(settings: Settings) -> dict[str, Any]:
    """Dotted key -> value of each setting that differs from its default: the server, engine,
    wyoming and cache sections, the ``ray:`` section (validated), and each model's options
    against its family's defaults. API keys are counted, never shown."""
    now: dict[str, Any] = {}
    default: dict[str, Any] = {}
    sections: list[tuple[str, Any, Any]] = [
        ("server", settings.server, ServerSettings()),
        ("engine", settings.engine, EngineSettings()),
        ("wyoming", settings.wyoming, WyomingSettings()),
        ("cache", settings.cache, CacheSettings()),
        ("ray", RaySettings.model_validate(settings.ray), RaySettings()),
    ]
    for i, model in enumerate(settings.models):
        options = model.options
        if isinstance(options, BaseModel):
            sections.append((f"models.{i}.options", options, type(options)()))
    for prefix, value, base in sections:
        now.update(_flat(_dump(value), prefix))
        default.update(_flat(_dump(base), prefix))
    changed = {k: v for k, v in now.items()
               if k not in SHOWN_ELSEWHERE and (k not in default or default[k] != v)}
    if "server.api_keys" in changed:
        count = len(settings.server.api_keys)
        changed["server.api_keys"] = f"{count} key{'s' if count != 1 else ''}"
    return changed


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def summary_line(settings: Settings) -> str:
    """``serving piper, kokoro on http://127.0.0.1:8000; changed from the defaults:
    engine.max_inflight_requests=4 (every setting at log level debug)``."""
    host, port = settings.server.host, settings.server.port
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    models = ", ".join(m.name for m in settings.models)
    changed = changed_settings(settings)
    named = [f"{k}={_value(v)}" for k, v in list(changed.items())[:MAX_CHANGED]]
    if len(changed) > MAX_CHANGED:
        named.append(f"and {len(changed) - MAX_CHANGED} more")
    listed = ", ".join(named) if named else "none"
    return (f"serving {models} on http://{address}; changed from the defaults: {listed} "
            "(every setting at log level debug)")


def log_settings(
    log: logging.Logger, settings: Settings, environ: Mapping[str, str] | None = None
) -> None:
    """The summary at INFO, the whole settings as JSON at DEBUG (API keys as ``**********``),
    or at INFO too where `SETTINGS_JSON_ENV` is ``1`` in `environ` (default `os.environ`)."""
    log.info("%s", summary_line(settings))
    everything = (os.environ if environ is None else environ).get(SETTINGS_JSON_ENV) == "1"
    log.log(logging.INFO if everything else logging.DEBUG, "settings: %s",
            settings.model_dump_json())


__all__ = ["MAX_CHANGED", "changed_settings", "log_settings", "summary_line"]
