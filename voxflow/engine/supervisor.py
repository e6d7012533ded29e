"""Supervision of the stage worker loops: a loop that dies is restarted, not lost.

A worker thread runs its stage's loop (`voxflow.engine.scheduler.drain`, or an
`AutoregressiveLoop`) until its queue closes. A stage's own exception never ends it
(`voxflow.engine.worker.run_safely` turns it into its request's error), but an exception in
the engine's code around a run (routing, the memory gate, a `BaseException` such as the
``worker_die`` failpoint's) used to end the thread silently: the requests of the batch it held
hung until `engine.request_timeout_s` (504 after 120 s), the stage had one worker fewer for
good, and a stage with one worker (Piper's front end) served nothing more while `/health` said
ready (benchmarks/faults.py, issue 40 item 5). Now:

1. `failing` (around each batch the loop runs; an `AutoregressiveLoop` calls `fail_held` for
   its running set) fails the batch's requests at once with
   `WorkerDiedError` (500 ``worker_died``) and lets the exception go on;
2. `Supervisor.supervise` (around the loop) logs the traceback at ERROR naming the thread,
   counts the death (``voxflow_worker_restarts_total{model,stage}`` and `/health`'s
   ``worker_restarts``), and runs the loop again in the same thread, at once or, when it died
   within `RESTART_PAUSE_S` of its last restart, after that pause (a loop that dies on every
   call logs once a second, not in a busy loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from voxflow.engine.scheduler import Job
from voxflow.errors import WorkerDiedError

log = logging.getLogger(__name__)

RESTART_PAUSE_S = 1.0
"""Seconds a loop that died within this long of its last restart waits before the next."""


@contextmanager
def failing(jobs: Iterable[Job], stage: str) -> Iterator[None]:
    """Run the block; if any exception escapes it, first fail each of `jobs`' requests with
    `WorkerDiedError` naming `stage` and the calling thread (a request already ended keeps its
    outcome), then re-raise it."""
    try:
        yield
    except BaseException as exc:
        fail_held(jobs, stage, exc)
        raise


def fail_held(jobs: Iterable[Job], stage: str, exc: BaseException) -> None:
    """Fail each of `jobs`' requests with `WorkerDiedError` naming `stage`, the calling thread
    and `exc`'s type (a request already ended keeps its outcome)."""
    thread = threading.current_thread().name
    for job in jobs:
        job.state.fail(WorkerDiedError(stage, thread, type(exc).__name__))


@dataclass
class _Deaths:
    count: int = 0
    last: str = ""  # "THREAD: ExcType: message" of the latest death


class Supervisor:
    """Restarts the worker loops of one engine and keeps their deaths for `/health`.

    Args:
        restarts: the ``voxflow_worker_restarts_total`` counter (labels model, stage).
    """

    def __init__(self, restarts: Counter):
        self._restarts = restarts
        self._deaths: dict[tuple[str, str], _Deaths] = {}
        self._lock = threading.Lock()

    def supervise(self, model: str, stage: str, loop: Callable[[], None]) -> Callable[[], None]:
        """`loop` run again each time it raises, until it returns (its queue closed)."""

        def supervised() -> None:
            restarted_at = float("-inf")
            while True:
                try:
                    loop()
                    return
                except BaseException as exc:  # noqa: BLE001 (the thread must not end)
                    self._died(model, stage, exc)
                if time.monotonic() - restarted_at < RESTART_PAUSE_S:
                    time.sleep(RESTART_PAUSE_S)
                restarted_at = time.monotonic()

        return supervised

    def _died(self, model: str, stage: str, exc: BaseException) -> None:
        thread = threading.current_thread().name
        with self._lock:
            deaths = self._deaths.setdefault((model, stage), _Deaths())
            deaths.count += 1
            deaths.last = f"{thread}: {type(exc).__name__}: {exc}"
            count = deaths.count
        self._restarts.labels(model, stage).inc()
        log.error("worker thread %s of model %s stage %s died (%s); the requests of its batch "
                  "failed with worker_died, and its loop restarts (death %d)", thread, model,
                  stage, type(exc).__name__, count, exc_info=exc)

    def health(self, model: str) -> dict[str, Any]:
        """`model`'s stages whose workers died: {stage: {"restarts": n, "last": "THREAD:
        ExcType: message"}}; empty when none did."""
        with self._lock:
            return {stage: {"restarts": d.count, "last": d.last}
                    for (name, stage), d in self._deaths.items() if name == model}
