"""A worker loop that dies (an exception around a run, here the ``worker_die`` failpoint)
fails its batch's requests at once with 500 ``worker_died``, is restarted, counted in
``voxflow_worker_restarts_total`` and reported on `/health`; other requests are not disturbed
(issue 40 item 5). Before supervision the thread ended silently and its requests waited for
the request timeout."""

import asyncio
import time

import pytest
from fakes import FakeSettings, register_fake_family

from voxflow import failpoints
from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.engine.supervisor import Supervisor
from voxflow.errors import WorkerDiedError


@pytest.fixture
def settings(monkeypatch):
    register_fake_family(monkeypatch)
    monkeypatch.setattr(failpoints, "ACTIVE", {"worker_die": "DIE"})
    overrides = {"engine.warmup": False, "engine.request_timeout_s": 30,
                 "models": [{"name": "fake", "family": "fake",
                             "options": {"acoustic_workers": 1, "item_sleep_s": 0.05}}]}
    loaded = load_settings(None, overrides)
    assert isinstance(loaded.models[0].options, FakeSettings)
    return loaded


def test_a_dead_worker_fails_its_batch_at_once_and_its_loop_serves_on(settings):
    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            other = asyncio.create_task(engine.submit(
                SpeechRequest("fake", "first|second|third", "alice")).collect())
            started = time.monotonic()
            dying = await asyncio.gather(engine.submit(
                SpeechRequest("fake", "DIE here", "alice")).collect(), return_exceptions=True)
            failed_after = time.monotonic() - started
            after = await engine.submit(SpeechRequest("fake", "after|it", "bob")).collect()
            return (dying[0], failed_after, await other, after, engine.health(),
                    engine.metrics.registry.get_sample_value(
                        "voxflow_worker_restarts_total", {"model": "fake", "stage": "frontend"}))
        finally:
            engine.stop()

    error, failed_after, other, after, health, restarts = asyncio.run(main())
    assert isinstance(error, WorkerDiedError)
    assert (error.status, error.code) == (500, "worker_died")
    assert "stage 'frontend'" in error.message and "fake-frontend-0" in error.message
    assert failed_after < 5  # not the 30 s request timeout
    assert [c.is_last for c in other] == [False, False, True]  # undisturbed, every segment
    assert [c.is_last for c in after] == [False, True]  # the one front-end worker runs again
    assert restarts == 1
    assert health["status"] == "ready"
    deaths = health["models"]["fake"]["worker_restarts"]
    assert list(deaths) == ["frontend"] and deaths["frontend"]["restarts"] == 1
    assert deaths["frontend"]["last"].startswith("fake-frontend-0: WorkerDeath: failpoint")


def test_a_loop_that_returns_is_not_restarted_and_one_that_keeps_dying_pauses():
    from prometheus_client import CollectorRegistry, Counter

    counter = Counter("restarts", "test", ["model", "stage"], registry=CollectorRegistry())
    supervisor = Supervisor(counter)
    calls: list[float] = []

    def loop() -> None:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise RuntimeError("bug around a run")

    supervisor.supervise("m", "s", loop)()  # returns once the loop returns
    assert len(calls) == 3
    assert calls[2] - calls[1] >= 0.9  # died again within RESTART_PAUSE_S: paused
    assert counter.labels("m", "s")._value.get() == 2
    assert supervisor.health("m") == {"s": {"restarts": 2,
                                            "last": "MainThread: RuntimeError: bug around a run"}}
    assert supervisor.health("other") == {}


def test_a_dead_autoregressive_loop_fails_its_running_segments_and_restarts(monkeypatch):
    from fake_streaming import FakeDecoder, register_streaming_family

    from voxflow.failpoints import WorkerDeath

    register_streaming_family(monkeypatch)
    step = FakeDecoder.step
    died: list[str] = []

    def dying_step(self, batch, states):
        for item in batch:  # the first step of a segment holding "DIE" kills the loop once
            if "DIE" in item.payload and not died:
                died.append(item.request.request_id)
                raise WorkerDeath("a bug around a decode step")
        return step(self, batch, states)

    monkeypatch.setattr(FakeDecoder, "step", dying_step)
    settings = load_settings(None, {"engine.warmup": False, "engine.request_timeout_s": 30,
                                    "models": [{"name": "fake3", "family": "fake3",
                                                "options": {"step_sleep_s": 0.01}}]})

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            started = time.monotonic()
            dying = await asyncio.gather(engine.submit(
                SpeechRequest("fake3", "xxDIExx", "alice")).collect(), return_exceptions=True)
            failed_after = time.monotonic() - started
            after = await engine.submit(SpeechRequest("fake3", "abcdefg", "alice")).collect()
            return dying[0], failed_after, after, engine.supervisor.health("fake3")
        finally:
            engine.stop()

    error, failed_after, after, deaths = asyncio.run(main())
    assert isinstance(error, WorkerDiedError) and error.code == "worker_died"
    assert "stage 'decoder'" in error.message and failed_after < 5
    assert after and after[-1].is_last  # the restarted loop decodes the next request whole
    assert deaths["decoder"]["restarts"] == 1
