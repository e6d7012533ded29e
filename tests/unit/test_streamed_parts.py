"""`StreamedParts`: a stage's parts made one by one after its run, each queued as it exists."""

from __future__ import annotations

from fakes import KeyedStage, job, make_state

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import StageQueue
from voxflow.engine.worker import run_stage_batch
from voxflow.errors import SynthesisError
from voxflow.stages.outputs import StreamedParts
from voxflow.stages.stage import Stage


class _Streamer(Stage):
    """Each item's payload is a list; its parts are made from it one by one."""

    name = "streamer"

    def __init__(self, seen: list, count_off: int = 0, fail_at: int | None = None):
        super().__init__()
        self.seen, self.count_off, self.fail_at = seen, count_off, fail_at

    def run(self, batch):
        def produce(values):
            for i, value in enumerate(values):
                if i == self.fail_at:
                    raise RuntimeError("window broke")
                self.seen.append(value)  # when each part is made
                yield value

        return [StreamedParts(len(item.payload) + self.count_off,
                              lambda v=item.payload: produce(v)) for item in batch]


def _run(stage, state):
    metrics = EngineMetrics()
    downstream = StageQueue("fake", KeyedStage(max_batch_size=8), metrics)
    run_stage_batch("fake", stage, [job(state, 0, ["a", "bb", "ccc"])], downstream, metrics)
    return downstream.next_batch(timeout=0.01)


def test_each_part_is_queued_in_order_and_only_the_last_is_final():
    seen: list = []
    state, sink = make_state()
    batch = _run(_Streamer(seen), state)
    assert seen == ["a", "bb", "ccc"]
    assert [(j.segment, j.item.part, j.item.final, j.item.payload) for j in batch] == [
        (0, 0, False, "a"), (0, 1, False, "bb"), (0, 2, True, "ccc")]
    assert sink.errors == []


def test_a_failure_while_making_parts_fails_only_its_request():
    state, sink = make_state()
    _run(_Streamer([], fail_at=1), state)
    assert len(sink.errors) == 1 and isinstance(sink.errors[0], SynthesisError)
    assert "window broke" in str(sink.errors[0])


def test_fewer_or_more_parts_than_announced_fail_the_request():
    for off, words in ((1, "made 3 of its 4"), (-1, "more than its 2")):
        state, sink = make_state()
        _run(_Streamer([], count_off=off), state)
        assert len(sink.errors) == 1 and words in str(sink.errors[0])


def test_a_cancelled_request_stops_making_parts():
    seen: list = []
    state, sink = make_state()
    state.cancel()
    assert _run(_Streamer(seen), state) == []
    assert seen == [] and sink.errors == []
