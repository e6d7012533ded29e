"""Stage queues and the batch formation policy.

Policy, applied each time a worker asks for work (`StageQueue.next_batch`):
1. Items of cancelled requests are dropped (and counted), never run.
2. Priority: earliest playback deadline first (`RequestState.due`). A request's first segment
   is due when it arrives (plus `ttfa_target_s`); a later segment is due when the audio already
   sent to its listener runs out (less `continuation_lead_s`, the head start its synthesis
   needs). So new requests go ahead of streams that still have audio to play, but a stream about
   to run dry goes ahead of newer arrivals: neither time to first audio nor continuity starves.
   Ties: request arrival order, then segment order.
3. The head item picks the batch key; later items join only with an equal key (same voice and
   compatible options), up to `max_batch_size` items and ``len(batch) * max(cost) <=
   max_batch_cost`` (padding cap). The head item always runs, even if alone it exceeds the cap.
4. With `isolate_seeded`, an item of a request with a `seed` runs alone: batch composition can
   change float rounding (padding reaches the row's edges), and a seeded request promises the
   same bytes whatever else is in flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from voxflow.engine.metrics import EngineMetrics
from voxflow.models.base import Stage, WorkItem


def _priority(item: WorkItem, seq: int, now: float) -> tuple[float, int, int, int]:
    return (item.state.due(item.segment_index, now), item.state.arrival, item.segment_index, seq)


class StageQueue:
    """A thread-safe priority queue of `WorkItem`s feeding one stage's workers.

    Args:
        model: model name (metrics label).
        stage: the stage whose batching limits and keys are used.
        metrics: engine metrics (queue depth, dropped items).
    """

    def __init__(
        self, model: str, stage: Stage, metrics: EngineMetrics, isolate_seeded: bool = True
    ):
        self.model = model
        self.stage = stage
        self.isolate_seeded = isolate_seeded
        self._metrics = metrics
        # (arrival seq, item); ordered by deadline at each batch formation, because deadlines
        # move as audio is delivered.
        self._items: list[tuple[int, WorkItem]] = []
        self._seq = 0
        self._cond = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, item: WorkItem) -> None:
        """Add an item; wakes one waiting worker."""
        with self._cond:
            self._seq += 1
            self._items.append((self._seq, item))
            self._update_depth()
            self._cond.notify()

    def close(self) -> None:
        """Wake every worker; `next_batch` returns [] from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def next_batch(self, timeout: float | None = None) -> list[WorkItem]:
        """Block until work exists, then form one batch by the policy above.

        Returns:
            The batch (>= 1 item), or [] when closed or after `timeout` seconds with no work.
        """
        with self._cond:
            while True:
                self._drop_cancelled()
                if self._closed:
                    return []
                if self._items:
                    batch = self._form_batch()
                    self._update_depth()
                    return batch
                if not self._cond.wait(timeout) and timeout is not None:
                    return []

    def _drop_cancelled(self) -> None:
        live = [entry for entry in self._items if not entry[1].state.cancelled]
        dropped = len(self._items) - len(live)
        if dropped:
            self._items = live
            self._metrics.dropped_items.labels(self.model, self.stage.name).inc(dropped)
            self._update_depth()

    def _form_batch(self) -> list[WorkItem]:
        stage = self.stage
        now = time.perf_counter()
        entries = sorted(
            ((_priority(item, seq, now), item) for seq, item in self._items),
            key=lambda entry: entry[0],
        )
        head = entries[0][1]
        key = stage.batch_key(head)
        chosen = [entries[0]]
        max_cost = stage.cost(head)
        for entry in entries[1:]:
            if len(chosen) >= stage.max_batch_size or self._alone(head):
                break
            item = entry[1]
            if self._alone(item) or stage.batch_key(item) != key:
                continue
            cost = max(max_cost, stage.cost(item))
            if stage.max_batch_cost is not None and cost * (len(chosen) + 1) > stage.max_batch_cost:
                continue
            chosen.append(entry)
            max_cost = cost
        taken = {id(e[1]) for e in chosen}
        self._items = [e for e in self._items if id(e[1]) not in taken]
        return [e[1] for e in chosen]

    def _alone(self, item: WorkItem) -> bool:
        return self.isolate_seeded and item.state.request.seed is not None

    def _update_depth(self) -> None:
        self._metrics.queue_depth.labels(self.model, self.stage.name).set(len(self._items))


def drain(queue: StageQueue, on_batch: Callable[[list[WorkItem]], None]) -> None:
    """Worker loop: take batches until the queue closes, handing each to `on_batch`."""
    while True:
        batch = queue.next_batch()
        if not batch:
            return
        on_batch(batch)
