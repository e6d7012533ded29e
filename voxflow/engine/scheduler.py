"""Stage queues and the batch formation policy.

The policy in one paragraph (docs/architecture.md, "Scheduling policy"): every item is *due*
when its listener would otherwise wait (a first segment `ttfa_target_s` after arrival, a later
piece when the audio already sent has played out, less `continuation_lead_s`). A worker takes
the ready item first in two tiers, each by due (listeners about to hear silence and first audio
still on time, then the rest), and fills a batch with items of the same key within the stage's
caps (seeded items alone). Not ready: an item whose request's earlier part still runs on an
in-order stage, whose earlier segment is undelivered on a serial-segments stage (unless due), or
whose client is not reading. Shared workers take the next stage's items in the same order; lanes
only split workers into urgent and the rest. `_priority` is the order, `_ready` and `_held` the
readiness, `_form_batch` the batch.

The rules in detail, applied each time a worker asks for work (`StageQueue.next_batch`):
1. Items of cancelled requests are dropped (and counted), never run.
2. Priority: two tiers, each by earliest playback deadline (`RequestState.due`, `rank`). A
   request's first segment is due when it arrives (plus `ttfa_target_s`); a later segment is
   due when the audio already sent to its listener runs out (less `continuation_lead_s`, the
   head start its synthesis needs). First tier: streams running dry (less than
   `running_dry_s` of audio left to play) and first segments still on time; second: streams
   with audio to spare and first segments already late. So a newcomer goes ahead of a stream
   with audio to spare, a stream about to run dry and a newcomer go by due, and a stream
   running dry goes ahead of every first segment already late: under overload every first
   segment is past due, and by due time alone they outranked streams already playing, which
   then went silent mid-utterance (closed loop, concurrency 16: 17% of requests stalled,
   about 1 s each). A late first segment also yields to first segments still on time
   (`late_first_yields`): its listener's service level is missed whatever runs next, and
   running it first made a burst of arrivals miss the next ones' too (open loop near
   capacity, docs/benchmarks-archive.md, 2026-12-03 (night)); under saturation a late one
   waits until the load falls. Ties: request arrival order, then segment order.
3. The head item picks the batch key; later items join only with an equal key (same voice and
   compatible options), up to `max_batch_size` items and ``len(batch) * max(cost) <=
   max_batch_cost`` (padding cap). The head item always runs, even if alone it exceeds the cap.
4. With `isolate_seeded`, an item of a request with a `seed` runs alone: batch composition can
   change float rounding (padding reaches the row's edges), and a seeded request promises the
   same bytes whatever else is in flight.
5. A stage with ``in_order`` (streaming state between a request's items) gets a request's
   items one at a time, in (segment, part) order: an item waits while an earlier one of its
   request runs (`done` marks the end of a run) or has not arrived yet.
6. A stage with ``serial_segments`` holds a request's later segment until every earlier one has
   been delivered (`RequestState.segments_delivered`), unless it is due (`RequestState.due` at
   or before now: the audio sent so far runs out within the continuation lead). A lone request's
   segments then take the machine's cores one after another, its first segment alone (a solo
   session's threads), rather than splitting the cores with its own later segments and
   finishing no sooner than they do; under load every worker still finds other requests' work.
   Delivery wakes the queue (`RequestState.watch_segments`); a held segment that falls due wakes
   it by the wait's timeout.
7. Lanes: a stage with ``bulk_workers`` runs two kinds of worker. Its ``workers`` form the fast
   lane and take only urgent items (`Stage.urgent_in` <= 0: a newcomer's first window, a stream
   about to run dry); the bulk workers run at a lower OS priority (`Stage.bulk_nice`) and take
   the others. An urgent item thus never waits for a long run in progress: the kernel hands
   its core to the fast worker at once and the bulk run resumes after it (preemption without
   cutting the bulk run into pieces). A bulk worker never takes an urgent item, even with
   every fast worker busy: started near its deadline at the low priority it ran up to 5x
   slower and its listener heard a gap (closed loop, concurrency 16: 39 of 80 requests).
   A bulk run whose items turn urgent while it runs can be promoted: its thread gets the fast
   lane's priority back until the run ends (`voxflow.engine.promotion`; where the process may
   raise a priority back, and only with `Stage.bulk_promotion`, off by default). Without it,
   an idle bulk worker took the rest of a first segment a second before it turned urgent
   and, starved by the fast lane, delivered it 0.5-1.9 s late (open loop, 3.7 requests/s);
   with it, promoted runs took cores from newcomers' first windows and the first audio's tail
   grew (3 requests/s: goodput 0.909 against 1.000, `bench compare --runs 3`).
8. Shared workers: a stage with ``serves_next`` (`Stage.serves_next`) lends its workers to the
   next stage's queue (`StageQueue.serve`). Forming a batch, such a worker takes the next
   stage's head item instead of its own when that item is urgent (`Stage.urgent_in` <= 0) and
   ahead of its own head by rule 2, or when nothing of its own is ready; the next stage's
   rules (5: in order) still hold. The next stage may then run no workers of its own, so the
   process runs as many compute threads as one stage has workers (the cores), and every run,
   whichever its stage, starts in playback-deadline order instead of the kernel sharing the
   cores among four threads whatever their deadlines. Piper (`shared_workers`): the acoustic
   workers run the decoder stage's windows too (docs/benchmarks-archive.md, 2026-12-03 (evening)).
9. Backlog: a request whose audio runs more than `server.max_buffered_audio_s` ahead of what
   its listener has read (`RequestState.backlogged`: a client that stopped reading), or that
   gave its admission slot back meanwhile and waits for one (`RequestState.parked`), is held in
   every stage: its items are not ready, not due, not urgent and not counted as waiting, so
   no worker runs them, none wakes for them and no batch decision weighs them. Its listener
   reading again wakes the queues (`RequestState.watch_backlog`). Without it, 4 clients that
   opened long streamed requests and read nothing grew the server by 180 MB in a minute
   (issue 40): their whole audio was made and kept. A background request (a long-form job's
   segment, `voxflow.engine.foreground`) is held the same way while any interactive request
   is in the engine, and woken when the last one ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.promotion import Promoter, set_thread_nice, thread_nice
from voxflow.engine.request import RequestState
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.stage import Stage

ANY, FAST, BULK = "any", "fast", "bulk"
"""Worker lanes (rule 7)."""


def _sooner(a: float | None, b: float | None) -> float | None:
    """The shorter of two waits (None: no limit)."""
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class Job:
    """The engine's envelope of one stage item: the item a stage sees, and the request state
    the engine schedules and delivers by (stages never see `state`)."""

    state: RequestState
    item: StageItem

    @property
    def segment(self) -> int:
        return self.item.segment

    def derive(self, payload: Any, **kwargs: Any) -> Job:
        """The job carrying the next stage's payload (see `StageItem.derive`)."""
        return replace(self, item=self.item.derive(payload, **kwargs))


Priority = tuple[int, float, int, int, int, int]
"""A queued job's sort key (`_priority`): smaller runs first."""


def _priority(job: Job, seq: int, now: float) -> Priority:
    """Sort key (rule 2): tier (`RequestState.rank`), then earliest due, then arrival."""
    item, state = job.item, job.state
    tier, due = state.rank(item.segment, now)
    return (tier, due, state.arrival, item.segment, item.part, seq)


def stage_batch(jobs: list[Job], stage: Stage, isolated: bool = False,
                queue: StageQueue | None = None, **kwargs: Any) -> StageBatch:
    """The `StageBatch` a stage runs for `jobs` (their items, the head's batch key, each item's
    slack until its listener would wait: `RequestState.slack`, and for a stage with
    `Stage.counts_waiting`, how many other requests wait in `queue`, its own:
    `StageQueue.waiting_requests`; ``bulk`` when the calling thread is a bulk worker, rule 7)."""
    items = [job.item for job in jobs]
    now = time.perf_counter()
    slack = tuple(job.state.slack(job.segment, now) for job in jobs)
    waiting = (queue.waiting_requests({job.state.id for job in jobs})
               if queue is not None and stage.counts_waiting else 0)
    return StageBatch.of(items, key=stage.batch_key(items[0]), isolated=isolated,
                         slack_s=slack, formed_at=now, waiting=waiting,
                         bulk=current_lane() == BULK, **kwargs)


class StageQueue:
    """A thread-safe priority queue of `Job`s feeding one stage's workers.

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
        self._items: list[tuple[int, Job]] = []
        self._seq = 0
        # in_order stages: requests with an item running, and each request's next (segment,
        # part) to run.
        self._running: set[str] = set()
        self._expected: dict[str, tuple[tuple[int, int], RequestState]] = {}
        # rule 8: the next stage's queue our workers also take from, and the queue whose
        # workers take ours
        self.serves: StageQueue | None = None
        self.served_by: StageQueue | None = None
        self._cond = threading.Condition()
        self._closed = False
        self.nudges = 0  # `nudge` count: a waiting `next_batch(since=...)` returns on a change

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def serve(self, later: StageQueue) -> None:
        """Lend this queue's workers to `later`, the next stage's queue (rule 8)."""
        self.serves, later.served_by = later, self

    def put(self, item: Job) -> None:
        """Add an item; wakes one waiting worker (every one, with lanes: rule 7), and the
        workers of a queue that serves this one (rule 8)."""
        if self.stage.serial_segments and item.segment > 0:
            item.state.watch_segments(self.wake)  # rule 6: its earlier segments' delivery
        if item.state.max_ahead_samples is not None or item.state.foreground is not None:
            item.state.watch_backlog(self.wake_all)  # rule 9: its listener reads again, or
            # the last interactive request ends (a background one's)
        with self._cond:
            self._seq += 1
            self._items.append((self._seq, item))
            self._update_depth()
            if self.stage.bulk_workers:
                self._cond.notify_all()  # a worker of either lane may be the one it needs
            else:
                self._cond.notify()
        if self.served_by is not None:
            self.served_by.wake()  # outside our lock: the serving queue's lock comes first

    def claim(self, job: Job) -> bool:
        """Take `job` as if it had run here at once, with no worker (its stage passes it on:
        `Stage.passed_through`): True when it may go on now (a stage without ``in_order``, or
        nothing of its request runs here and it is the request's next item, whose successor
        is then expected); False: queue it (`put`)."""
        if not self.stage.in_order:
            return True
        with self._cond:
            request_id, item = job.state.id, job.item
            expected = self._expected.get(request_id, ((0, 0), None))[0]
            if request_id in self._running or (item.segment, item.part) != expected:
                return False
            self._expect_next(job)
            self._cond.notify_all()  # the request's next item may be queued already
            return True

    def wake(self) -> None:
        """Wake every waiting worker to look at the queue again (a held item may be ready)."""
        with self._cond:
            self._cond.notify_all()

    def nudge(self) -> None:
        """Make a `next_batch` waiting with ``since`` return now, even with no work (text
        arrived for, or a cancellation of, a segment parked in an autoregressive loop)."""
        with self._cond:
            self.nudges += 1
            self._cond.notify_all()

    def wake_all(self) -> None:
        """`wake` this queue's workers and those of the queue serving it (rule 8)."""
        self.wake()
        if self.served_by is not None:
            self.served_by.wake()

    @property
    def closed(self) -> bool:
        """True once `close` was called (workers finish)."""
        with self._cond:
            return self._closed

    def close(self) -> None:
        """Wake every worker; `next_batch` returns [] from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def next_batch(self, timeout: float | None = None, limit: int | None = None,
                   lane: str = ANY, since: int | None = None) -> list[Job]:
        """Block until work exists, then form one batch by the policy above.

        Args:
            timeout: seconds to wait for work (None: until there is some or the queue closes;
                0: do not wait).
            limit: most items to take (default and cap: the stage's `max_batch_size`).
            lane: `ANY`, or with the stage's ``bulk_workers`` `FAST` (urgent items only) or
                `BULK` (rule 7).
            since: the caller's last seen `nudges`; [] as soon as they differ (`nudge`).
        Returns:
            The batch (>= 1 item), or [] when closed, nudged, or after `timeout` seconds with
            no work.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._drop_cancelled()
                if self._closed:
                    return []
                batch = self._form_batch(limit, lane) if self._items else []
                if batch:
                    self._update_depth()
                    return batch
                if since is not None and self.nudges != since:
                    return []
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return []
                wait = self._until_due(left)
                if lane == FAST:
                    wait = _sooner(wait, self._until_urgent())
                self._cond.wait(wait)

    def next_work(self, lane: str = ANY) -> tuple[StageQueue, list[Job]]:
        """`next_batch`, or with a queue it serves (rule 8) a batch of that queue's where it
        should go first: (the queue the batch came from, the batch; [] once closed).

        Blocks until either has work for this worker; the served queue's items that are not
        urgent yet wake it when they turn urgent, its puts and finished runs at once."""
        served = self.serves
        if served is None:
            return self, self.next_batch(lane=lane)
        with self._cond:
            while True:
                self._drop_cancelled()
                if self._closed:
                    return self, []
                now = time.perf_counter()
                entries = self._ready_entries(now, lane)
                lent = served.lend(entries[0][0] if entries else None, now)
                if lent:
                    return served, lent
                if entries:
                    batch = self._form_batch(None, lane, entries)
                    self._update_depth()
                    return self, batch
                self._cond.wait(_sooner(self._until_due(None), served.until_urgent_any()))

    def lend(self, own: Priority | None, now: float) -> list[Job]:
        """A batch for a worker of the queue serving this one (rule 8) whose own most urgent
        ready item has `own` priority (`_priority`; None: it has none ready): our head when it
        is urgent (or a late newcomer's) and ahead of `own`, any head when `own` is None; []
        otherwise."""
        with self._cond:
            self._drop_cancelled()
            ready = self._ready_entries(now)
            if self._closed or not ready:
                return []
            head_priority, head = ready[0]
            # a stream with audio to spare waits until urgent; a newcomer already late
            # (never urgent: inf) goes by priority like the rest
            spare = 0 < self._urgent_in(head, now) < float("inf")
            if own is not None and (spare or head_priority >= own):
                return []
            batch = self._form_batch(entries=ready)
            self._update_depth()
            return batch

    def until_urgent_any(self) -> float | None:
        """Seconds until the first queued item not urgent yet turns urgent (None: none will);
        items urgent already wake a serving queue when they are put or become ready."""
        with self._cond:
            return self._until_urgent()

    def waiting_requests(self, besides: set[str]) -> int:
        """How many requests other than `besides` (request ids) have live items queued here,
        held by rule 6 or not (a backlogged request, rule 9, is not counted)."""
        with self._cond:
            return len({job.state.id for _, job in self._items
                        if not job.state.cancelled and not job.state.waits_for_listener
                        and job.state.id not in besides})

    def done(self, batch: list[Job]) -> None:
        """Mark a batch's run finished (in_order stages: its requests may run their next
        item); wakes the workers."""
        if not self.stage.in_order:
            return
        with self._cond:
            for job in batch:
                self._running.discard(job.state.id)
            self._cond.notify_all()
        if self.served_by is not None:
            self.served_by.wake()  # the request's next item may be ready for its workers

    def _drop_cancelled(self) -> None:
        live = [entry for entry in self._items if not entry[1].state.cancelled]
        dropped = len(self._items) - len(live)
        if dropped:
            self._items = live
            self._metrics.dropped_items.labels(self.model, self.stage.name).inc(dropped)
            self._update_depth()
        for request_id in [r for r, (_, st) in self._expected.items() if st.cancelled]:
            del self._expected[request_id]  # ended: no more of its items will come

    def _held(self, job: Job, now: float) -> bool:
        """serial_segments stages (rule 6): an earlier segment of `job`'s request is not yet
        delivered and `job` is not due."""
        state = job.state
        return (self.stage.serial_segments and job.segment > state.segments_delivered
                and state.due(job.segment, now) > now)

    def _until_due(self, timeout: float | None) -> float | None:
        """How long a worker finding nothing ready waits: until the first held item falls due
        (rule 6), at most `timeout`. Before its request's first audio a later segment is never
        due, so it is waited for by delivery only."""
        if not self.stage.serial_segments:
            return timeout
        now = time.perf_counter()
        soonest = min((job.state.due(job.segment, now) - now for _, job in self._items
                       if job.state.audio_flowing and not job.state.waits_for_listener),
                      default=None)
        if soonest is None:
            return timeout
        soonest = max(soonest, 0.001)
        return soonest if timeout is None else min(soonest, timeout)

    def _urgent_in(self, job: Job, now: float) -> float:
        """Seconds until `job` is urgent (rule 7; <= 0: it is)."""
        state = job.state
        return self.stage.urgent_in(job.item, state.slack(job.segment, now), state.audio_flowing)

    def until_urgent(self, jobs: list[Job]) -> float:
        """Seconds until the first of `jobs` (a batch just taken) turns urgent (rule 7; <= 0:
        one is; inf: never, a newcomer already late): when a bulk run of them is promoted."""
        with self._cond:
            now = time.perf_counter()
            return min((self._urgent_in(job, now) for job in jobs), default=float("inf"))

    def _until_urgent(self) -> float | None:
        """How long an idle fast worker waits: until the first waiting item turns urgent."""
        now = time.perf_counter()
        # items urgent already but not ready (rule 5, 6) wake the queue when they become ready
        soonest = min((t for _, job in self._items if not job.state.waits_for_listener
                       and 0 < (t := self._urgent_in(job, now)) < float("inf")), default=None)
        return soonest

    def _in_lane(self, job: Job, now: float, lane: str) -> bool:
        """Rule 7: the fast lane takes urgent items only, the bulk lane the others."""
        if lane == ANY or not self.stage.bulk_workers:
            return True
        urgent = self._urgent_in(job, now) <= 0
        return urgent == (lane == FAST)

    def _ready(self, job: Job, now: float, lane: str = ANY) -> bool:
        """Not held (rules 6, 9); in this worker's lane (rule 7); in_order stages: `job` is
        its request's next item and none of it runs now."""
        if job.state.waits_for_listener or self._held(job, now):
            return False
        if not self._in_lane(job, now, lane):
            return False
        if not self.stage.in_order:
            return True
        request_id = job.state.id
        expected = self._expected.get(request_id, ((0, 0), None))[0]
        return request_id not in self._running and (job.item.segment, job.item.part) == expected

    def _ready_entries(self, now: float, lane: str = ANY) -> list[tuple[Priority, Job]]:
        """The items ready for `lane`'s worker now, by priority (rules 2, 5-7)."""
        return sorted(((_priority(job, seq, now), job) for seq, job in self._items
                       if self._ready(job, now, lane)), key=lambda entry: entry[0])

    def _form_batch(self, limit: int | None = None, lane: str = ANY,
                    entries: list[tuple[Priority, Job]] | None = None) -> list[Job]:
        stage = self.stage
        size = stage.max_batch_size if limit is None else min(limit, stage.max_batch_size)
        if entries is None:
            entries = self._ready_entries(time.perf_counter(), lane)
        if not entries or size < 1:
            return []
        head = entries[0][1]
        key = stage.batch_key(head.item)
        chosen = [entries[0]]
        requests = {head.state.id}
        max_cost = stage.cost(head.item)
        for entry in entries[1:]:
            if len(chosen) >= size or self._alone(head):
                break
            job = entry[1]
            if self._alone(job) or stage.batch_key(job.item) != key:
                continue
            if stage.in_order and job.state.id in requests:
                continue  # one item per request per run: the next waits for this one's state
            cost = max(max_cost, stage.cost(job.item))
            if stage.max_batch_cost is not None and cost * (len(chosen) + 1) > stage.max_batch_cost:
                continue
            chosen.append(entry)
            requests.add(job.state.id)
            max_cost = cost
        taken = {id(e[1]) for e in chosen}
        self._items = [e for e in self._items if id(e[1]) not in taken]
        jobs = [e[1] for e in chosen]
        if stage.in_order:
            for job in jobs:
                self._running.add(job.state.id)
                self._expect_next(job)
        return jobs

    def _expect_next(self, job: Job) -> None:
        """in_order stages: `job`'s request runs next its item after `job`'s (the next part,
        or the next segment's first after a final part). Called with the lock held."""
        item = job.item
        nxt = (item.segment + 1, 0) if item.final else (item.segment, item.part + 1)
        self._expected[job.state.id] = (nxt, job.state)

    def isolated(self, jobs: list[Job]) -> bool:
        """True when `jobs` is one seeded request's item run alone (`isolate_seeded`)."""
        return len(jobs) == 1 and self._alone(jobs[0])

    def _alone(self, job: Job) -> bool:
        return self.isolate_seeded and job.state.request.seed is not None

    def _update_depth(self) -> None:
        self._metrics.queue_depth.labels(self.model, self.stage.name).set(len(self._items))


def lower_thread_priority(nice: int) -> bool:
    """Raise the calling thread's nice value by `nice` (Linux: a thread is its own task, so
    only this thread is affected; an unprivileged process may lower its priority, never
    raise it back). Returns False where the platform cannot (then nothing changes)."""
    base = thread_nice()
    if nice <= 0 or base is None:
        return False
    return set_thread_nice(threading.get_native_id(), base + nice)


_LANE = threading.local()


def current_lane() -> str:
    """The lane of the worker thread calling (`ANY` outside a worker loop); `stage_batch`
    marks a bulk worker's batches with it (`StageBatch.bulk`), so stages never read it."""
    return getattr(_LANE, "name", ANY)


@dataclass(frozen=True)
class BulkPromotion:
    """How a bulk worker's runs get promoted (`voxflow.engine.promotion`): `promoter` raises
    the thread to nice `base` (the fast lane's) when the run's items turn urgent; the worker
    then lowers it to ``base + nice`` after the run and calls `on_promoted` (a metric)."""

    promoter: Promoter
    base: int
    nice: int
    on_promoted: Callable[[], None] = lambda: None


def drain(queue: StageQueue, on_batch: Callable[[list[Job]], None], lane: str = ANY,
          promotion: BulkPromotion | None = None,
          on_served: Callable[[StageQueue, list[Job]], None] | None = None) -> None:
    """Worker loop: take batches of `lane` (rule 7) until the queue closes, handing each to
    `on_batch`, and a batch of a queue it serves (rule 8) to `on_served` with that queue; a
    bulk worker with `promotion` has each run watched until it turns urgent."""
    _LANE.name = lane
    tid = threading.get_native_id()
    while True:
        source, batch = queue.next_work(lane=lane)
        if not batch:
            return
        if source is not queue:
            if on_served is None:
                raise RuntimeError(f"a worker of {queue.stage.name} took work of "
                                   f"{source.stage.name} with nothing to run it")
            try:
                on_served(source, batch)
            finally:
                source.done(batch)
            continue
        watch = None
        if promotion is not None:
            until = queue.until_urgent(batch)
            if until < float("inf"):
                watch = promotion.promoter.watch(tid, until, promotion.base)
        try:
            on_batch(batch)
        finally:
            if watch is not None and promotion is not None and promotion.promoter.unwatch(watch):
                set_thread_nice(tid, promotion.base + promotion.nice)
                promotion.on_promoted()
            queue.done(batch)
