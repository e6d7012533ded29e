"""Admission of model runs by their working sets: the memory in flight stays under a capacity.

A model run's working set (the intermediate tensors ONNX Runtime holds while it runs) grows
with its input: Kokoro's decoder holds about 1 MiB per token of its segment (16 MiB per second
of audio without an arena, measured; docs/architecture.md, "Memory"), and it cannot be cut
into windows. Two workers running the longest segments at once would put the process far
above its budget. So each run reserves its predicted working set (`Stage.working_set_bytes`)
before it starts and returns it when it ends; a run whose reservation would take the total
over the capacity waits until enough runs have ended. Waiters are admitted first come, first
served (a large run is not starved by small ones), and a run is always admitted when nothing
else is reserved, so a run larger than the capacity still runs, alone.

The capacity is what the process's budget leaves for runs (`voxflow.memory_budget`): the
budget minus the RSS with every model loaded. Unset (no engine), nothing waits. Audio made
and not yet taken by its client (`add_buffered`: the chunks queued in the requests' streams,
at most `server.max_buffered_audio_s` each) comes off it, so runs started meanwhile leave it
room: it lives in the headroom the runs' arena otherwise fills (benchmarks/stalled_readers.py:
32 clients that read nothing, 30 s each, held 79 MiB of it).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class WorkingSetGate:
    """Reserve bytes for a run; wait while the reservations would exceed `capacity`.

    Args:
        capacity: bytes of working sets allowed in flight at once; None = no limit.
    """

    def __init__(self, capacity: int | None = None):
        self._capacity = capacity
        self._reserved = 0
        self._buffered = 0  # bytes of audio queued for clients (`add_buffered`)
        self._running = 0
        self._local = threading.local()  # each thread's reservations (`shrink`)
        self._queue: deque[object] = deque()  # waiters' tickets, first come first served
        self._cond = threading.Condition()
        self.waits = 0          # runs that had to wait (``voxflow_memory_waits_total``)
        self.wait_seconds = 0.0  # their time waiting (``voxflow_memory_wait_seconds_total``)

    @property
    def capacity(self) -> int | None:
        return self._capacity

    def set_capacity(self, capacity: int | None) -> None:
        """Set the bytes allowed in flight (None: no limit); waiters are re-checked."""
        with self._cond:
            self._capacity = None if capacity is None else max(0, int(capacity))
            self._cond.notify_all()

    @property
    def reserved(self) -> int:
        """Bytes reserved by the runs in progress now."""
        return self._reserved

    @property
    def buffered(self) -> int:
        """Bytes of audio queued for clients now (`add_buffered`)."""
        return self._buffered

    def add_buffered(self, nbytes: int) -> None:
        """Count `nbytes` more (negative: fewer) of audio queued for clients; they come off
        the capacity (module docstring). Waiters are re-checked when it falls."""
        with self._cond:
            self._buffered = max(0, self._buffered + int(nbytes))
            if nbytes < 0:
                self._cond.notify_all()

    def _fits(self, nbytes: int) -> bool:
        cap = self._capacity
        return (cap is None or self._running == 0
                or self._reserved + self._buffered + nbytes <= cap)

    @contextmanager
    def hold(self, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` (>= 0) of the capacity for the block, waiting for it first.

        A run reserving 0 bytes (a stage that predicts nothing) never waits. The wait has no
        timeout: every holder ends (a model run), and the request's own deadline still applies
        to it downstream.
        """
        nbytes = max(0, int(nbytes))
        held = [nbytes]  # what this run holds now (`shrink` lowers it)
        stack = self._held_stack()
        if nbytes == 0:
            stack.append(held)
            try:
                yield
            finally:
                stack.pop()
            return
        with self._cond:
            if self._queue or not self._fits(nbytes):
                ticket = object()
                self._queue.append(ticket)
                started = time.perf_counter()
                self.waits += 1
                while self._queue[0] is not ticket or not self._fits(nbytes):
                    self._cond.wait()
                self._queue.popleft()
                self.wait_seconds += time.perf_counter() - started
                self._cond.notify_all()  # the next waiter may fit too
            self._reserved += nbytes
            self._running += 1
        stack.append(held)
        try:
            yield
        finally:
            stack.pop()
            with self._cond:
                self._reserved -= held[0]
                self._running -= 1
                self._cond.notify_all()

    def shrink(self, nbytes: int) -> None:
        """Lower the calling thread's innermost reservation (its `hold` block) to `nbytes`,
        waking waiters that now fit; never raises it, and does nothing outside a `hold`.

        For a run that learns its working set partway: a Piper acoustic run reserves its
        encoder and a decode predicted from the phoneme count, then, once the encoder has run
        and freed its tensors, only what its decode of the known frames needs.
        """
        stack = self._held_stack()
        if not stack:
            return
        held = stack[-1]
        nbytes = max(0, int(nbytes))
        if nbytes >= held[0]:
            return
        with self._cond:
            self._reserved -= held[0] - nbytes
            held[0] = nbytes
            self._cond.notify_all()

    def try_raise(self, nbytes: int) -> bool:
        """Raise the calling thread's innermost reservation (its `hold` block) to `nbytes` if
        that fits now and no run is waiting for room; never waits.

        For a run that may take a path needing more than it reserved (a lone Piper segment
        synthesized whole, `voxflow.models.piper.whole`): it takes that path only when this
        returns True.

        Returns:
            True: the reservation is at least `nbytes` now, or there is no limit; False:
            unchanged (it would not fit, runs are waiting, or the thread holds nothing under
            a limit).
        """
        stack = self._held_stack()
        if not stack:
            return self._capacity is None
        held = stack[-1]
        nbytes = max(0, int(nbytes))
        if nbytes <= held[0]:
            return True
        with self._cond:
            more = nbytes - held[0]
            cap = self._capacity
            if cap is not None and (self._queue or
                                    self._reserved + self._buffered + more > cap):
                return False
            self._reserved += more
            held[0] = nbytes
            return True

    def _held_stack(self) -> list[list[int]]:
        """The calling thread's reservations, innermost last (one `[bytes]` per `hold`)."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack


GATE = WorkingSetGate()
"""The process's gate: one arena, one budget, one gate (`voxflow.memory_budget.BUDGET`)."""
