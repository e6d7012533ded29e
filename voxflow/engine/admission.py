"""Admission: how many requests run at once, how many may wait, and the counts behind them.

One object for the engine and its streams. `reserve` (at submit, on the event loop) refuses a
request when those in flight plus those waiting are at `max_inflight + max_queued` (429 with
`Retry-After`); `acquire` (when the stream is first iterated) waits for one of `max_inflight`
slots; `release` (once per request, whatever its end) gives back the slot or the place in the
queue. A request whose client stopped reading (its synthesis held: scheduler rule 9) is
`park`ed: it gives its slot to a request that has work to do and keeps its place in the total
(so `reserve` still counts it), and `resume` waits for a slot again once its client reads on.
Without parking, 32 clients that read nothing took every slot and a client that did read waited
a minute for its first audio. The gauges `voxflow_inflight_requests` and
`voxflow_waiting_requests` follow the counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Gauge

from voxflow.errors import OverloadedError

WAITING, SLOT, PARKED = "waiting", "slot", "parked"
"""What an outstanding request holds (`Admission.release`)."""


class Admission:
    """In-flight slots and the queue in front of them.

    Args:
        max_inflight: requests synthesized at once (>= 1).
        max_queued: requests allowed to wait for a slot beyond those (>= 0).
        retry_after_s: seconds a refused client is told to wait (`Retry-After`).
        inflight_gauge, waiting_gauge: Prometheus gauges to keep in step (optional).
    """

    def __init__(self, max_inflight: int, max_queued: int, retry_after_s: int,
                 inflight_gauge: Gauge | None = None, waiting_gauge: Gauge | None = None):
        self.max_inflight = max_inflight
        self.max_queued = max_queued
        self.retry_after_s = retry_after_s
        self._inflight_gauge = inflight_gauge
        self._waiting_gauge = waiting_gauge
        self._slots: asyncio.Semaphore | None = None
        self.outstanding = 0  # reserved and not yet released
        self.waiting = 0  # reserved, not yet holding a slot
        self.parked = 0  # held a slot, gave it back while its client reads nothing (`park`)

    @property
    def inflight(self) -> int:
        """Requests holding a slot."""
        return self.outstanding - self.waiting - self.parked

    def reserve(self) -> None:
        """Count a new request as waiting (call on the event loop).

        Raises:
            OverloadedError: in flight plus waiting are at their limit (429).
        """
        if self.outstanding >= self.max_inflight + self.max_queued:
            raise OverloadedError(
                f"Server is at capacity ({self.max_inflight} in flight, {self.max_queued} "
                "queued); retry later.",
                retry_after=self.retry_after_s,
            )
        self.outstanding += 1
        self.waiting += 1
        self._gauges()

    async def acquire(self, ended: Callable[[], bool]) -> bool:
        """Wait for a slot for a reserved request.

        Args:
            ended: whether the request ended while it waited (its `release(WAITING)` already
                ran); its slot is then handed straight back.
        Returns:
            True when the request now holds a slot (it stops counting as waiting).
        """
        if self._slots is None:  # made on first use, inside the running loop
            self._slots = asyncio.Semaphore(self.max_inflight)
        await self._slots.acquire()
        if ended():
            self._slots.release()
            return False
        self.waiting -= 1
        self._gauges()
        return True

    def park(self) -> None:
        """A request holding a slot gives it back while it waits for its client (it stays
        outstanding: counted by `reserve`, not by `inflight`)."""
        assert self._slots is not None
        self._slots.release()
        self.parked += 1
        self._gauges()

    async def resume(self, ended: Callable[[], bool]) -> bool:
        """Wait for a slot for a parked request; False (no slot taken) when it ended while it
        waited (its `release(PARKED)` already ran)."""
        assert self._slots is not None
        await self._slots.acquire()
        if ended():
            self._slots.release()
            return False
        self.parked -= 1
        self._gauges()
        return True

    def release(self, holds: str) -> None:
        """A reserved request ended: free what it `holds`: `SLOT`, its place in the queue
        (`WAITING`), or its place as a `PARKED` request."""
        if holds == SLOT:
            assert self._slots is not None
            self._slots.release()
        elif holds == PARKED:
            self.parked -= 1
        else:
            self.waiting -= 1
        self.outstanding -= 1
        self._gauges()

    def _gauges(self) -> None:
        if self._inflight_gauge is not None:
            self._inflight_gauge.set(self.inflight)
        if self._waiting_gauge is not None:
            self._waiting_gauge.set(self.waiting)
