"""Failures the bench reports as ``voxflow: <message>`` with their own exit status."""

from __future__ import annotations

EXIT_FAILED = 1
"""A server failed to start or answer, every request failed, or a --check found differences."""
EXIT_USAGE = 2
EXIT_BUSY = 3
"""The idle gate timed out (the machine stayed busy) and --allow-busy was not given."""


class BenchError(Exception):
    """A bench or eval failure with the process exit status it maps to."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


class BusyError(BenchError):
    """The machine did not become idle in time."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_BUSY)
