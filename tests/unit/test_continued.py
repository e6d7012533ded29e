"""`Continued`: the last stage delivers a segment's head and queues the rest back into its own
queue as the segment's next part (Kokoro's deadline cuts)."""

from __future__ import annotations

import numpy as np
from fakes import job, make_state

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import StageQueue
from voxflow.engine.worker import run_stage_batch
from voxflow.errors import SynthesisError
from voxflow.stages.outputs import Audio, Continued
from voxflow.stages.stage import Stage


class _Cutter(Stage):
    """Payload n: n samples of value n, cut into a head of 3 samples while n > 3."""

    name = "cutter"

    def run(self, batch):
        out = []
        for item in batch:
            n = item.payload
            head = Audio(np.full(min(n, 3), n, np.float32))
            out.append(Continued(head, n - 3) if n > 3 else head)
        return out


def _first_run(segments: int, head):
    """A request of `segments` segments whose first item `head` ran on a `_Cutter`: its state,
    sink, and the stage's run of a batch (`own` queue included), and that queue."""
    state, sink = make_state()
    state.set_segment_count(segments)
    metrics = EngineMetrics()
    stage = _Cutter()
    own = StageQueue("fake", stage, metrics)

    def run(batch):
        run_stage_batch("fake", stage, batch, None, metrics, own=own)

    run([head(state)])
    return state, sink, run, own


def test_the_head_is_delivered_and_the_rest_runs_as_the_next_parts():
    state, sink, run, own = _first_run(1, lambda state: job(state, 0, 8))
    parts = []
    while batch := own.next_batch(timeout=0.01):
        [rest] = batch
        parts.append((rest.segment, rest.item.part, rest.item.final, rest.item.payload))
        run(batch)
    assert parts == [(0, 1, True, 5), (0, 2, True, 2)]
    assert sink.errors == []
    samples = np.concatenate([c.samples for c in sink.chunks])
    assert samples.tolist() == [8, 8, 8, 5, 5, 5, 2, 2]
    assert sink.chunks[-1].is_last
    assert state.segments_synthesized == 1  # one segment, closed by its last part


def test_a_rest_that_is_not_final_keeps_the_segment_open():
    state, _, _, own = _first_run(2, lambda state: job(state, 0, 5, part=0, final=False))
    [rest] = own.next_batch(timeout=0.01)
    assert (rest.item.part, rest.item.final) == (1, False)
    assert state.segments_synthesized == 0


def test_continued_without_the_stages_queue_fails_only_its_request():
    state, sink = make_state()
    metrics = EngineMetrics()
    run_stage_batch("fake", _Cutter(), [job(state, 0, 8)], None, metrics)
    assert len(sink.errors) == 1 and isinstance(sink.errors[0], SynthesisError)
    assert "Continued needs the stage's own queue" in str(sink.errors[0])
