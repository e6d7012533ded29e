"""Audio an earlier stage made in line goes to its request without waiting for a worker of the
in_order stage that only passes it on (`Stage.passed_through`, `StageQueue.claim`,
`worker.hand_down`), and never ahead of that request's items still queued or running there."""

from __future__ import annotations

import numpy as np
from fakes import job, make_state

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import StageQueue
from voxflow.engine.worker import hand_down
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio
from voxflow.stages.stage import Stage


class _Vocoder(Stage):
    """in_order; a str payload needs a run, an array is audio already made."""

    name = "vocoder"
    in_order = True

    def passed_through(self, item: StageItem) -> Audio | None:
        return Audio(item.payload) if isinstance(item.payload, np.ndarray) else None

    def run(self, batch: StageBatch) -> list:
        return [Audio(np.full(4, 0.5, np.float32)) for _ in batch]


def _queue() -> StageQueue:
    return StageQueue("fake", _Vocoder(), EngineMetrics())


def _samples(sink) -> int:
    return sum(len(chunk.samples) for chunk in sink.chunks)


def test_made_audio_is_delivered_at_once_and_the_next_part_may_run():
    queue = _queue()
    state, sink = make_state()
    hand_down(job(state, 0, np.ones(6, np.float32), part=0, final=False), queue)
    assert len(queue) == 0 and _samples(sink) == 6  # delivered, not queued
    hand_down(job(state, 0, "window", part=1, final=True), queue)
    [taken] = queue.next_batch(timeout=0)  # part 1 is the request's next: it may run
    assert (taken.item.segment, taken.item.part) == (0, 1)


def test_made_audio_waits_behind_its_requests_earlier_items():
    queue = _queue()
    state, sink = make_state()
    queue.put(job(state, 0, "window", part=0, final=False))
    # part 1 was made in line, but part 0 has not run: queued, delivered after it
    hand_down(job(state, 0, np.ones(6, np.float32), part=1, final=True), queue)
    assert len(queue) == 2 and _samples(sink) == 0
    [first] = queue.next_batch(timeout=0)
    assert first.item.part == 0
    # while part 0 runs, the made part 1 of the next segment is not claimed either
    assert not queue.claim(job(state, 0, np.ones(6, np.float32), part=1, final=True))
    assert queue.next_batch(timeout=0) == []  # in order: part 1 waits for part 0's end
    queue.done([first])
    [second] = queue.next_batch(timeout=0)
    assert second.item.part == 1


def test_a_stage_without_order_claims_every_made_part():
    class Loose(_Vocoder):
        in_order = False

    queue = StageQueue("fake", Loose(), EngineMetrics())
    state, sink = make_state()
    queue.put(job(state, 0, "window", part=0, final=False))
    hand_down(job(state, 0, np.ones(6, np.float32), part=1, final=True), queue)
    assert len(queue) == 1  # handed to the request, which orders its parts itself
    assert _samples(sink) == 0  # part 0 not delivered yet: nothing emitted
