"""Solo sessions: a model run that starts while no other CPU run is in progress may use a
session with more threads, so a lone request is not held to one core.

Piper keeps two ONNX Runtime sessions of each graph: the fixed one (`intra_op_threads`, shared
by the stage's workers) and a solo one (`solo_threads`); a run asks `CPU_RUNS` whether it
starts alone and picks its session with `pick_session`. Kokoro's runs are counted too (its one
session already has two threads), and the count is process-wide, so in a server with both
families a Piper run beside a Kokoro run takes the fixed session, not every core. Seeded runs
always take the fixed session: ONNX Runtime's reductions split work by thread count, so a
run's float rounding (its bytes) could depend on the load. The scheduler's rule 6
(`Stage.serial_segments`) makes a lone request's segments run one at a time, so each of them
starts alone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

S = TypeVar("S")


class RunCounter:
    """Counts model runs in progress (across stages, workers and families) to tell whether a
    run starts alone."""

    def __init__(self) -> None:
        self._running = 0
        self._lock = threading.Lock()

    @contextmanager
    def run(self) -> Iterator[bool]:
        """Hold a run for the block; yields True when no other run was in progress."""
        with self._lock:
            self._running += 1
            alone = self._running == 1
        try:
            yield alone
        finally:
            with self._lock:
                self._running -= 1

    @property
    def running(self) -> int:
        """Runs in progress now."""
        with self._lock:
            return self._running


CPU_RUNS = RunCounter()
"""Every CPU family's model runs in this process."""


def pick_session(fixed: S, solo: S | None, alone: bool, seeded: bool) -> S:
    """The solo session for an unseeded run that starts alone, else the fixed one."""
    return solo if solo is not None and alone and not seeded else fixed
