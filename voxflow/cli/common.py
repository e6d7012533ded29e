"""Settings and errors shared by every command."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from voxflow.config import Settings, load_settings, parse_override
from voxflow.ray.settings import ray_settings
from voxflow.shipped_configs import served_elsewhere

log = logging.getLogger(__name__)


DEFAULT_CONFIG = Path("configs/piper.yaml")
"""Used when ``--config`` is not given and this file exists (relative to the working dir)."""


class CliError(Exception):
    """A failure reported as ``voxflow: <message>`` with exit status `exit_code`."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def settings_options() -> argparse.ArgumentParser:
    """The options every command shares: ``--config`` and ``--set``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", metavar="FILE",
        help=f"deployment YAML (default: {DEFAULT_CONFIG} if it exists, else built-in defaults)",
    )
    common.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="override a setting, e.g. server.port=9000 or models.0.options.workers=4 "
        "(VALUE is read as YAML; repeatable)",
    )
    return common


def load_cli_settings(
    args: argparse.Namespace,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> Settings:
    """Settings from ``--config`` (or the default file) with overrides applied in order.

    Args:
        args: parsed arguments with `config` and `overrides` (``KEY=VALUE`` strings).
        before: overrides a command applies first (its own defaults; ``--set`` can replace them).
        after: overrides that win over ``--set`` (dedicated flags such as ``--port``).

    Raises:
        ConfigError: missing or invalid file, malformed ``--set``, invalid field (``ray:``
            included, `voxflow.ray.settings.ray_settings`).
    """
    path = args.config
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    overrides = dict(before or {})
    for text in args.overrides:
        key, value = parse_override(text)
        overrides[key] = value
    overrides.update(after or {})
    settings = load_settings(path, overrides)
    ray_settings(settings)  # the Ray layer's section, validated at start-up like the rest
    return settings


def only_model(settings: Settings, name: str | None, command: str = "speak") -> Settings:
    """`settings` serving just model `name`, a served model or one of its aliases (all models
    when None).

    Args:
        command: the command that asked (``speak``, ``voices``), for the hint of the error.

    Raises:
        CliError: `name` is neither a model of the settings nor an alias of one; the message
            names the shipped config that serves it, if one does (`served_elsewhere`).
    """
    if name is None:
        return settings
    for spec in settings.models:
        if name == spec.name or name in spec.aliases:
            return settings.model_copy(update={"models": [spec]})
    served = ", ".join(m.name for m in settings.models)
    message = f"model '{name}' is not served by this config (its models: {served})"
    rest = " ..." if command == "speak" else ""
    elsewhere = served_elsewhere(name, f"voxflow {command} --config {{config}} --model "
                                       f"{{model}}{rest}")
    raise CliError(f"{message}; {elsewhere}" if elsewhere else message)
