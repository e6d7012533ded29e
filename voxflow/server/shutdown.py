"""A graceful stop for `voxflow serve`: drain on the first SIGTERM or SIGINT, exit at once on
the second.

uvicorn's own handling closes the listener and gives open connections
``timeout_graceful_shutdown`` seconds, then cancels them, and re-raises the signal at the end,
so the process dies of it (exit -15) however cleanly it stopped. `DrainingServer` replaces that
with the drain of `voxflow.engine.drain`:

1. First signal: the engine's `Drain` begins. New HTTP requests get 503 ``shutting_down`` with
   ``Retry-After``, new WebSocket sessions and Wyoming requests an error; ``/health`` answers
   503 ``draining``, so a load balancer stops sending. Work in flight goes on.
2. When nothing is in flight, or after ``server.drain_timeout_s``: what is left is aborted (an
   HTTP body cut short, an SSE ``error`` event, WebSocket close 1001, a Wyoming ``error``
   event) and given `ABORT_GRACE_S` to end; then uvicorn shuts down (listener closed, idle
   connections closed, the lifespan stops the engine and its workers) and the process exits 0.
3. A second signal at any point: exit at once with 128 + the signal's number (143 for
   SIGTERM, 130 for SIGINT), without waiting for anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

import uvicorn

from voxflow.engine.drain import Drain

log = logging.getLogger(__name__)

ABORT_GRACE_S = 5.0
"""Seconds aborted work gets to end (send its error event, close) before uvicorn shuts down."""
CUT_AFTER_S = 1
"""uvicorn's ``timeout_graceful_shutdown`` once the drain is over (whole seconds): connections
still open then are cut."""


class DrainingServer(uvicorn.Server):
    """`uvicorn.Server` with the drain of the module docstring.

    Args:
        config: uvicorn's config (its ``timeout_graceful_shutdown`` should be `CUT_AFTER_S`).
        drain: the engine's `Drain`.
        timeout_s: ``server.drain_timeout_s``.
    """

    def __init__(self, config: uvicorn.Config, drain: Drain, timeout_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task | None = None

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The signal handler (installed by uvicorn's `capture_signals`). Not recorded for
        re-raising: a drained server exits 0."""
        if self.drain.draining or self._loop is None:
            # the second signal, or one before the server runs: no waiting
            log.warning("%s again: exiting now", signal.Signals(sig).name)
            sys.stderr.flush()
            os._exit(128 + sig)
        self._loop.call_soon_threadsafe(self._begin, signal.Signals(sig).name)

    def _begin(self, name: str) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain(name))

    async def _drain(self, name: str) -> None:
        self.drain.begin()
        log.info("%s: draining (%s in flight), up to %g s; new requests get 503 "
                 "shutting_down; %s again exits at once", name, self.drain.describe(),
                 self.timeout_s, name)
        if await self.drain.wait_idle(self.timeout_s):
            log.info("drained: nothing in flight")
        else:
            left = self.drain.describe()
            self.drain.abort_all()
            log.warning("drain timed out after %g s: ending what is still in flight (%s)",
                        self.timeout_s, left)
            if not await self.drain.wait_idle(ABORT_GRACE_S):
                log.warning("%d still in flight after the abort: cut", self.drain.in_flight)
        self.should_exit = True


def serve_app(app: Any, *, drain_timeout_s: float, **uvicorn_options: Any) -> None:
    """Serve `app` (built by `voxflow.server.app.create_app`) with uvicorn until a signal
    stops it, draining first (module docstring); returns once the server has stopped cleanly.

    Args:
        drain_timeout_s: ``server.drain_timeout_s``.
        uvicorn_options: `uvicorn.Config`'s (host, port, log level...);
            ``timeout_graceful_shutdown`` is `CUT_AFTER_S`.
    """
    config = uvicorn.Config(app, timeout_graceful_shutdown=CUT_AFTER_S, **uvicorn_options)
    DrainingServer(config, app.state.engine.drain, drain_timeout_s).run()


__all__ = ["ABORT_GRACE_S", "CUT_AFTER_S", "DrainingServer", "serve_app"]
