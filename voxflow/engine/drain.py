"""`Drain`: what a stopping server still owes, and how to end it.

One per engine (`Engine.drain`), shared by every entry point (HTTP, the WebSocket stream,
Wyoming). While the server runs, each piece of work in flight is tracked: an HTTP request for
its whole response (`activity`), a text-stream session for its life (with an abort callback
that ends it), and every engine request (`Engine.submit` registers one that fails it). On
SIGTERM or SIGINT the server (`voxflow.server.shutdown`) calls `begin`: entry points then
refuse new work with `ShuttingDownError` (`check`), and `/health` says ``draining``; it waits
for `idle` up to ``server.drain_timeout_s``, and calls `abort_all` for what is left, which
ends each piece the way its protocol ends cleanly (an HTTP body cut short, an SSE ``error``
event, WebSocket close 1001, a Wyoming ``error`` event).

Everything here runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from voxflow.errors import ShuttingDownError

log = logging.getLogger(__name__)

POLL_S = 0.05
"""How often `wait_idle` looks (seconds)."""


class Drain:
    """The work in flight, and whether the server is draining (module docstring).

    Args:
        retry_after_s: the ``Retry-After`` (seconds) of a refusal while draining.
    """

    def __init__(self, retry_after_s: int = 1) -> None:
        self.retry_after_s = retry_after_s
        self.draining = False
        self._active = 0
        self._with_abort = 0  # activities that registered an abort
        self._aborts: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()

    # ---- while running -----------------------------------------------------------------------
    def check(self) -> None:
        """Refuse new work while draining.

        Raises:
            ShuttingDownError: `begin` was called (503 ``shutting_down``).
        """
        if self.draining:
            raise ShuttingDownError(retry_after=self.retry_after_s)

    def on_abort(self, abort: Callable[[], None]) -> Callable[[], None]:
        """Register `abort`, called if the drain times out with it still registered; returns
        the call that unregisters it (idempotent). Registered work also keeps the drain
        waiting."""
        token = next(self._tokens)
        self._aborts[token] = abort

        def forget() -> None:
            self._aborts.pop(token, None)

        return forget

    @contextmanager
    def activity(self, abort: Callable[[], None] | None = None) -> Iterator[None]:
        """Track one piece of work for the block's duration (with `abort`, if given)."""
        self._active += 1
        forget = self.on_abort(abort) if abort is not None else None
        self._with_abort += forget is not None
        try:
            yield
        finally:
            self._active -= 1
            if forget is not None:
                forget()
                self._with_abort -= 1

    def describe(self) -> str:
        """What is in flight, for the log: ``"3 requests or sessions, 3 engine requests"``
        (an HTTP request's or a session's engine requests are counted in both)."""
        return (f"{self._active} requests or sessions, "
                f"{len(self._aborts) - self._with_abort} engine requests")

    @property
    def in_flight(self) -> int:
        """Pieces of work the drain waits for: activities and registered aborts."""
        return self._active + len(self._aborts)

    # ---- stopping ----------------------------------------------------------------------------
    def begin(self) -> None:
        """Start draining: `check` refuses from now on."""
        self.draining = True

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is in flight, at most `timeout_s` seconds; True if it got there."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    def abort_all(self) -> int:
        """Call every registered abort once (a failing one is logged, the rest still run);
        returns how many were called."""
        aborts = list(self._aborts.values())
        for abort in aborts:
            try:
                abort()
            except Exception:  # noqa: BLE001 (one failing abort must not spare the others)
                log.exception("drain: an abort failed")
        return len(aborts)


__all__ = ["Drain"]
