"""Long-form jobs run behind interactive requests (issue 44; `voxflow.engine.foreground`): a
background request's items wait while an interactive request is in the engine and for
`jobs.quiet_s` after the last one ends, then go on; the run in progress when an interactive
request arrives finishes.

The fake family (tests/unit/fakes.py) makes 10 samples per character, here at 800 Hz: an
80-letter segment is 800 samples, and each run sleeps `item_sleep_s`."""

import asyncio
import time

import pytest
from fakes import FakeSettings, register_fake_family

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.foreground import Foreground
from voxflow.engine.request import SpeechRequest

SEGMENT = "a" * 80
RATE = 800
QUIET_S = 0.3


@pytest.fixture
def engine(monkeypatch) -> Engine:
    register_fake_family(monkeypatch)
    settings = load_settings(None, {
        "engine.warmup": False, "jobs.quiet_s": QUIET_S,
        "models": [{"name": "fake", "family": "fake",
                    "options": {"sample_rate": RATE, "item_sleep_s": 0.02}}]})
    assert isinstance(settings.models[0].options, FakeSettings)
    return Engine(settings)


def req(segments: int) -> SpeechRequest:
    return SpeechRequest("fake", "|".join([SEGMENT] * segments), "alice", seed=3)


def test_a_background_request_waits_while_an_interactive_one_runs_then_finishes(engine):
    async def main():
        await engine.start()
        try:
            job = engine.submit(req(30), internal=True, background=True,
                                listener_ends_at=time.perf_counter() + 3600)
            job_chunks = asyncio.create_task(collect(job))
            while job.state.audio_samples < 2 * 800:  # the job is under way
                await asyncio.sleep(0.005)
            mine = engine.submit(req(4))
            at_submit = job.state.audio_samples
            got = [chunk async for chunk in mine]
            at_end = job.state.audio_samples
            await asyncio.sleep(QUIET_S / 2)
            in_quiet = job.state.audio_samples
            rest = await asyncio.wait_for(job_chunks, 10)
            return at_submit, at_end, in_quiet, got, rest, engine.foreground.interactive
        finally:
            engine.stop()

    async def collect(stream):
        return [chunk async for chunk in stream]

    at_submit, at_end, in_quiet, got, rest, interactive = asyncio.run(main())
    assert sum(c.samples.size for c in got) == 4 * 800
    # at most the job's run in progress when the interactive request came, one segment
    assert at_end - at_submit <= 800
    assert in_quiet == at_end  # nothing in the quiet time after it
    assert sum(c.samples.size for c in rest) == 30 * 800  # then the job goes on to its end
    assert interactive == 0


def test_foreground_counts_and_wakes_after_the_quiet_time():
    woken: list[str] = []

    class Held:
        def wake_held(self) -> None:
            woken.append("woken")

    async def main():
        gate = Foreground(quiet_s=0.05)
        held = Held()
        gate.add_background(held)  # type: ignore[arg-type]
        gate.enter()
        gate.enter()
        gate.leave()
        busy_with_one = gate.busy
        gate.leave()
        busy_in_quiet = gate.busy
        await asyncio.sleep(0.1)
        quiet_after = gate.busy
        gate.remove_background(held)  # type: ignore[arg-type]
        gate.enter()
        gate.leave()
        await asyncio.sleep(0.1)
        return busy_with_one, busy_in_quiet, quiet_after

    assert asyncio.run(main()) == (True, True, False)
    assert woken == ["woken"]  # once, after the last leave's quiet time, not after removal
