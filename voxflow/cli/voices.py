"""`voxflow voices`: load the models and list their voices."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from voxflow.cli.common import CliError, load_cli_settings, only_model
from voxflow.config import Settings
from voxflow.engine.aliases import openai_voice_table
from voxflow.logging_setup import configure_logging
from voxflow.models.base import ModelFamily
from voxflow.models.registry import family_class
from voxflow.server.listings import model_voice_entries

log = logging.getLogger(__name__)


def add_voices(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "voices", parents=[common], help="list the voices of the configured models",
        description="Load the configured models and list their voices.",
    )
    p.add_argument("--model", help="only this served model")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("-v", "--verbose", action="store_true", help="log loading details to stderr")
    p.set_defaults(handler=cmd_voices)


def load_family(name: str, family: str, options: Any) -> ModelFamily:
    """Load one model family directly (no engine, workers or warm-up).

    Raises:
        CliError: the model fails to load (exit 1).
    """
    try:
        return family_class(family)(name, options)
    except Exception as exc:
        raise CliError(f"model '{name}' failed to load: {exc}", exit_code=1) from None


def voice_rows(settings: Settings) -> list[dict[str, Any]]:
    """One row per voice of every model in `settings`, sorted by voice id within a model.

    Each row is exactly an item of ``GET /v1/audio/voices``
    (`voxflow.server.listings.model_voice_entries`: ``id``, ``object``, ``model``, ``family``,
    ``language``, ``languages``, ``sample_rate``, ``default``, and ``alias_of`` for a voice
    alias), so ``voices --json`` and the API have one shape and the same entries.
    """
    rows = []
    for spec in settings.models:
        family = load_family(spec.name, spec.family, spec.options)
        rows.extend(model_voice_entries(spec.name, family,
                                        openai_voice_table(family, spec.voice_aliases)))
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """`voice_rows` as an aligned text table (every language a voice accepts, its own
    first); the default voice of each model is starred, an alias shows its voice
    (``alloy -> joe``)."""
    header = ["VOICE", "MODEL", "FAMILY", "LANGUAGES", "SAMPLE_RATE"]
    body = [
        [r["id"] + (" *" if r["default"] else "")
         + (f" -> {r['alias_of']}" if "alias_of" in r else ""), r["model"], r["family"],
         ",".join(r.get("languages") or [r["language"]]), str(r["sample_rate"])]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *body]]
    return "\n".join(lines) + "\n* default voice of its model"


def cmd_voices(args: argparse.Namespace) -> int:
    """Print the voices of the configured models (a table, or JSON with ``--json``)."""
    settings = only_model(load_cli_settings(args), args.model, "voices")
    configure_logging("info" if args.verbose else "warning", tracebacks=args.verbose)
    rows = voice_rows(settings)
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0
