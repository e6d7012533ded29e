"""Scheduler rule 7: a fast lane for urgent items, a bulk lane at a lower OS priority."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from fakes import KeyedStage, job, make_state

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import (
    ANY,
    BULK,
    FAST,
    StageQueue,
    current_lane,
    drain,
    lower_thread_priority,
    stage_batch,
)
from voxflow.stages.items import StageItem


class LanedStage(KeyedStage):
    """Payload "now" is urgent at once, "later" in 0.15 s from its creation, "never" never."""

    def __init__(self) -> None:
        super().__init__(bulk_workers=1)
        self.born = time.perf_counter()

    def urgent_in(self, item: StageItem, slack_s: float, audio_flowing: bool) -> float:
        if item.payload == "now":
            return 0.0
        if item.payload == "later":
            return self.born + 0.15 - time.perf_counter()
        return float("inf")


def _queue() -> StageQueue:
    return StageQueue("fake", LanedStage(), EngineMetrics())


def _payloads(batch) -> list[str]:
    return [j.item.payload for j in batch]


def test_the_fast_lane_takes_only_urgent_items():
    q = _queue()
    q.put(job(make_state()[0], 0, "never"))
    assert q.next_batch(timeout=0.05, lane=FAST) == []
    q.put(job(make_state()[0], 0, "now"))
    assert _payloads(q.next_batch(timeout=0.05, lane=FAST)) == ["now"]
    assert _payloads(q.next_batch(timeout=0.05, lane=BULK)) == ["never"]


def test_the_bulk_lane_never_takes_an_urgent_item():
    # Regression (closed loop, concurrency 16): a bulk worker that took an urgent window while
    # every fast worker was busy ran it at its low priority up to 5x slower; 39 of 80
    # listeners heard a gap.
    q = _queue()
    q.put(job(make_state()[0], 0, "now"))
    assert q.next_batch(timeout=0.05, lane=BULK) == []  # no fast worker waits: still not
    q.put(job(make_state()[0], 0, "never"))
    assert _payloads(q.next_batch(timeout=0.05, lane=BULK)) == ["never"]
    assert _payloads(q.next_batch(timeout=0.05, lane=FAST)) == ["now"]


def test_a_waiting_fast_worker_wakes_when_an_item_turns_urgent():
    q = _queue()
    q.put(job(make_state()[0], 0, "later"))
    started = time.perf_counter()
    batch = q.next_batch(timeout=2, lane=FAST)
    waited = time.perf_counter() - started
    assert _payloads(batch) == ["later"]
    assert 0.05 <= waited < 1.0  # woken by its own timer, not by the 2 s timeout


def test_an_item_for_the_bulk_lane_wakes_the_bulk_worker_beside_a_waiting_fast_one():
    # Regression: put woke one waiter; a fast worker took the wake-up, found nothing urgent
    # and slept on, and the bulk worker never saw the item (a lone request hung 120 s).
    q = _queue()
    results: dict[str, list] = {FAST: [], BULK: []}
    taken_at: list[float] = []

    def wait(lane: str) -> None:
        results[lane].append(q.next_batch(timeout=1.0, lane=lane))
        if lane == BULK:
            taken_at.append(time.perf_counter())

    workers = [threading.Thread(target=wait, args=(lane,)) for lane in (FAST, FAST, BULK)]
    for w in workers:
        w.start()
    time.sleep(0.1)
    started = time.perf_counter()
    q.put(job(make_state()[0], 0, "never"))
    for w in workers:
        w.join(timeout=3)
    assert [_payloads(b) for b in results[BULK]] == [["never"]]
    assert results[FAST] == [[], []]
    assert taken_at[0] - started < 0.5  # taken at once, not after the 1 s timeout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_lowering_a_threads_priority_changes_that_thread_only():
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: dict[str, int] = {}

    def lowered() -> None:
        tid = threading.get_native_id()
        seen["ok"] = lower_thread_priority(5)
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, tid)

    t = threading.Thread(target=lowered)
    t.start()
    t.join()
    assert seen == {"ok": True, "nice": min(before + 5, 19)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    assert lower_thread_priority(0) is False  # nothing asked: nothing done


@pytest.mark.parametrize(("lane", "bulk"), [(BULK, True), (FAST, False), (ANY, False)])
def test_a_worker_loop_tells_its_batches_which_lane_runs_them(lane, bulk):
    q = _queue()
    q.put(job(make_state()[0], 0, "never" if lane == BULK else "now"))
    seen: list[tuple[str, bool]] = []

    def on_batch(batch) -> None:
        # what a stage reads: StageBatch.bulk (models never import the scheduler)
        seen.append((current_lane(), stage_batch(batch, q.stage, queue=q).bulk))
        q.close()

    t = threading.Thread(target=drain, args=(q, on_batch, lane))
    t.start()
    t.join(timeout=2)
    assert seen == [(lane, bulk)]
    assert current_lane() == ANY  # this thread runs no worker loop
    assert stage_batch([job(make_state()[0], 0, "now")], q.stage).bulk is False
