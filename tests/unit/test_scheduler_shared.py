"""Scheduler rule 8: a stage's workers also take the next stage's items, by playback deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from fakes import KeyedStage, fake_audio, job, make_state, register_fake_family

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.request import SpeechRequest
from voxflow.engine.scheduler import Job, StageQueue, drain
from voxflow.stages.items import StageItem


class Serving(KeyedStage):
    name = "acoustic"
    serves_next = True


class Next(KeyedStage):
    """Payload "now" is urgent, "spare" urgent in 5 s (audio to spare), "late" never (a
    newcomer past its first audio's target)."""

    name = "decoder"

    def urgent_in(self, item: StageItem, slack_s: float, audio_flowing: bool) -> float:
        return {"now": 0.0, "spare": 5.0, "late": float("inf")}[item.payload]


class InOrderNext(Next):
    in_order = True


def _pair(later_stage: Next | None = None) -> tuple[StageQueue, StageQueue]:
    metrics = EngineMetrics()
    first = StageQueue("fake", Serving(), metrics)
    later = StageQueue("fake", later_stage or Next(), metrics)
    first.serve(later)
    return first, later


def _playing(seconds_left: float):
    """A request whose first segment's 4 s of audio went out and has `seconds_left` to play."""
    state, _ = make_state()
    state.set_segment_count(3)
    state.deliver(0, np.zeros(8000 * 4, np.float32))
    state.first_audio_at = time.perf_counter() - (4.0 - seconds_left)
    return state


def _taken(queue: StageQueue) -> tuple[str, list[str]]:
    source, batch = queue.next_work()
    return source.stage.name, [j.item.payload for j in batch]


def test_a_worker_takes_the_next_stages_urgent_item_ahead_of_its_own_newcomer():
    first, later = _pair()
    first.put(job(make_state()[0], 0, "own"))  # a newcomer: due at its arrival + 1 s
    later.put(job(_playing(seconds_left=0.3), 1, "now"))  # runs dry within the lead
    assert _taken(first) == ("decoder", ["now"])
    assert _taken(first) == ("acoustic", ["own"])


def test_a_worker_keeps_to_its_own_item_while_the_next_stages_has_audio_to_spare():
    first, later = _pair()
    later.put(job(_playing(seconds_left=0.3), 1, "spare"))  # due first, but not urgent
    first.put(job(make_state()[0], 0, "own"))
    assert _taken(first) == ("acoustic", ["own"])
    assert _taken(first) == ("decoder", ["spare"])  # nothing of its own left: any item


def test_a_late_newcomers_item_of_the_next_stage_goes_by_priority():
    first, later = _pair()
    late, _ = make_state()  # arrived first: due first
    first.put(job(make_state()[0], 0, "own"))
    later.put(job(late, 0, "late"))
    assert _taken(first) == ("decoder", ["late"])


def test_the_next_stages_order_within_a_request_holds_for_lent_workers():
    first, later = _pair(InOrderNext())
    state, _ = make_state()
    later.put(job(state, 0, "now", part=0, final=False))
    later.put(job(state, 0, "now", part=1, final=True))
    source, batch = first.next_work()
    assert source is later and [j.item.part for j in batch] == [0]
    assert later.lend(None, time.perf_counter()) == []  # part 1 waits while part 0 runs
    later.done(batch)
    assert [j.item.part for j in later.lend(None, time.perf_counter())] == [1]


def test_a_waiting_worker_wakes_when_the_next_stage_gets_an_item():
    first, later = _pair()
    taken: list[tuple[str, list[str]]] = []
    worker = threading.Thread(target=lambda: taken.append(_taken(first)))
    worker.start()
    time.sleep(0.1)
    started = time.perf_counter()
    later.put(job(_playing(seconds_left=3.0), 1, "spare"))
    worker.join(timeout=2)
    assert taken == [("decoder", ["spare"])]
    assert time.perf_counter() - started < 0.5


def test_a_worker_loop_runs_lent_batches_with_their_own_stage_and_marks_them_done():
    first, later = _pair(InOrderNext())
    own_runs: list[list[Job]] = []
    lent_runs: list[tuple[str, list[Job]]] = []
    state = _playing(seconds_left=3.0)
    later.claim(job(state, 0, "spare"))  # segment 0 passed on: its segment 1 is next
    later.put(job(state, 1, "spare", part=0, final=False))
    later.put(job(state, 1, "spare", part=1, final=True))
    first.put(job(make_state()[0], 0, "own"))

    def on_lent(source: StageQueue, batch: list[Job]) -> None:
        lent_runs.append((source.stage.name, batch))
        if len(lent_runs) == 2:
            first.close()

    worker = threading.Thread(target=drain, args=(first, own_runs.append),
                              kwargs={"on_served": on_lent})
    worker.start()
    worker.join(timeout=3)
    assert not worker.is_alive()
    assert [[j.item.payload for j in b] for b in own_runs] == [["own"]]
    # part 1 ran only once part 0's run was marked done (rule 5 through the lent worker)
    assert [(name, [j.item.part for j in b]) for name, b in lent_runs] == [
        ("decoder", [0]), ("decoder", [1])]


def _settings(monkeypatch, **options):
    register_fake_family(monkeypatch)
    return load_settings(None, {"engine.warmup": False, "models": [
        {"name": "fake", "family": "fake", "options": {"vocoder": True, **options}}]})


def test_a_stage_without_workers_runs_on_the_workers_of_the_stage_before_it(monkeypatch):
    settings = _settings(monkeypatch, acoustic_workers=2)

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            request = SpeechRequest("fake", "aa|b|cccc", "alice", seed=3)
            chunks = await engine.submit(request).collect()
            names = {t.name for t in engine._threads}
            return chunks, names, engine.models["fake"].family.vocoder_threads
        finally:
            engine.stop()

    chunks, threads, vocoder_threads = asyncio.run(main())
    for i, (chunk, text) in enumerate(zip(chunks, ["aa", "b", "cccc"], strict=True)):
        np.testing.assert_array_equal(chunk.samples, fake_audio(3, i, text))
    assert not any("vocoder" in name for name in threads)
    assert vocoder_threads and vocoder_threads <= {"fake-acoustic-0", "fake-acoustic-1"}


def test_a_stage_without_workers_that_nothing_serves_fails_the_load(monkeypatch):
    settings = _settings(monkeypatch, serve_vocoder=False)

    async def main():
        engine = Engine(settings)
        with pytest.raises(ValueError, match="stage 'vocoder' has no workers and no earlier "
                                             "stage serves it"):
            await engine.start()
        engine.stop()
        return engine.health()

    assert asyncio.run(main())["models"]["fake"]["status"] == "failed"
