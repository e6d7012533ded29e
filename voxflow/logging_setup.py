"""Logging for the command line: one stderr handler on the root logger.

Library modules only create loggers (``logging.getLogger(__name__)``); nothing is configured at
import time. `configure_logging` is called by `voxflow.cli` once a command knows its level, and
may be called again (tests run several commands in one process): it replaces the handler it
installed before and leaves every other handler (pytest's, an embedding application's) alone.
"""

from __future__ import annotations

import logging
import sys

LEVELS = ("debug", "info", "warning", "error")
"""Level names accepted by `configure_logging` (those of `server.log_level`)."""

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

SETTINGS_JSON_ENV = "VOXFLOW_LOG_SETTINGS_JSON"
"""Set to ``1``, `voxflow serve` logs its whole settings as JSON at INFO as well as DEBUG
(``settings: {...}``): `voxflow bench compare` sets it for the servers it starts, whose
settings its record keeps (`voxflow.bench.compare.logged_settings`)."""


class _StderrHandler(logging.StreamHandler):
    """A stream handler that writes to whatever `sys.stderr` is at the time of each record.

    Binding the stream late keeps records going to the current stderr when it is replaced after
    configuration (pytest's capture does this per test).
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        """The current `sys.stderr`."""
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        """Ignored: the stream is always the current `sys.stderr`."""


class _NoTracebackFormatter(logging.Formatter):
    """Formats records without their exception's traceback (the message line only)."""

    def formatException(self, ei) -> str:
        """Nothing: the traceback is left out."""
        return ""

    def formatStack(self, stack_info: str) -> str:
        """Nothing: the stack is left out."""
        return ""


def configure_logging(level: str = "info", *, tracebacks: bool = True) -> None:
    """Send log records at `level` and above to stderr with a timestamped format.

    Args:
        level: one of `LEVELS` (case-insensitive).
        tracebacks: print the traceback of records logged with an exception; the CLI turns
            them off where it reports the error itself in one line.

    Raises:
        ValueError: an unknown level name.
    """
    name = level.lower()
    if name not in LEVELS:
        raise ValueError(f"unknown log level '{level}'; use one of {', '.join(LEVELS)}")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _StderrHandler):
            root.removeHandler(handler)
    handler = _StderrHandler()
    formatter_type = logging.Formatter if tracebacks else _NoTracebackFormatter
    handler.setFormatter(formatter_type(_FORMAT))
    root.addHandler(handler)
    root.setLevel(getattr(logging, name.upper()))
