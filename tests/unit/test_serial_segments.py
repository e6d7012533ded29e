"""Scheduler rule 6 (`Stage.serial_segments`): a request's later segment waits until its
earlier ones are delivered, unless it is due; other requests' work is never held back, a
delivery wakes a waiting worker, and a held segment that falls due runs by itself."""

import threading
import time

import numpy as np
from fakes import KeyedStage, job, make_state

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import StageQueue


class SerialStage(KeyedStage):
    serial_segments = True


def _queue(stage=None) -> StageQueue:
    return StageQueue("fake", stage or SerialStage(max_batch_size=4), EngineMetrics())


def _segments(batch) -> list[int]:
    return [j.segment for j in batch]


def test_a_lone_requests_later_segments_wait_for_the_first_to_be_delivered():
    q = _queue()
    state, _ = make_state()
    state.set_segment_count(3)
    for segment in range(3):
        q.put(job(state, segment, "xx"))
    assert _segments(q.next_batch(timeout=0)) == [0]  # alone: not batched with 1 and 2
    assert q.next_batch(timeout=0.05) == []  # held while segment 0 is not delivered
    state.deliver(0, np.zeros(16000, np.float32))  # 2 s at 8 kHz: segment 1 is not due
    assert _segments(q.next_batch(timeout=0)) == [1]
    assert q.next_batch(timeout=0) == []
    state.deliver(1, np.zeros(16000, np.float32))
    assert _segments(q.next_batch(timeout=0)) == [2]


def test_without_serial_segments_a_requests_segments_batch_together():
    q = _queue(KeyedStage(max_batch_size=4))
    state, _ = make_state()
    for segment in range(3):
        q.put(job(state, segment, "xx"))
    assert _segments(q.next_batch(timeout=0)) == [0, 1, 2]


def test_held_segments_do_not_hold_other_requests_back():
    q = _queue(SerialStage(max_batch_size=1))
    a, _ = make_state()
    b, _ = make_state()
    q.put(job(a, 0, "x"))
    q.put(job(a, 1, "x"))
    q.put(job(b, 0, "x"))
    q.put(job(b, 1, "x"))
    firsts = [q.next_batch(timeout=0)[0], q.next_batch(timeout=0)[0]]
    assert [(j.state, j.segment) for j in firsts] == [(a, 0), (b, 0)]
    assert q.next_batch(timeout=0) == []
    b.deliver(0, np.zeros(16000, np.float32))
    (nxt,) = q.next_batch(timeout=0)
    assert (nxt.state, nxt.segment) == (b, 1)


def test_a_delivery_wakes_a_worker_waiting_on_held_segments():
    q = _queue()
    state, _ = make_state()
    state.set_segment_count(2)
    q.put(job(state, 0, "x"))
    q.put(job(state, 1, "x"))
    q.next_batch(timeout=0)
    got: list = []
    worker = threading.Thread(target=lambda: got.append(q.next_batch(timeout=10)))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive()  # waiting: segment 1 is held
    started = time.perf_counter()
    state.deliver(0, np.zeros(16000, np.float32))
    worker.join(timeout=5)
    assert not worker.is_alive() and time.perf_counter() - started < 1.0
    assert _segments(got[0]) == [1]


def test_a_held_segment_runs_once_due_even_if_its_earlier_one_is_not_delivered():
    # segment 0 delivered its first part only (0.2 s of audio); the rest of it is taken to
    # bring one segment estimate (2 s) more, so segment 1 is due 0.5 s (the continuation lead)
    # before 2.2 s after the first audio, segment 2 one estimate later
    q = _queue()
    state, _ = make_state()
    state.set_segment_count(3)
    q.put(job(state, 1, "x"))
    q.put(job(state, 2, "x"))
    state.deliver(0, np.zeros(1600, np.float32), part=0, final=False)
    assert state.segments_delivered == 0 and state.first_audio_at is not None
    assert q.next_batch(timeout=0) == []  # due in 1.7 s: held
    state.first_audio_at -= 2.0  # due 0.3 s ago
    assert _segments(q.next_batch(timeout=0)) == [1]
    # segment 2 is due 3.7 s after the first audio: now in about 0.15 s; a waiting worker
    # gets it then, with no delivery to wake it
    state.first_audio_at = time.perf_counter() - 3.55
    started = time.perf_counter()
    assert _segments(q.next_batch(timeout=5)) == [2]
    waited = time.perf_counter() - started
    assert 0.1 < waited < 1.0, waited


def test_a_cancelled_requests_held_segments_are_dropped():
    q = _queue()
    state, _ = make_state()
    q.put(job(state, 0, "x"))
    q.put(job(state, 1, "x"))
    q.next_batch(timeout=0)
    state.cancel()
    assert q.next_batch(timeout=0) == [] and len(q) == 0


def test_cancelling_wakes_a_waiting_worker_which_drops_the_held_segments():
    # a client leaving mid-stream: its held segments go at once (counted as dropped), not
    # when they would have fallen due
    metrics = EngineMetrics()
    q = StageQueue("fake", SerialStage(max_batch_size=4), metrics)
    state, _ = make_state()
    state.set_segment_count(3)
    for segment in range(3):
        q.put(job(state, segment, "x"))
    q.next_batch(timeout=0)
    state.deliver(0, np.zeros(800, np.float32), part=0, final=False)  # audio is playing
    worker = threading.Thread(target=lambda: q.next_batch(timeout=10))
    worker.start()
    time.sleep(0.1)
    assert len(q) == 2 and worker.is_alive()
    state.cancel()
    deadline = time.monotonic() + 2
    while len(q) and time.monotonic() < deadline:
        time.sleep(0.01)
    dropped = metrics.registry.get_sample_value(
        "voxflow_dropped_items_total", {"model": "fake", "stage": "keyed"})
    assert len(q) == 0 and dropped == 2
    q.close()
    worker.join(timeout=5)
    assert not worker.is_alive()
