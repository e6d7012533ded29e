"""Promotion of bulk runs (scheduler rule 7): raised to the fast lane's priority when their
items turn urgent, lowered again when they end."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from fakes import job, make_state
from test_scheduler_lanes import LanedStage

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.promotion import Promoter, can_restore, thread_nice
from voxflow.engine.scheduler import BULK, BulkPromotion, StageQueue, drain


class Recorder:
    """Stands in for `set_thread_nice`: records (tid, nice) and answers `allowed`."""

    def __init__(self, allowed: bool = True) -> None:
        self.calls: list[tuple[int, int]] = []
        self.allowed = allowed

    def __call__(self, tid: int, nice: int) -> bool:
        self.calls.append((tid, nice))
        return self.allowed


def _settle(promoter: Promoter, seconds: float = 0.3) -> None:
    time.sleep(seconds)  # the promoter's thread acts on its own clock


def test_a_watched_run_is_raised_when_its_time_comes():
    rec = Recorder()
    promoter = Promoter(set_nice=rec)
    w = promoter.watch(tid=4242, in_s=0.05, base=0)
    assert rec.calls == []  # not yet: 0.05 s to go
    _settle(promoter)
    assert rec.calls == [(4242, 0)]
    assert promoter.unwatch(w) is True  # the worker lowers its thread again
    assert promoter.promotions == 1


def test_a_run_that_ends_first_is_never_raised():
    rec = Recorder()
    promoter = Promoter(set_nice=rec)
    w = promoter.watch(tid=7, in_s=0.1, base=0)
    assert promoter.unwatch(w) is False
    _settle(promoter)
    assert rec.calls == [] and promoter.promotions == 0


def test_runs_are_raised_in_the_order_they_turn_urgent():
    rec = Recorder()
    promoter = Promoter(set_nice=rec)
    promoter.watch(tid=2, in_s=0.15, base=0)
    promoter.watch(tid=1, in_s=0.02, base=-1)
    promoter.watch(tid=3, in_s=0.0, base=5)  # urgent already: at once
    _settle(promoter, 0.4)
    assert rec.calls == [(3, 5), (1, -1), (2, 0)]


def test_a_refused_raise_is_not_a_promotion():
    promoter = Promoter(set_nice=Recorder(allowed=False))
    w = promoter.watch(tid=9, in_s=0.0, base=0)
    _settle(promoter, 0.1)
    assert promoter.unwatch(w) is False and promoter.promotions == 0


def _drain_one(payload: str, run_s: float) -> tuple[Recorder, list[int], int]:
    """One bulk worker loop with promotion runs one `payload` item for `run_s` seconds."""
    q = StageQueue("fake", LanedStage(), EngineMetrics())
    q.put(job(make_state()[0], 0, payload))
    rec = Recorder()
    promoted: list[int] = []
    tids: list[int] = []

    def on_batch(batch) -> None:
        tids.append(threading.get_native_id())
        time.sleep(run_s)
        q.close()

    promotion = BulkPromotion(Promoter(set_nice=rec), base=0, nice=10,
                              on_promoted=lambda: promoted.append(1))
    t = threading.Thread(target=drain, args=(q, on_batch, BULK, promotion))
    t.start()
    t.join(timeout=3)
    return rec, tids, len(promoted)


def test_a_bulk_run_that_turns_urgent_while_it_runs_is_promoted():
    # "later" turns urgent 0.15 s after the stage is made; the run lasts 0.4 s
    rec, tids, promoted = _drain_one("later", 0.4)
    assert rec.calls == [(tids[0], 0)] and promoted == 1


def test_a_bulk_run_that_never_turns_urgent_is_not_watched():
    rec, _, promoted = _drain_one("never", 0.2)
    assert rec.calls == [] and promoted == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_probing_the_right_to_raise_leaves_the_thread_as_it_came():
    seen: dict[str, object] = {}

    def probe() -> None:
        tid = threading.get_native_id()
        base = thread_nice()
        assert base is not None
        os.setpriority(os.PRIO_PROCESS, tid, min(base + 5, 19))
        lowered = os.getpriority(os.PRIO_PROCESS, tid)
        seen["allowed"] = can_restore(base)
        seen["after"] = os.getpriority(os.PRIO_PROCESS, tid)
        seen["lowered"] = lowered
        # whether raising is allowed depends on the process (root, CAP_SYS_NICE, ulimit -e):
        # the probe must agree with a direct try, made last
        try:
            os.setpriority(os.PRIO_PROCESS, tid, base)
            seen["direct"] = True
        except OSError:
            seen["direct"] = False

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen["after"] == seen["lowered"]
    assert seen["allowed"] == seen["direct"]
