"""The foreground gate: background requests (long-form jobs) run only while no interactive
request is in the engine.

A job's segment is one request like any other, so before this gate it only waited for an idle
engine before it started (`voxflow.jobs.runner.wait_for_idle`); once started, its items ran on
the stage workers beside any interactive request that arrived meanwhile and took half the
cores from it (benchmarks/jobs_ttfa.sh: TTFA p50 0.037 s idle, 0.082 s while a job ran). With
the gate, a background request's items are held (scheduler rule 9: not ready, not due, not
urgent, not counted) from the moment an interactive request is submitted until the last one
ends; then the queues holding them are woken (`RequestState.watch_backlog`). An item already
running finishes, so an arriving request waits for at most one run of the job's (a Piper
decoder window, a CosyVoice3 LM step), not for a whole segment.

Under interactive load that never pauses, a job makes no progress: that is the promise
("jobs run behind interactive requests", docs/api.md "Long-form jobs").
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voxflow.engine.request import RequestState


class Foreground:
    """Counts the interactive requests in the engine and wakes held background ones.

    `enter`/`leave` run on the event loop (submit, end); `busy` is read by stage workers.
    quiet_s: seconds after the last interactive request ends before background work resumes.
    """

    def __init__(self, quiet_s: float = 0.0) -> None:
        self.quiet_s = quiet_s
        self._lock = threading.Lock()
        self._interactive = 0
        self._quiet_from = 0.0  # perf_counter after which, with none in, the engine is quiet
        self._background: set[RequestState] = set()

    @property
    def busy(self) -> bool:
        """Whether an interactive request is in the engine or ended less than `quiet_s` ago
        (background items wait)."""
        return self._interactive > 0 or time.perf_counter() < self._quiet_from

    @property
    def interactive(self) -> int:
        """Interactive requests in the engine now."""
        return self._interactive

    def enter(self) -> None:
        """An interactive request was submitted."""
        with self._lock:
            self._interactive += 1

    def leave(self) -> None:
        """An interactive request ended; once the last one has been gone `quiet_s`, every
        held background request is woken (on the running event loop's timer)."""
        with self._lock:
            self._interactive -= 1
            if self._interactive > 0:
                return
            self._quiet_from = time.perf_counter() + self.quiet_s
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tests driving the engine from a thread): wake now
            self._wake()
            return
        loop.call_later(self.quiet_s, self._wake)

    def _wake(self) -> None:
        with self._lock:
            woken = [] if self.busy else list(self._background)
        for state in woken:
            state.wake_held()

    def add_background(self, state: RequestState) -> None:
        """Hold `state` (a background request) whenever the foreground is busy."""
        with self._lock:
            self._background.add(state)

    def remove_background(self, state: RequestState) -> None:
        """`state` ended."""
        with self._lock:
            self._background.discard(state)
