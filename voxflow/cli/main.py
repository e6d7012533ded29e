"""The `voxflow` entry point: the parser of all commands and error reporting."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from voxflow import __version__
from voxflow.cli.common import CliError, settings_options
from voxflow.cli.serve import add_serve
from voxflow.cli.speak import add_speak
from voxflow.cli.tools import add_bench, add_eval
from voxflow.cli.voices import add_voices
from voxflow.config import ConfigError
from voxflow.malloc import tune_malloc

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The `voxflow` argument parser with its five commands."""
    parser = argparse.ArgumentParser(
        prog="voxflow",
        description="voxflow: a serving engine for text-to-speech models with an "
        "OpenAI-compatible speech API.",
    )
    parser.add_argument("--version", action="version", version=f"voxflow {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = settings_options()
    add_serve(commands, common)
    add_speak(commands, common)
    add_voices(commands, common)
    add_bench(commands)
    add_eval(commands)
    return parser


def _fail(message: str, exit_code: int) -> int:
    print(f"voxflow: {message}", file=sys.stderr)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `voxflow` command; returns the exit status (see the module docstring).

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).
    """
    tune_malloc()  # before any thread starts: see voxflow.malloc
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.handler(args)
    except (CliError, ConfigError) as exc:
        return _fail(str(exc), getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
