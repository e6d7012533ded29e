"""Stalled readers (issue 40, item 2): a request's synthesis waits while its audio runs more than
`server.max_buffered_audio_s` ahead of what its consumer has read, and a consumer away for
`server.client_stall_timeout_s` after taking a chunk has its request cancelled ("stalled").

The fake family (tests/unit/fakes.py) makes 10 samples per character; here at 800 Hz, so an
80-letter segment is 800 samples, one second."""

import asyncio
import logging
import time

import numpy as np
import pytest
from fakes import FakeSettings, fake_audio, register_fake_family

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import ClientStalledError
from voxflow.memory_gate import GATE

SEGMENT = "a" * 80  # one second of fake audio
RATE = 800


@pytest.fixture
def engine_with(monkeypatch):
    register_fake_family(monkeypatch)

    def make(options: dict | None = None, engine: dict | None = None, **server) -> Engine:
        overrides = {f"server.{key}": v for key, v in server.items()}
        overrides.update({f"engine.{key}": v for key, v in (engine or {}).items()})
        overrides["engine.warmup"] = False
        options = {"sample_rate": RATE, **(options or {})}
        overrides["models"] = [{"name": "fake", "family": "fake", "options": options}]
        settings = load_settings(None, overrides)
        assert isinstance(settings.models[0].options, FakeSettings)
        return Engine(settings)

    return make


def value(engine: Engine, name: str, **labels) -> float | None:
    return engine.metrics.registry.get_sample_value(name, {"model": "fake", **labels})


def req(segments: int, **kwargs) -> SpeechRequest:
    kwargs.setdefault("voice", "alice")
    return SpeechRequest("fake", "|".join([SEGMENT] * segments), **kwargs)


async def settle(condition, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_a_consumer_that_stops_reading_holds_synthesis_at_the_buffer_limit(engine_with):
    engine = engine_with({"item_sleep_s": 0.01}, max_buffered_audio_s=2.0,
                         client_stall_timeout_s=30.0)

    async def main():
        await engine.start()
        try:
            stream = engine.submit(req(20, seed=4))
            first = await stream.__anext__()  # taken, and not read on for a while
            await asyncio.sleep(0.6)  # 20 segments take 0.2 s unheld
            held = (stream.state.audio_samples, value(engine, "voxflow_stage_items_total",
                                                      stage="acoustic"), GATE.buffered)
            health = engine.health()
            rest = [chunk async for chunk in stream]  # reading on releases it
            return first, held, health, rest, stream.state, GATE.buffered
        finally:
            engine.stop()

    first, (emitted, run, queued), health, rest, state, after = asyncio.run(main())
    # read 0: emitted stops at the first chunk past 2 s ahead (3 segments), one segment per run
    assert emitted == 3 * RATE and run == 3
    # the two chunks not taken count against the memory gate's capacity, float32
    assert queued == 2 * RATE * 4 and after == 0
    # held for its reader, it gave its slot to others (parked) until read on
    assert health["inflight_requests"] == 0 and health["parked_requests"] == 1
    chunks = [first, *rest]
    assert len(chunks) == 20 and chunks[-1].is_last
    np.testing.assert_array_equal(chunks[7].samples, fake_audio(4, 7, SEGMENT))
    assert state.read_samples == 19 * RATE and state.audio_samples == 20 * RATE
    assert value(engine, "voxflow_requests_total", status="ok") == 1


def test_a_held_request_does_not_keep_the_others_waiting(engine_with):
    engine = engine_with({"item_sleep_s": 0.01}, max_buffered_audio_s=1.0,
                         client_stall_timeout_s=30.0)

    async def main():
        await engine.start()
        try:
            stalled = engine.submit(req(50))
            await stalled.__anext__()
            await settle(lambda: stalled.state.backlogged)
            queue = engine.models["fake"].queues[1]
            waiting = queue.waiting_requests(set())
            started = time.monotonic()
            other = await engine.submit(req(3, seed=1)).collect()
            elapsed = time.monotonic() - started
            await stalled.aclose()
            return waiting, other, elapsed
        finally:
            engine.stop()

    waiting, other, elapsed = asyncio.run(main())
    assert waiting == 0  # the held request's 47 queued segments are not counted
    assert [c.samples.size for c in other] == [RATE, RATE, RATE] and other[-1].is_last
    assert elapsed < 1.0


def test_a_consumer_away_past_the_stall_timeout_is_cancelled_and_logged(engine_with, caplog):
    engine = engine_with({"item_sleep_s": 0.01}, max_buffered_audio_s=2.0,
                         client_stall_timeout_s=0.3)

    async def main():
        await engine.start()
        try:
            stream = engine.submit(req(20))
            await stream.__anext__()
            await asyncio.sleep(0.6)  # blocked sending the chunk, as to a client that reads none
            health = engine.health()
            with pytest.raises(ClientStalledError) as info:
                await stream.__anext__()
            assert GATE.buffered == 0  # its chunks made ahead were dropped
            after = await engine.submit(req(2, seed=2)).collect()
            return info.value, health, after
        finally:
            engine.stop()

    with caplog.at_level(logging.WARNING, logger="voxflow.engine.stream"):
        err, health, after = asyncio.run(main())
    assert err.status == 408 and err.code == "client_stalled"
    assert health["inflight_requests"] == 0  # its slot came back at the stall, not at the read
    assert value(engine, "voxflow_cancellations_total", reason="stalled") == 1
    assert value(engine, "voxflow_requests_total", status="stalled") == 1
    assert len(after) == 2 and after[-1].is_last
    line = "read nothing for 0.3 s (0.0 s of audio sent, 3.0 s made); cancelled"
    assert any(line in r.getMessage() for r in caplog.records)


def test_a_consumer_that_keeps_reading_never_stalls(engine_with):
    engine = engine_with({"item_sleep_s": 0.05}, max_buffered_audio_s=0.5,
                         client_stall_timeout_s=0.2)

    async def main():
        await engine.start()
        try:
            chunks = []
            async for chunk in engine.submit(req(6)):
                chunks.append(chunk)
                await asyncio.sleep(0.1)  # sending takes a while, but under the stall limit
            return chunks
        finally:
            engine.stop()

    chunks = asyncio.run(main())
    assert len(chunks) == 6 and chunks[-1].is_last
    assert value(engine, "voxflow_requests_total", status="ok") == 1


def test_a_parked_request_gives_its_slot_to_a_newcomer_and_resumes_once_read(engine_with):
    engine = engine_with({"item_sleep_s": 0.01}, {"max_inflight_requests": 1},
                         max_buffered_audio_s=1.0, client_stall_timeout_s=30.0)

    async def main():
        await engine.start()
        try:
            stalled = engine.submit(req(8, seed=6))
            first = await stalled.__anext__()
            await settle(lambda: engine.health()["parked_requests"] == 1)
            other = await asyncio.wait_for(engine.submit(req(2, seed=1)).collect(), 3)
            rest = [chunk async for chunk in stalled]
            return first, other, rest, engine.health()
        finally:
            engine.stop()

    first, other, rest, health = asyncio.run(main())
    assert len(other) == 2 and other[-1].is_last  # with the only slot parked, it still ran
    chunks = [first, *rest]
    assert len(chunks) == 8 and chunks[-1].is_last
    np.testing.assert_array_equal(chunks[5].samples, fake_audio(6, 5, SEGMENT))
    assert health["parked_requests"] == 0 and health["inflight_requests"] == 0
    assert value(engine, "voxflow_requests_total", status="ok") == 2
