"""Promotion of bulk runs (scheduler rule 7): a run a bulk worker started while its item had
time to spare gets the fast lane's priority back once that item turns urgent.

A bulk worker runs at nice + `Stage.bulk_nice`, so the kernel hands its core to any fast
worker that wants it. That is the point of lanes, and also their flaw: a bulk run started
with slack (the rest of a newcomer's first segment, a continuation) is starved while the fast
lane is busy, and it cannot move to the fast lane once started. Traced, open loop at 3.7
requests/s with lanes: most stalls were the rest of a first segment, 0.5-1.9 s late, taken by
an idle bulk worker 1 s before it turned urgent and then given a tenth of a core.

So each bulk run is watched: when its items turn urgent (`StageQueue.until_urgent`, taken as
the run starts and counted down), `Promoter` sets its thread's nice back to the fast lane's,
and the worker lowers it again when the run ends. Raising a thread's priority back needs
CAP_SYS_NICE or an RLIMIT_NICE that allows it (`ulimit -e`, systemd's ``LimitNICE``); each
bulk worker tries once at start (`can_restore`), and where it cannot, its runs keep the bulk
priority (as before promotion existed) and the engine says so in its start-up log.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


def _thread_id() -> int | None:
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return None
    return threading.get_native_id()


def thread_nice() -> int | None:
    """The calling thread's nice value (Linux: a thread is its own task), None where the
    platform has no per-thread priority."""
    tid = _thread_id()
    return None if tid is None else os.getpriority(os.PRIO_PROCESS, tid)


def set_thread_nice(tid: int, nice: int) -> bool:
    """Set thread `tid`'s nice value; False when not allowed (raising a priority back needs
    CAP_SYS_NICE or RLIMIT_NICE) or the thread has ended."""
    try:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError:
        return False
    return True


def can_restore(base: int) -> bool:
    """Whether the calling thread, already lowered, may raise its nice back to `base`: tried
    once (then lowered again, so the thread leaves as it came)."""
    tid = _thread_id()
    if tid is None:
        return False
    lowered = os.getpriority(os.PRIO_PROCESS, tid)
    if lowered <= base or not set_thread_nice(tid, base):
        return False
    set_thread_nice(tid, lowered)
    return True


@dataclass(order=True)
class Watch:
    """One bulk run watched: at `at` (the clock's seconds) thread `tid` gets nice `base`."""

    at: float
    tid: int = field(compare=False)
    base: int = field(compare=False)
    active: bool = field(default=True, compare=False)
    promoted: bool = field(default=False, compare=False)


class Promoter:
    """One daemon thread that raises watched bulk runs to the fast lane's priority on time.

    Args:
        set_nice: sets a thread's nice value, returns False when refused (`set_thread_nice`;
            tests pass a recorder).
        clock: seconds, the same clock as the deadlines the watch times come from
            (`time.perf_counter`, as `RequestState` uses).
    """

    def __init__(self, set_nice: Callable[[int, int], bool] = set_thread_nice,
                 clock: Callable[[], float] = time.perf_counter):
        self._set_nice = set_nice
        self._clock = clock
        self._heap: list[Watch] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.promotions = 0  # runs raised (each also counted by the engine's metric)

    def watch(self, tid: int, in_s: float, base: int) -> Watch:
        """Raise thread `tid` to nice `base` in `in_s` seconds (<= 0: at once) unless
        `unwatch` comes first."""
        w = Watch(self._clock() + in_s, tid, base)
        with self._cond:
            heapq.heappush(self._heap, w)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="voxflow-promoter",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return w

    def unwatch(self, w: Watch) -> bool:
        """End the watch of a run that ended; True when it was promoted (the caller lowers
        its thread again: lowering is always allowed)."""
        with self._cond:
            w.active = False
            return w.promoted

    def _loop(self) -> None:
        with self._cond:
            while True:
                while self._heap and not self._heap[0].active:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                left = self._heap[0].at - self._clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                w = heapq.heappop(self._heap)
                # under the lock: `unwatch` cannot slip in between, so a run that ended is
                # never raised, and one raised is always lowered again by its worker
                if self._set_nice(w.tid, w.base):
                    w.promoted = True
                    self.promotions += 1
                else:
                    log.debug("could not raise thread %d to nice %d", w.tid, w.base)


PROMOTER = Promoter()
"""The process's promoter (one thread for every engine's bulk workers)."""
