"""The memory gate: model runs reserve their predicted working sets and wait while the runs in
progress would take the total over the capacity; first come, first served; a run alone always
starts; and the engine's workers reserve what each stage predicts."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from fakes import job, make_state, register_fake_family, stage_item

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.worker import run_stage_batch
from voxflow.memory_budget import BUDGET
from voxflow.memory_gate import GATE, WorkingSetGate
from voxflow.models.kokoro import memory as kokoro_memory
from voxflow.models.piper import memory as piper_memory
from voxflow.models.piper.decode import DecodeWindow
from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.stages.items import StageBatch
from voxflow.stages.outputs import Audio
from voxflow.stages.stage import Stage

MIB = 1 << 20


def _start(gate: WorkingSetGate, nbytes: int, log: list, name: str,
           release: threading.Event) -> threading.Thread:
    def run() -> None:
        with gate.hold(nbytes):
            log.append(f"start {name}")
            release.wait(5)
            log.append(f"end {name}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _wait_for(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_runs_that_fit_together_start_together_and_a_third_waits_for_room():
    gate, log = WorkingSetGate(100 * MIB), []
    first, second = threading.Event(), threading.Event()
    a = _start(gate, 60 * MIB, log, "a", first)
    _wait_for(lambda: "start a" in log)
    b = _start(gate, 40 * MIB, log, "b", second)
    _wait_for(lambda: "start b" in log)
    assert gate.reserved == 100 * MIB and gate.waits == 0
    third = threading.Event()
    c = _start(gate, 10 * MIB, log, "c", third)
    time.sleep(0.1)
    assert "start c" not in log and gate.waits == 1  # 110 MiB would not fit
    first.set()
    a.join(5)
    _wait_for(lambda: "start c" in log)
    assert log.index("end a") < log.index("start c")
    second.set()
    third.set()
    b.join(5)
    c.join(6)
    assert gate.reserved == 0 and gate.wait_seconds > 0.05


def test_waiters_start_in_arrival_order_so_a_large_run_is_not_starved():
    gate, log = WorkingSetGate(100 * MIB), []
    hold = threading.Event()
    _start(gate, 50 * MIB, log, "small0", hold)
    _wait_for(lambda: "start small0" in log)
    big_go = threading.Event()
    big = _start(gate, 90 * MIB, log, "big", big_go)
    _wait_for(lambda: gate.waits == 1)
    small_go = threading.Event()
    small = _start(gate, 10 * MIB, log, "small1", small_go)
    time.sleep(0.1)
    # small1 would fit beside small0 (60 MiB) but arrived after big, which waits for room
    assert "start small1" not in log and "start big" not in log
    hold.set()
    _wait_for(lambda: "start big" in log)
    big_go.set()
    small_go.set()
    big.join(5)
    small.join(6)
    assert log.index("start big") < log.index("start small1")


def test_a_run_larger_than_the_capacity_runs_alone_and_no_capacity_means_no_wait():
    gate = WorkingSetGate(10 * MIB)
    with gate.hold(50 * MIB):
        assert gate.reserved == 50 * MIB
    assert gate.reserved == 0 and gate.waits == 0
    unlimited = WorkingSetGate(None)
    with unlimited.hold(10**12), unlimited.hold(10**12):  # nested: no limit, no wait
        assert unlimited.reserved == 2 * 10**12


def test_a_run_that_raises_returns_its_reservation():
    gate = WorkingSetGate(100 * MIB)
    try:
        with gate.hold(30 * MIB):
            raise RuntimeError("model failed")
    except RuntimeError:
        pass
    assert gate.reserved == 0


def test_raising_the_capacity_admits_a_waiter():
    gate, log = WorkingSetGate(50 * MIB), []
    hold = threading.Event()
    _start(gate, 40 * MIB, log, "a", hold)
    _wait_for(lambda: "start a" in log)
    b_go = threading.Event()
    b = _start(gate, 40 * MIB, log, "b", b_go)
    _wait_for(lambda: gate.waits == 1)
    gate.set_capacity(100 * MIB)
    _wait_for(lambda: "start b" in log)
    hold.set()
    b_go.set()
    b.join(6)
    assert "end b" in log  # b ran to its end (a may end before or after it)


def test_audio_queued_for_clients_comes_off_the_capacity_and_a_waiter_starts_when_taken():
    gate, log = WorkingSetGate(100 * MIB), []
    gate.add_buffered(50 * MIB)  # chunks made and not yet taken by their clients
    hold = threading.Event()
    _start(gate, 40 * MIB, log, "a", hold)
    _wait_for(lambda: "start a" in log)
    b_go = threading.Event()
    b = _start(gate, 20 * MIB, log, "b", b_go)
    _wait_for(lambda: gate.waits == 1)  # 50 + 40 + 20 > 100
    assert not gate.try_raise(70 * MIB)
    gate.add_buffered(-30 * MIB)  # the clients took some
    _wait_for(lambda: "start b" in log)
    assert gate.buffered == 20 * MIB and gate.reserved == 60 * MIB
    gate.add_buffered(-100 * MIB)
    assert gate.buffered == 0
    hold.set()
    b_go.set()
    b.join(6)


def test_a_run_that_shrinks_its_reservation_admits_a_waiter_that_now_fits():
    gate, log = WorkingSetGate(100 * MIB), []
    shrunk, done = threading.Event(), threading.Event()

    def run() -> None:
        with gate.hold(80 * MIB):
            shrunk.wait(5)
            gate.shrink(90 * MIB)  # never raised
            assert gate.reserved == 80 * MIB
            gate.shrink(30 * MIB)
            log.append("shrunk")
            done.wait(5)

    a = threading.Thread(target=run, daemon=True)
    a.start()
    _wait_for(lambda: gate.reserved == 80 * MIB)
    b_go = threading.Event()
    b = _start(gate, 50 * MIB, log, "b", b_go)
    _wait_for(lambda: gate.waits == 1)
    assert "start b" not in log  # 130 MiB would not fit
    shrunk.set()
    _wait_for(lambda: "start b" in log)  # 80 MiB does
    assert log.index("shrunk") < log.index("start b")
    done.set()
    b_go.set()
    a.join(5)
    b.join(6)
    assert gate.reserved == 0  # each hold returned what it held at its end
    gate.shrink(0)  # outside a hold: nothing to lower
    assert gate.reserved == 0


def test_a_run_raises_its_reservation_only_where_it_fits_now_and_no_one_waits():
    gate = WorkingSetGate(100 * MIB)
    assert not gate.try_raise(10 * MIB)  # outside a hold under a limit: nothing to raise
    assert gate.reserved == 0
    with gate.hold(30 * MIB):
        assert gate.try_raise(20 * MIB)  # already holds more: unchanged
        assert gate.reserved == 30 * MIB
        assert gate.try_raise(90 * MIB)
        assert gate.reserved == 90 * MIB
        assert not gate.try_raise(101 * MIB)  # over the capacity: unchanged, no wait
        assert gate.reserved == 90 * MIB
    assert gate.reserved == 0  # the hold returned what it held at its end

    log, go, release = [], threading.Event(), threading.Event()

    def run() -> None:
        with gate.hold(60 * MIB):
            go.wait(5)
            log.append(gate.try_raise(70 * MIB))  # fits the capacity, but b waits for room
            release.wait(5)

    a = threading.Thread(target=run, daemon=True)
    a.start()
    _wait_for(lambda: gate.reserved == 60 * MIB)
    b_go = threading.Event()
    b = _start(gate, 50 * MIB, log, "b", b_go)
    _wait_for(lambda: gate.waits == 1)
    go.set()
    _wait_for(lambda: bool(log))
    assert log == [False] and gate.reserved == 60 * MIB
    release.set()
    _wait_for(lambda: "start b" in log)
    b_go.set()
    a.join(5)
    b.join(6)
    assert gate.reserved == 0
    unlimited = WorkingSetGate(None)  # no limit: nothing to reserve against
    assert unlimited.try_raise(1 << 40)
    with unlimited.hold(MIB):
        assert unlimited.try_raise(1 << 40)


def test_kokoro_predicts_2_mib_per_token_divided_by_the_speed():
    assert kokoro_memory.run_bytes(120, 1.0) == 4 * MIB + 2 * MIB * 120
    assert kokoro_memory.run_bytes(93, 0.6) == 4 * MIB + int(2 * MIB * 93 / 0.6)
    assert 180 * MIB < kokoro_memory.run_bytes(93, 1.0) < 200 * MIB  # measured 189 MiB


def test_piper_stages_predict_the_encoder_and_the_largest_window():
    from voxflow.models.piper.model import PiperAcousticStage, PiperDecoderStage
    from voxflow.models.piper.pace import DecodePace
    from voxflow.models.piper.settings import PiperSettings

    class Family:  # the stages read only the settings' plan (segments decoded in line)
        from voxflow.models.piper.settings import PiperSettings
        settings = PiperSettings(hand_on=False)

    acoustic, decoder = PiperAcousticStage(Family()), PiperDecoderStage(Family())
    state, _ = make_state(voice="joe")

    def phonemes(n: int):
        return stage_item(state, 0, PhonemeSegment("x", np.ones(n, np.int64)))

    short = acoustic.working_set_bytes(StageBatch.of([phonemes(50)]))
    assert short == piper_memory.encoder_bytes(1, 50) + piper_memory.decode_bytes(121)
    # a long segment decodes windows of at most 512 + 2 * 12 frames, one at a time
    long = acoustic.working_set_bytes(StageBatch.of([phonemes(600)]))
    assert long == piper_memory.encoder_bytes(1, 600) + piper_memory.decode_bytes(536)
    assert 100 * MIB < long < 140 * MIB  # measured 111 MiB at 645 phoneme ids
    # with hand_on, unseeded, it decodes here at most a first segment's head under load
    # (200 + 2 x 12 frames; the rest is the decoder stage's, and all of it alone)
    Family.settings = PiperSettings(hand_on=True)
    Family.pace = DecodePace()
    handing = PiperAcousticStage(Family())
    long = handing.working_set_bytes(StageBatch.of([phonemes(600)]))
    assert long == piper_memory.encoder_bytes(1, 600) + piper_memory.decode_bytes(224)
    # ... but a continuation due soon is decoded here whole, by windows
    soon = stage_item(state, 1, PhonemeSegment("x", np.ones(600, np.int64)))
    late = handing.working_set_bytes(StageBatch.of([soon], slack_s=(0.5,)))
    assert late == piper_memory.encoder_bytes(1, 600) + piper_memory.decode_bytes(536)
    z = np.zeros((1, 192, 300), np.float32)
    window = DecodeWindow([z, np.ones((1, 1, 300), np.float32)], (20, 280), (12, 248))
    windows = StageBatch.of([stage_item(state, 0, window)])
    assert decoder.working_set_bytes(windows) == piper_memory.decode_bytes(260)
    in_line = StageBatch.of([stage_item(state, 0, np.zeros(100, np.float32))])
    assert decoder.working_set_bytes(in_line) == 0


def test_a_piper_acoustic_run_keeps_only_its_decode_of_the_known_frames_after_encoding():
    from voxflow.models.piper.model import PiperAcousticStage
    from voxflow.models.piper.synth import Encoded

    class Family:  # segments decoded in line
        from voxflow.models.piper.settings import PiperSettings
        settings = PiperSettings(hand_on=False)

    class Graph:
        frames = object()  # a cut graph: the flow and decoder run in this stage's windows

    acoustic = PiperAcousticStage(Family())
    state, _ = make_state(voice="joe")
    batch = StageBatch.of([stage_item(state, 0, PhonemeSegment("x", np.ones(n, np.int64)))
                           for n in (200, 250)])
    z = np.zeros((2, 192, 700), np.float32)
    encoded = Encoded([z], np.asarray([430, 650]), np.zeros((2, 250), np.float32))
    # predicted from 250 ids: the encoder and a 536-frame window; known: 430 frames, and
    # 650 frames are decoded in windows of at most 512 + 2 x 12
    assert acoustic._decode_bytes(Graph(), encoded, batch) == piper_memory.decode_bytes(536)
    encoded = Encoded([z], np.asarray([430, 300]), np.zeros((2, 250), np.float32))
    assert acoustic._decode_bytes(Graph(), encoded, batch) == piper_memory.decode_bytes(430)
    Graph.frames = None  # an uncut graph made the waveforms in its encoder run
    assert acoustic._decode_bytes(Graph(), encoded, batch) == 0


class _Predicting(Stage):
    """Predicts 7 MiB per item and records what the gate holds while it runs."""

    name = "acoustic"

    def __init__(self) -> None:
        super().__init__(max_batch_size=4)
        self.seen: list[int] = []

    def working_set_bytes(self, batch: StageBatch) -> int:
        return 7 * MIB * len(batch)

    def run(self, batch: StageBatch) -> list:
        self.seen.append(GATE.reserved)
        return [Audio(np.zeros(4, np.float32)) for _ in batch]


def test_a_worker_holds_the_stages_prediction_while_the_batch_runs():
    stage = _Predicting()
    jobs = [job(make_state()[0], 0, "a"), job(make_state()[0], 0, "b")]
    before = GATE.reserved
    run_stage_batch("fake", stage, jobs, None, EngineMetrics())
    assert stage.seen == [before + 14 * MIB] and GATE.reserved == before


@pytest.mark.parametrize("headroom", [400, None])
def test_the_engine_accounts_each_models_load_and_gives_the_gate_the_budgets_room(
        monkeypatch, headroom):
    register_fake_family(monkeypatch)
    settings = load_settings(None, {
        "engine.warmup": False, "engine.memory_headroom_mb": headroom,
        "models": [{"name": "fake", "family": "fake", "options": {}}]})
    engine = Engine(settings)
    asyncio.run(engine.start())
    try:
        assert list(BUDGET.models) == ["fake"]
        if headroom is None:
            assert BUDGET.limit is None and GATE.capacity is None
        else:
            # the audio cache's bound (cache.max_bytes, on by default) is on top of the headroom
            cache = settings.cache.max_bytes
            assert cache == 64 << 20
            assert BUDGET.limit == BUDGET.models_bytes + 400 * 10**6 + cache
            assert GATE.capacity == BUDGET.run_capacity == max(
                0, 400 * 10**6 - BUDGET.base - (32 << 20))
    finally:
        engine.stop()
    assert BUDGET.limit is None and GATE.capacity is None  # stopped: no budget left behind
