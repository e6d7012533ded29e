import threading
import time

import numpy as np
import pytest
from fakes import KeyedStage, PickyStage, job, make_state

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.request import Deadlines
from voxflow.engine.scheduler import Job, StageQueue, stage_batch
from voxflow.engine.worker import run_safely, run_stage_batch
from voxflow.errors import InvalidRequestError, SynthesisError
from voxflow.stages.outputs import Segments
from voxflow.stages.stage import Stage


def _queue(stage: Stage, isolate_seeded: bool = True) -> tuple[StageQueue, EngineMetrics]:
    metrics = EngineMetrics()
    return StageQueue("fake", stage, metrics, isolate_seeded), metrics


def _sample(metrics: EngineMetrics, name: str, stage: str = "keyed") -> float | None:
    return metrics.registry.get_sample_value(name, {"model": "fake", "stage": stage})


def _names(batch: list[Job], names: dict) -> list[str]:
    return [f"{names[id(j.state)]}{j.segment}" for j in batch]


def _drain_names(queue: StageQueue, names: dict) -> list[list[str]]:
    batches = []
    while batch := queue.next_batch(timeout=0.01):
        batches.append(_names(batch, names))
    return batches


def test_first_segments_run_before_later_segments_of_earlier_requests():
    # No audio has left yet: segment k of a request is due k segment-estimates (2 s) after its
    # arrival, so every first segment goes ahead, then each request's second segment, then a2.
    q, _ = _queue(KeyedStage(max_batch_size=1))
    a, _ = make_state()
    b, _ = make_state()
    c, _ = make_state()
    names = {id(a): "a", id(b): "b", id(c): "c"}
    q.put(job(a, 2, "x"))
    q.put(job(a, 1, "x"))
    q.put(job(c, 1, "x"))
    q.put(job(b, 0, "x"))
    q.put(job(c, 0, "x"))
    q.put(job(b, 1, "x"))
    assert _drain_names(q, names) == [["b0"], ["c0"], ["a1"], ["b1"], ["c1"], ["a2"]]


def _playing(seconds_left: float, deadlines: Deadlines | None = None):
    """A request whose first segment's audio went out and has `seconds_left` still to play."""
    state, _ = make_state(deadlines=deadlines)
    state.set_segment_count(3)
    state.deliver(0, np.zeros(8000 * 4, np.float32))  # 4 s of audio at 8 kHz
    state.first_audio_at = time.perf_counter() - (4.0 - seconds_left)
    return state


def test_stream_about_to_run_dry_goes_before_a_new_request():
    # Regression (bench at concurrency 8-16): continuations waited behind every newer first
    # segment and listeners heard 0.3-5 s of silence mid-utterance.
    q, _ = _queue(KeyedStage(max_batch_size=1))
    old = _playing(seconds_left=0.2)  # due 0.3 s ago (0.5 s lead)
    new, _ = make_state()
    names = {id(old): "old", id(new): "new"}
    q.put(job(new, 0, "x"))
    q.put(job(old, 1, "x"))
    assert _drain_names(q, names) == [["old1"], ["new0"]]


def test_stream_running_dry_goes_before_a_first_segment_however_late():
    # Regression (closed loop, concurrency 16): every first segment was past due by seconds,
    # so by due time alone they outranked a stream with 0.5 s left, which then went silent.
    q, _ = _queue(KeyedStage(max_batch_size=1))
    late, _ = make_state()
    late.submitted_at -= 5.0  # arrived 5 s ago: its first audio was due 4 s ago
    old = _playing(seconds_left=0.9)  # due in 0.4 s (0.5 s lead), running dry (under 1 s)
    spare = _playing(seconds_left=3.0)  # due in 2 s
    names = {id(old): "old", id(late): "late", id(spare): "spare"}
    q.put(job(late, 0, "x"))
    q.put(job(spare, 1, "x"))
    q.put(job(old, 1, "x"))
    assert _drain_names(q, names) == [["old1"], ["late0"], ["spare1"]]


def test_stream_with_audio_to_spare_lets_a_new_request_go_first():
    q, _ = _queue(KeyedStage(max_batch_size=1))
    old = _playing(seconds_left=1.2)  # due in 0.7 s, before the newcomer's 1 s, but not dry
    new, _ = make_state()
    names = {id(old): "old", id(new): "new"}
    q.put(job(old, 1, "x"))
    q.put(job(new, 0, "x"))
    assert _drain_names(q, names) == [["new0"], ["old1"]]


def _arrived(seconds_ago: float, deadlines: Deadlines | None = None):
    """A new request (no audio yet) that arrived `seconds_ago`: its first audio is due 1 s
    after arrival (ttfa_target_s)."""
    state, _ = make_state(deadlines=deadlines)
    state.submitted_at -= seconds_ago
    return state


def test_a_first_segment_due_sooner_goes_before_a_stream_running_dry_due_later():
    # Open loop near capacity: by the running-dry rule alone, a stream with 0.9 s of audio
    # left went ahead of a newcomer 0.2 s from its first-audio target, whose listener then
    # waited past 1 s (the late first audios of docs/benchmarks-archive.md, 2026-12-03 night).
    q, _ = _queue(KeyedStage(max_batch_size=1))
    stream = _playing(seconds_left=0.9)  # due in 0.4 s (0.5 s lead)
    soon = _arrived(0.8)  # first audio due in 0.2 s
    fresh = _arrived(0.0)  # due in 1 s
    names = {id(stream): "stream", id(soon): "soon", id(fresh): "fresh"}
    q.put(job(fresh, 0, "x"))
    q.put(job(stream, 1, "x"))
    q.put(job(soon, 0, "x"))
    assert _drain_names(q, names) == [["soon0"], ["stream1"], ["fresh0"]]


def test_a_late_first_segment_yields_to_first_segments_on_time_not_to_spare_streams():
    # A listener whose first audio is already late is a missed service level whatever runs
    # next; a newcomer still on time is one that can be kept. Streams with audio to spare
    # (not running dry) still wait behind both.
    q, _ = _queue(KeyedStage(max_batch_size=1))
    late = _arrived(1.5)  # due 0.5 s ago
    fresh = _arrived(0.0)  # due in 1 s
    spare = _playing(seconds_left=1.5)  # due in 1 s, not running dry
    names = {id(late): "late", id(fresh): "fresh", id(spare): "spare"}
    q.put(job(spare, 1, "x"))
    q.put(job(late, 0, "x"))
    q.put(job(fresh, 0, "x"))
    assert _drain_names(q, names) == [["fresh0"], ["late0"], ["spare1"]]


def test_without_late_first_yields_first_segments_keep_arrival_order():
    d = Deadlines(late_first_yields=False)
    q, _ = _queue(KeyedStage(max_batch_size=1))
    late = _arrived(1.5, d)
    fresh = _arrived(0.0, d)
    dry = _playing(seconds_left=0.9, deadlines=d)  # running dry: before every first segment
    names = {id(late): "late", id(fresh): "fresh", id(dry): "dry"}
    q.put(job(fresh, 0, "x"))
    q.put(job(late, 0, "x"))
    q.put(job(dry, 1, "x"))
    assert _drain_names(q, names) == [["dry1"], ["late0"], ["fresh0"]]


def test_rank_tiers_follow_running_dry_and_lateness():
    now = time.perf_counter()
    assert _playing(seconds_left=0.99).rank(1, now)[0] == 0
    assert _playing(seconds_left=1.01).rank(1, now)[0] == 1
    assert _arrived(0.9).rank(0, now)[0] == 0  # 0.1 s before its target
    assert _arrived(1.1).rank(0, now)[0] == 1  # 0.1 s past it
    assert _arrived(1.1, Deadlines(late_first_yields=False)).rank(0, now)[0] == 1
    assert _arrived(0.0, Deadlines(late_first_yields=False)).rank(0, now)[0] == 1
    tier, due = _playing(seconds_left=2.0).rank(1, time.perf_counter())
    assert tier == 1 and due - time.perf_counter() == pytest.approx(1.5, abs=0.01)


def _continuing(seconds_left: float):
    """A new request (a speech stream's next segment) whose listener still has
    `seconds_left` of earlier requests' audio to play."""
    state, _ = make_state()
    state.listener_ends_at = time.perf_counter() + seconds_left
    return state


def test_a_stream_segment_with_audio_to_spare_lets_a_new_request_go_first():
    q, _ = _queue(KeyedStage(max_batch_size=1))
    spare = _continuing(seconds_left=3.0)  # due in 2 s: its listener hears 3 s more first
    new, _ = make_state()
    names = {id(spare): "spare", id(new): "new"}
    q.put(job(spare, 0, "x"))
    q.put(job(new, 0, "x"))
    assert _drain_names(q, names) == [["new0"], ["spare0"]]


def test_a_stream_segment_whose_listener_runs_dry_goes_first():
    q, _ = _queue(KeyedStage(max_batch_size=1))
    late, _ = make_state()
    late.submitted_at -= 5.0  # a new request already 4 s past its first audio's target
    dry = _continuing(seconds_left=0.3)  # due 0.2 s ago
    names = {id(late): "late", id(dry): "dry"}
    q.put(job(late, 0, "x"))
    q.put(job(dry, 0, "x"))
    assert _drain_names(q, names) == [["dry0"], ["late0"]]


def test_a_continuing_request_is_due_by_its_listeners_playback():
    state = _continuing(seconds_left=3.0)
    now = time.perf_counter()
    assert state.due(0, now) == pytest.approx(state.listener_ends_at - 0.5)  # 0.5 s lead
    assert state.due(1, now) == pytest.approx(state.listener_ends_at + 1.5)  # + one estimate
    assert state.slack(0, now) == pytest.approx(state.listener_ends_at - now)
    # once its own audio flows, it plays after the listener's earlier audio
    state.set_segment_count(2)
    state.deliver(0, np.zeros(8000 * 2, np.float32))  # 2 s at 8 kHz
    assert state.due(1, now) == pytest.approx(state.listener_ends_at + 2.0 - 0.5)


def test_whole_request_items_count_as_first():
    q, _ = _queue(KeyedStage(max_batch_size=1))
    a, _ = make_state()
    b, _ = make_state()
    names = {id(a): "a", id(b): "b"}
    q.put(job(a, 1, "x"))
    q.put(job(b, -1, "text"))
    assert _drain_names(q, names) == [["b-1"], ["a1"]]


def test_later_segments_run_by_deadline_then_arrival_of_their_requests():
    # Same segment index = same deadline offset; the earlier request is due first. A further
    # segment (first3, 6 s out) waits behind the nearer ones of the later request.
    q, _ = _queue(KeyedStage(max_batch_size=1))
    first, _ = make_state()
    second, _ = make_state()
    names = {id(first): "first", id(second): "second"}
    q.put(job(second, 1, "x"))
    q.put(job(first, 3, "x"))
    q.put(job(second, 2, "x"))
    q.put(job(first, 1, "x"))
    assert _drain_names(q, names) == [["first1"], ["second1"], ["second2"], ["first3"]]


def test_only_items_with_the_head_batch_key_join_it():
    q, _ = _queue(KeyedStage(max_batch_size=8))
    a, _ = make_state(voice="alice")
    b, _ = make_state(voice="bob")
    c, _ = make_state(voice="alice")
    names = {id(a): "a", id(b): "b", id(c): "c"}
    for s in (a, b, c):
        q.put(job(s, 0, "x"))
    assert _drain_names(q, names) == [["a0", "c0"], ["b0"]]


def test_max_batch_size_caps_the_batch():
    q, metrics = _queue(KeyedStage(max_batch_size=2))
    states = [make_state()[0] for _ in range(5)]
    names = {id(s): str(i) for i, s in enumerate(states)}
    for s in states:
        q.put(job(s, 0, "x"))
    assert _drain_names(q, names) == [["00", "10"], ["20", "30"], ["40"]]


def test_padded_cost_caps_the_batch_and_skips_only_what_does_not_fit():
    # len(batch) * max(cost) <= 12; costs are payload lengths 5, 7, 2, 2.
    q, _ = _queue(KeyedStage(max_batch_size=8, max_batch_cost=12))
    states = [make_state()[0] for _ in range(4)]
    names = {id(s): n for s, n in zip(states, "abcd", strict=True)}
    for s, payload in zip(states, ["x" * 5, "x" * 7, "xx", "xx"], strict=True):
        q.put(job(s, 0, payload))
    # head 5: +7 -> 2*7=14 > 12 skipped; +2 -> 2*5=10 ok; +2 -> 3*5=15 skipped.
    # then head 7: +2 -> 2*7=14 skipped.
    assert _drain_names(q, names) == [["a0", "c0"], ["b0"], ["d0"]]


def test_padded_cost_allows_exactly_the_cap():
    q, _ = _queue(KeyedStage(max_batch_size=8, max_batch_cost=12))
    states = [make_state()[0] for _ in range(3)]
    names = {id(s): n for s, n in zip(states, "abc", strict=True)}
    for s in states:
        q.put(job(s, 0, "xxxx"))
    assert _drain_names(q, names) == [["a0", "b0", "c0"]]


def test_head_item_runs_alone_even_when_it_alone_exceeds_the_cost_cap():
    q, _ = _queue(KeyedStage(max_batch_size=8, max_batch_cost=12))
    big, _ = make_state()
    small, _ = make_state()
    names = {id(big): "big", id(small): "small"}
    q.put(job(big, 0, "x" * 50))
    q.put(job(small, 0, "x"))
    assert _drain_names(q, names) == [["big0"], ["small0"]]


def test_cancelled_requests_items_are_dropped_and_counted():
    q, metrics = _queue(KeyedStage(max_batch_size=8))
    gone, _ = make_state()
    live, _ = make_state()
    names = {id(gone): "gone", id(live): "live"}
    q.put(job(gone, 0, "x"))
    q.put(job(gone, 1, "x"))
    q.put(job(live, 0, "x"))
    q.put(job(gone, 2, "x"))
    gone.cancel()
    assert _names(q.next_batch(timeout=0.01), names) == ["live0"]
    assert _sample(metrics, "voxflow_dropped_items_total") == 3
    assert len(q) == 0
    assert q.next_batch(timeout=0.01) == []
    assert _sample(metrics, "voxflow_dropped_items_total") == 3


def test_queue_depth_gauge_reads_zero_after_dropping_a_cancelled_requests_last_items():
    q, metrics = _queue(KeyedStage(max_batch_size=8))
    gone, _ = make_state()
    for i in range(3):
        q.put(job(gone, i, "x"))
    assert _sample(metrics, "voxflow_queue_depth") == 3
    gone.cancel()
    assert q.next_batch(timeout=0.01) == []
    assert len(q) == 0
    assert _sample(metrics, "voxflow_dropped_items_total") == 3
    assert _sample(metrics, "voxflow_queue_depth") == 0


def test_queue_depth_gauge_follows_puts_and_batches():
    q, metrics = _queue(KeyedStage(max_batch_size=2))
    assert _sample(metrics, "voxflow_queue_depth") is None
    for _ in range(3):
        q.put(job(make_state()[0], 0, "x"))
    assert _sample(metrics, "voxflow_queue_depth") == 3
    assert len(q.next_batch()) == 2
    assert _sample(metrics, "voxflow_queue_depth") == 1
    assert len(q.next_batch()) == 1
    assert _sample(metrics, "voxflow_queue_depth") == 0


def test_seeded_item_runs_alone_with_isolate_seeded():
    q, _ = _queue(KeyedStage(max_batch_size=8), isolate_seeded=True)
    seeded_head, _ = make_state(seed=1)
    plain1, _ = make_state()
    seeded_mid, _ = make_state(seed=2)
    plain2, _ = make_state()
    names = {id(seeded_head): "s", id(plain1): "p", id(seeded_mid): "t", id(plain2): "q"}
    for s in (seeded_head, plain1, seeded_mid, plain2):
        q.put(job(s, 0, "x"))
    assert _drain_names(q, names) == [["s0"], ["p0", "q0"], ["t0"]]


def test_seeded_items_batch_freely_without_isolate_seeded():
    q, _ = _queue(KeyedStage(max_batch_size=8), isolate_seeded=False)
    states = [make_state(seed=i)[0] for i in range(3)] + [make_state()[0]]
    names = {id(s): str(i) for i, s in enumerate(states)}
    for s in states:
        q.put(job(s, 0, "x"))
    assert _drain_names(q, names) == [["00", "10", "20", "30"]]


def test_next_batch_times_out_empty():
    q, _ = _queue(KeyedStage())
    started = time.monotonic()
    assert q.next_batch(timeout=0.05) == []
    assert 0.04 <= time.monotonic() - started < 1.0


def test_close_wakes_a_blocked_next_batch():
    q, _ = _queue(KeyedStage())
    result: list = []
    t = threading.Thread(target=lambda: result.append(q.next_batch()))
    t.start()
    time.sleep(0.1)
    assert t.is_alive() and result == []
    q.close()
    t.join(timeout=2)
    assert not t.is_alive()
    assert result == [[]]


def test_closed_queue_returns_no_batch_even_with_items():
    q, _ = _queue(KeyedStage())
    q.put(job(make_state()[0], 0, "x"))
    q.close()
    assert q.next_batch() == []


def test_put_wakes_a_blocked_next_batch():
    q, _ = _queue(KeyedStage())
    result: list = []
    t = threading.Thread(target=lambda: result.append(q.next_batch(timeout=5)))
    t.start()
    time.sleep(0.05)
    q.put(job(make_state()[0], 0, "x"))
    t.join(timeout=2)
    assert not t.is_alive() and len(result[0]) == 1


# ---- run_safely / run_stage_batch ------------------------------------------------------------


def _one_segment(text: str = "x"):
    state, sink = make_state(text=text)
    state.set_segment_count(1)
    return state, sink


def test_one_bad_item_fails_only_its_request_and_batch_mates_get_audio():
    stage = PickyStage(max_batch_size=4)
    metrics = EngineMetrics()
    (s1, k1), (s2, k2), (s3, k3) = _one_segment(), _one_segment(), _one_segment()
    batch = [job(s1, 0, "abc"), job(s2, 0, "bad"), job(s3, 0, "de")]
    run_stage_batch("fake", stage, batch, None, metrics)
    assert stage.calls == [["abc", "bad", "de"], ["abc"], ["bad"], ["de"]]
    assert k1.errors == [] and k3.errors == []
    assert [c.samples.size for c in k1.chunks] == [3] and k1.chunks[0].is_last
    assert [c.samples.size for c in k3.chunks] == [2] and k3.chunks[0].is_last
    assert k2.chunks == [] and len(k2.errors) == 1
    err = k2.errors[0]
    assert isinstance(err, SynthesisError) and err.status == 500
    assert "stage 'picky'" in err.message and "ValueError: bad input" in err.message
    assert s2.cancelled
    assert _sample(metrics, "voxflow_stage_items_total", "picky") == 3


def test_a_voxflow_error_raised_by_a_stage_reaches_the_request_unchanged():
    own = InvalidRequestError("cannot speak this", param="input")
    stage = PickyStage(raise_error=own, max_batch_size=4)
    (s1, k1), (s2, k2) = _one_segment(), _one_segment()
    run_stage_batch(
        "fake", stage, [job(s1, 0, "bad"), job(s2, 0, "ok")], None, EngineMetrics()
    )
    assert k1.errors == [own] and k1.errors[0].param == "input"
    assert k2.errors == [] and k2.chunks[0].samples.size == 2


def test_an_exception_output_fails_only_its_item():
    stage = PickyStage(max_batch_size=4)
    (s1, k1), (s2, k2), (s3, k3) = _one_segment(), _one_segment(), _one_segment()
    batch = [job(s1, 0, "ab"), job(s2, 0, KeyError("no phoneme")), job(s3, 0, "c")]
    outputs = run_safely(stage, batch)
    assert stage.calls == [["ab", batch[1].item.payload, "c"]]  # no retry: the call did not raise
    assert isinstance(outputs[1], KeyError)
    run_stage_batch("fake", stage, batch, None, EngineMetrics())
    assert len(k1.chunks) == 1 and len(k3.chunks) == 1
    assert k1.errors == [] and k3.errors == []
    assert isinstance(k2.errors[0], SynthesisError)
    assert "stage 'picky'" in k2.errors[0].message and "KeyError" in k2.errors[0].message


def test_run_safely_single_bad_item_returns_its_exception():
    stage = PickyStage()
    state, _ = make_state()
    (out,) = run_safely(stage, [job(state, 0, "bad")])
    assert isinstance(out, ValueError)
    assert stage.calls == [["bad"]]


class _WrongCount(Stage):
    name = "wrong"

    def run(self, batch):
        return []


def test_stage_returning_the_wrong_number_of_outputs_fails_each_item_clearly():
    (s1, k1), (s2, k2) = _one_segment(), _one_segment()
    run_stage_batch(
        "fake", _WrongCount(max_batch_size=2), [job(s1, 0, "a"), job(s2, 0, "b")],
        None, EngineMetrics(),
    )
    for sink in (k1, k2):
        (err,) = sink.errors
        assert isinstance(err, SynthesisError)
        assert "stage 'wrong'" in err.message and "returned 0 outputs for 1 items" in err.message


class _Splitter(Stage):
    name = "split"
    fans_out = True

    def run(self, batch):
        return [Segments(item.payload.split()) for item in batch]


def test_fan_out_sets_segment_count_and_queues_each_segment_in_order():
    metrics = EngineMetrics()
    downstream = StageQueue("fake", KeyedStage(max_batch_size=8), metrics)
    state, _ = make_state()
    run_stage_batch("fake", _Splitter(), [job(state, -1, "aa b ccc")], downstream, metrics)
    assert state.segments_total == 3
    batch = downstream.next_batch(timeout=0.01)
    assert [(j.segment, j.item.payload) for j in batch] == [(0, "aa"), (1, "b"), (2, "ccc")]
    assert all(j.state is state for j in batch)


def test_outputs_of_a_cancelled_request_are_not_passed_on():
    metrics = EngineMetrics()
    downstream = StageQueue("fake", KeyedStage(), metrics)
    state, sink = _one_segment()
    state.cancel()
    run_stage_batch("fake", PickyStage(), [job(state, 0, "ab")], None, metrics)
    run_stage_batch("fake", PickyStage(), [job(state, 0, "ab")], downstream, metrics)
    assert sink.chunks == [] and sink.errors == []
    assert len(downstream) == 0


def test_segments_delivered_out_of_order_come_out_in_order_and_only_the_final_is_last():
    state, sink = make_state()
    state.set_segment_count(3)
    for index in (2, 0, 1):
        state.deliver(index, np.full(index + 1, index, np.float32))
    assert [(c.index, c.samples.tolist(), c.is_last) for c in sink.chunks] == [
        (0, [0.0], False),
        (1, [1.0, 1.0], False),
        (2, [2.0, 2.0, 2.0], True),
    ]
    assert state.audio_samples == 6 and state.finished


@pytest.mark.parametrize("error", [ValueError("x"), InvalidRequestError("y", param="input")])
def test_first_error_wins(error):
    state, sink = make_state()
    state.fail(error)
    state.fail(RuntimeError("later"))
    assert sink.errors == [error]
    assert state.cancelled and state.finished


def test_a_stage_batch_carries_each_items_slack_until_its_playback_deadline():
    from voxflow.engine.scheduler import stage_batch

    new, _ = make_state()
    playing, _ = make_state()
    playing.deliver(0, np.zeros(8000, np.float32))  # 1 s of audio at 8 kHz, heard from now
    batch = stage_batch([job(new, 0, "a"), job(playing, 1, "b")], KeyedStage())
    # a new request's first segment: due at arrival + the TTFA target (1 s by default);
    # a continuation: when its second of audio has played out (its priority's due time is a
    # lead, 0.5 s, earlier)
    assert batch.slack_s[0] == pytest.approx(1.0, abs=0.05)
    assert batch.slack_s[1] == pytest.approx(1.0, abs=0.05)
    assert playing.due(1, time.perf_counter()) - time.perf_counter() == pytest.approx(0.5, abs=0.05)
    assert batch.slack(5) == float("inf")


def test_a_stage_batchs_slack_counts_down_from_its_formation():
    # A stage decides after its batch waited at the memory gate or ran a while (Piper's
    # encoder): `slack` is what is left then, `slack_s` what it was when the batch formed.
    from voxflow.engine.scheduler import stage_batch
    from voxflow.stages.items import StageBatch

    new, _ = make_state()
    batch = stage_batch([job(new, 0, "a")], KeyedStage())
    time.sleep(0.2)
    assert batch.slack(0) == pytest.approx(batch.slack_s[0] - 0.2, abs=0.05)
    assert batch.slack(0) < batch.slack_s[0] - 0.19
    items = [job(new, 0, "a").item]
    assert StageBatch.of(items, slack_s=(0.5,)).slack(0) == 0.5  # built outside the scheduler
    formed = time.perf_counter() - 0.3
    assert StageBatch.of(items, slack_s=(0.5,), formed_at=formed).slack(0) == pytest.approx(
        0.2, abs=0.05)


def test_a_chunk_sent_after_the_audio_before_it_played_out_is_an_underrun():
    # 8 kHz: 800 samples are 0.1 s of audio, heard from the first chunk on
    state, sink = make_state()
    state.set_segment_count(3)
    state.deliver(0, np.zeros(800, np.float32))
    state.deliver(1, np.zeros(800, np.float32))  # at once: 0.2 s in hand
    assert state.underruns == [] and state.underrun_s == 0.0
    time.sleep(0.35)  # played out at 0.2 s: the listener waits about 0.15 s for segment 2
    state.deliver(2, np.zeros(800, np.float32))
    assert [(s, p) for s, p, _ in state.underruns] == [(2, 0)]
    assert state.underrun_s == pytest.approx(0.15, abs=0.05)
    assert len(sink.chunks) == 3 and sink.chunks[-1].is_last


class _CountingStage(KeyedStage):
    counts_waiting = True


@pytest.mark.parametrize(("stage", "expected"), [(KeyedStage(), 0), (_CountingStage(), 2)])
def test_a_batch_counts_the_other_requests_queued_only_where_its_stage_asks(stage, expected):
    running, other, another = (make_state()[0] for _ in range(3))
    queue = StageQueue("fake", stage, EngineMetrics())
    for state, segment in ((other, 0), (another, 0), (another, 1), (running, 1)):
        queue.put(job(state, segment, "ab"))  # the batch's own later segment is not counted
    other.cancel()
    queue.put(job(make_state()[0], 0, "ab"))  # a fourth request, live
    batch = stage_batch([job(running, 0, "ab")], stage, queue=queue)
    assert batch.waiting == expected
