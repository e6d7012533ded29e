"""The worker loop of an autoregressive stage: continuous batching at every decode step.

See `voxflow.stages.autoregressive` for the policy. One loop per worker thread:

1. take waiting segments while the running set has room (block only when it is empty, so a
   step never waits for a batch to fill); each gets its decode state (`begin`);
2. run the joiners' first step (prefill, step 0) as a batch of its own;
3. run one decode step for every segment that was already running;
4. route each step's emitted part downstream in order (the part index counts per segment; the
   `done` step's part is final); a finished, failed or cancelled segment leaves the set and its
   state is freed by `end` (one path for every outcome, and for every segment at shutdown).

A segment the stage says is not `ready` (waiting for text that arrives while it runs) is parked:
it stays in the set with its state, takes no step and leaves its batch slot to others. While
every segment in the set is parked the loop waits on the queue, and is woken at once by a new
segment, by text arriving for a parked one (its `TextFeed` nudges the queue,
`StageQueue.nudge`) or by its request's cancellation; `PARKED_MAX_WAIT_S` bounds the wait as
a safety net (a text timeout is seen within it).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import Job, StageQueue
from voxflow.engine.supervisor import fail_held
from voxflow.engine.worker import as_request_error
from voxflow.stages.autoregressive import AutoregressiveStage, Step
from voxflow.stages.items import StageBatch

log = logging.getLogger(__name__)

PARKED_MAX_WAIT_S = 1.0
"""Longest wait on the queue while every segment in the set is parked (the wake-ups above
end it sooner); parked segments' text timeouts are checked at least this often."""


@dataclass
class _Running:
    job: Job
    state: Any  # the stage's decode state
    steps: int = 0  # steps taken
    parts: int = 0  # parts emitted
    alive: bool = True  # False once it left (done, failed, cancelled) and its state is freed


class AutoregressiveLoop:
    """Runs one `AutoregressiveStage` worker over `queue`, emitting parts to `downstream`.

    Args:
        model: model name (metrics label).
        stage: the stage.
        queue: its input queue.
        downstream: the next stage's queue (an autoregressive stage is never last).
        metrics: engine metrics (stage seconds, batch sizes, items).
    Attributes:
        running: the segments in the running set, in joining order.
    """

    def __init__(self, model: str, stage: AutoregressiveStage, queue: StageQueue,
                 downstream: StageQueue, metrics: EngineMetrics):
        self.model = model
        self.stage = stage
        self.queue = queue
        self.downstream = downstream
        self.metrics = metrics
        self.running: list[_Running] = []

    def __call__(self) -> None:
        """Loop until the queue closes; frees every live state on the way out. An exception
        escaping a round (not a step's own: `_step` fails its segments) fails the running
        segments' requests at once (`fail_held`) and goes on to the loop's supervisor."""
        try:
            while self.iterate():
                pass
        except BaseException as exc:
            fail_held([run.job for run in self.running if run.alive], self.stage.name, exc)
            raise
        finally:
            for run in self.running:
                self._leave(run)
            self.running.clear()

    def iterate(self) -> bool:
        """One round: join, prefill, decode. Returns False once the queue is closed."""
        for run in self.running:
            if run.job.state.cancelled:
                self._leave(run)
        self.running = [r for r in self.running if r.alive]
        nudges = self.queue.nudges  # read before `ready`: text arriving after it ends the wait
        decoding = [r for r in self.running if self.stage.ready(r.state)]
        room = self.stage.max_batch_size - len(decoding)  # parked segments hold no slot
        joined: list[_Running] = []
        if room > 0:
            timeout = None if not self.running else 0 if decoding else PARKED_MAX_WAIT_S
            jobs = self.queue.next_batch(timeout=timeout, limit=room,
                                         since=nudges if self.running else None)
            if not jobs and (not self.running or self.queue.closed):
                return False  # closed
            self.queue.done(jobs)
            joined = [run for run in (self._begin(job) for job in jobs) if run is not None]
        held = self.running + joined  # what this loop holds, should the round raise
        self.running = held
        prefill = [r for r in joined if self.stage.ready(r.state)]
        if prefill:
            self._step(prefill)  # prefill: the joiners' first step, a batch of its own kind
        if decoding:
            self._step(decoding)
        self.running = [r for r in held if r.alive]
        return True

    def _begin(self, job: Job) -> _Running | None:
        try:
            state = self.stage.open_state(job.item)
        except Exception as exc:  # noqa: BLE001 (the item fails alone)
            job.state.fail(as_request_error(self.stage, exc))
            return None
        feed = job.item.request.text_feed
        if feed is not None:  # a parked segment wakes the loop on text or cancellation
            feed.watch(self.queue.nudge)
            job.state.watch_segments(self.queue.nudge)
        return _Running(job, state)

    def _step(self, runs: list[_Running]) -> None:
        batch = StageBatch.of([r.job.item for r in runs], step=tuple(r.steps for r in runs))
        started = time.perf_counter()
        try:
            results = list(self.stage.step(batch, [r.state for r in runs]))
            if len(results) != len(runs):
                raise TypeError(f"step returned {len(results)} results for {len(runs)} items")
        except Exception as exc:  # noqa: BLE001 (a raised step fails its participants only)
            log.exception("stage %s step failed for %d segments", self.stage.name, len(runs))
            results = [exc] * len(runs)
        metrics, labels = self.metrics, (self.model, self.stage.name)
        metrics.stage_seconds.labels(*labels).observe(time.perf_counter() - started)
        metrics.batch_size.labels(*labels).observe(len(runs))
        metrics.items_run.labels(*labels).inc(len(runs))
        for run, result in zip(runs, results, strict=True):
            run.steps += 1
            self._route(run, result)

    def _route(self, run: _Running, result: object) -> None:
        state = run.job.state
        if not isinstance(result, (Step, BaseException)):
            result = TypeError(f"step returned {type(result).__name__}, not a Step")
        elif isinstance(result, Step) and result.done and result.emit is None:
            result = TypeError("a finishing step must emit the segment's last part")
        if isinstance(result, BaseException):
            state.fail(as_request_error(self.stage, result))
            self._leave(run)
            return
        if state.cancelled:
            self._leave(run)
            return
        if result.emit is not None:
            job = run.job.derive(result.emit, part=run.parts, final=result.done)
            run.parts += 1
            self.downstream.put(job)
        if result.done:
            self._leave(run)

    def _leave(self, run: _Running) -> None:
        """Free the segment's decode state once (finish, failure, cancellation, shutdown)."""
        if not run.alive:
            return
        run.alive = False
        try:
            self.stage.close_state(run.state)
        except Exception:  # noqa: BLE001 (a failing free must not stop the loop)
            log.exception("stage %s failed to free a decode state", self.stage.name)
