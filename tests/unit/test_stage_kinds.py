"""The engine contract for multi-stage, stateful, streaming families (issue 9), on the fake
three-stage family of `fake_streaming` (front end -> autoregressive decoder -> bucketed
vocoder): chunks per segment part, joins and leaves at every decode step, state freed on
cancellation, padded == unpadded, eager fallback said out loud."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import numpy as np
import pytest
from fake_streaming import (
    RATE,
    SAMPLES_PER_TOKEN,
    StreamingFamily,
    StreamingSettings,
    expected_audio,
    register_streaming_family,
)
from fastapi.testclient import TestClient

from voxflow.audio.encode import encode_audio
from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import SynthesisError
from voxflow.server.app import create_app
from voxflow.stages.bucketed import check_ladder, pick_rung
from voxflow.stages.items import RequestInfo, StageBatch, StageItem
from voxflow.stages.state import RequestStates, StateReleased


def _settings(monkeypatch, **options):
    register_streaming_family(monkeypatch)
    return load_settings(None, {
        "engine.warmup": False,
        "models": [{"name": "fake3", "family": "fake3", "options": options}],
    })


@asynccontextmanager
async def _running(settings):
    engine = Engine(settings)
    await engine.start()
    try:
        yield engine, engine.family("fake3")
    finally:
        engine.stop()


def _metric(engine: Engine, name: str, **labels) -> float | None:
    return engine.metrics.registry.get_sample_value(name, {"model": "fake3", **labels})


def _steps(events: list[tuple], request_id: str) -> list[tuple]:
    """(segment, step number, batch size) of the decoder's steps for one request."""
    return [e[2:] for e in events if e[0] == "step" and e[1] == request_id]


async def _until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_each_part_of_a_segment_is_its_own_chunk_in_order(monkeypatch):
    async def main():
        async with _running(_settings(monkeypatch, hop=3)) as (engine, _):
            chunks = await engine.submit(SpeechRequest("fake3", "abcdefg|hij", "alice")).collect()
            return chunks, engine

    chunks, engine = asyncio.run(main())
    # "abcdefg": 7 tokens, parts of 3, 3, 1; "hij": one part of 3; parts count per request.
    expected = expected_audio("abcdefg", 3) + expected_audio("hij", 3, first_part=3)
    assert [c.samples.size for c in chunks] == [12, 12, 4, 12]
    for chunk, want in zip(chunks, expected, strict=True):
        np.testing.assert_allclose(chunk.samples, want, rtol=0, atol=1e-6)
    assert [c.is_last for c in chunks] == [False, False, False, True]
    assert _metric(engine, "voxflow_stage_items_total", stage="vocoder") == 4
    assert _metric(engine, "voxflow_stage_states", stage="vocoder") == 0  # released at the end
    assert _metric(engine, "voxflow_stage_states", stage="decoder") == 0


def test_first_audio_leaves_before_the_segment_is_decoded(monkeypatch):
    settings = _settings(monkeypatch, hop=2, step_sleep_s=0.02)

    async def main():
        async with _running(settings) as (engine, family):
            stream = engine.submit(SpeechRequest("fake3", "abcdefghij", "alice"))
            first = await stream.__anext__()
            family.log(("client", "first chunk"))
            rest = [c async for c in stream]
            return first, rest, family.events, stream.request_id

    first, rest, events, rid = asyncio.run(main())
    assert first.samples.size == 2 * SAMPLES_PER_TOKEN and len(rest) == 4
    client = events.index(("client", "first chunk"))
    last_step = max(i for i, e in enumerate(events) if e[0] == "step" and e[1] == rid)
    assert client < last_step  # the listener had audio while the decoder was still running


def test_requests_join_and_leave_the_running_batch_at_every_step(monkeypatch):
    settings = _settings(monkeypatch, hop=4, step_sleep_s=0.02, max_running=4)

    async def main():
        async with _running(settings) as (engine, family):
            long = engine.submit(SpeechRequest("fake3", "abcdefghijkl", "alice"))
            long_task = asyncio.ensure_future(long.collect())
            await _until(lambda: len(_steps(family.events, long.request_id)) >= 3)
            short = engine.submit(SpeechRequest("fake3", "xyz", "alice"))
            await short.collect()
            await long_task
            return family.events, long.request_id, short.request_id, family.decoder

    events, long_id, short_id, decoder = asyncio.run(main())
    long_steps, short_steps = _steps(events, long_id), _steps(events, short_id)
    assert [n for _, n, _ in long_steps] == list(range(12))  # every step, none repeated
    assert [n for _, n, _ in short_steps] == [0, 1, 2]  # its stop step is its third
    assert long_steps[0][2] == 1  # the first step did not wait for a fuller batch
    # The short request joined mid-generation: its first step (prefill) ran as a batch of its
    # own kind, then it decoded beside the long one, then left while the long one went on.
    joined_at = next(i for i, e in enumerate(events) if e[:2] == ("step", short_id))
    before = [e for e in events[:joined_at] if e[:2] == ("step", long_id)]
    assert 3 <= len(before) < 12
    assert short_steps[0][2] == 1 and {size for _, _, size in short_steps[1:]} == {2}
    left_at = max(i for i, e in enumerate(events) if e[:2] == ("step", short_id))
    after = [e for e in events[left_at + 1:] if e[:2] == ("step", long_id)]
    assert after and {e[4] for e in after} == {1}
    assert decoder.live_states() == 0


def test_cancelling_mid_stream_frees_every_stage_state(monkeypatch):
    settings = _settings(monkeypatch, hop=2, step_sleep_s=0.02)
    text = "abcdefghijklmnopqrstuvwxyz"

    async def main():
        async with _running(settings) as (engine, family):
            stream = engine.submit(SpeechRequest("fake3", text, "alice"))
            await stream.__anext__()
            held = (_metric(engine, "voxflow_stage_states", stage="decoder"),
                    _metric(engine, "voxflow_stage_states", stage="vocoder"))
            await stream.aclose()
            await _until(lambda: family.decoder.live_states() == 0)
            await _until(lambda: family.vocoder.live_states() == 0)
            steps = len(_steps(family.events, stream.request_id))
            await asyncio.sleep(0.1)
            later = len(_steps(family.events, stream.request_id))
            return held, steps, later, engine

    held, steps, later, engine = asyncio.run(main())
    assert held == (1, 1)  # one decode state, one vocoder state while it streamed
    assert steps < len(text) and later == steps  # decoding stopped at the next step boundary
    assert _metric(engine, "voxflow_stage_states", stage="decoder") == 0
    assert _metric(engine, "voxflow_stage_states", stage="vocoder") == 0
    assert _metric(engine, "voxflow_cancellations_total", reason="client") == 1


def test_a_failing_segment_fails_only_its_request_and_frees_its_state(monkeypatch):
    settings = _settings(monkeypatch, step_sleep_s=0.01)

    async def main():
        async with _running(settings) as (engine, family):
            good = engine.submit(SpeechRequest("fake3", "abcdef|ghi", "alice"))
            bad = engine.submit(SpeechRequest("fake3", "abcdef|de!f", "alice"))
            results = await asyncio.gather(good.collect(), bad.collect(),
                                           return_exceptions=True)
            await _until(lambda: family.decoder.live_states() == 0)
            return results, family

    (good, bad), family = asyncio.run(main())
    assert [c.samples.size for c in good] == [12, 12, 12]
    assert isinstance(bad, SynthesisError) and bad.status == 500
    assert "stage 'decoder'" in bad.message and "cannot decode 'de!f'" in bad.message
    assert family.decoder.live_states() == 0 and family.vocoder.live_states() == 0


def _item(request_id: str, tokens: list[int]) -> StageItem:
    info = RequestInfo(request_id, "fake3", "alice", "en-US", 0, False)
    return StageItem(info, 0, np.asarray(tokens, np.int64))


def test_padded_rows_and_positions_do_not_change_the_real_rows():
    family = StreamingFamily("fake3", StreamingSettings())
    items = [_item("a", [97]), _item("b", [98, 99, 100]), _item("c", list(range(100, 107)))]
    together = family.vocoder.run(StageBatch.of(items))
    alone = [StreamingFamily("fake3", StreamingSettings()).vocoder.run(StageBatch.of([i]))[0]
             for i in items]
    for padded, unpadded, item in zip(together, alone, items, strict=True):
        assert padded.samples.size == item.payload.size * SAMPLES_PER_TOKEN
        np.testing.assert_array_equal(padded.samples, unpadded.samples)
    hits, replays, eager, padded_sum, calls = family.vocoder.stats.snapshot()
    assert hits == {(4, 8): 1} and (replays, eager, calls) == (0, 1, 1)
    assert padded_sum == pytest.approx(1 - 11 / 32)


def test_bucket_ladders_are_checked_and_the_smallest_rung_that_fits_is_picked():
    assert [pick_rung((2, 4, 8), n) for n in (1, 2, 3, 8)] == [2, 2, 4, 8]
    with pytest.raises(ValueError, match="size 9 is above the largest bucket 8"):
        pick_rung((2, 4, 8), 9)
    for bad in ((), (0, 2), (4, 2), (2, 2)):
        with pytest.raises(ValueError, match="buckets must be positive and strictly ascending"):
            check_ladder("buckets", bad)


@pytest.mark.parametrize(("capture", "reason"), [
    (True, "eager: device is cpu"), (False, "eager: capture_graphs is off"),
])
def test_without_cuda_every_shape_runs_eagerly_and_health_says_why(monkeypatch, capture, reason):
    settings = _settings(monkeypatch, capture_graphs=capture)
    app = create_app(settings)
    with TestClient(app) as client:
        health = client.get("/health").json()
        graphs = health["models"]["fake3"]["stages"]["vocoder"]["graphs"]
        assert graphs == {"captured": 0, "shapes": 9, "eager": [reason]}
        body = {"model": "fake3", "voice": "alice", "input": "abcdefg|hij",
                "response_format": "pcm", "sample_rate": "native"}
        r = client.post("/v1/audio/speech", json=body)
        assert r.status_code == 200
        want = np.concatenate(expected_audio("abcdefg", 3) + expected_audio("hij", 3, 3))
        assert r.content == encode_audio(want, RATE, "pcm")
        metrics = client.get("/metrics").text
    assert 'voxflow_graph_runs_total{mode="eager",model="fake3",stage="vocoder"} 4.0' in metrics
    assert 'voxflow_stage_items_total{model="fake3",stage="vocoder"} 4.0' in metrics
    assert 'voxflow_stage_states{model="fake3",stage="decoder"} 0.0' in metrics


def test_request_states_are_created_once_released_once_and_never_recreated():
    freed = []
    states = RequestStates(lambda rid: {"id": rid}, free=freed.append)
    a = states.get_or_create("a")
    assert states.get_or_create("a") is a and len(states) == 1
    assert states.release("a") and not states.release("a")
    assert freed == [{"id": "a"}] and len(states) == 0
    with pytest.raises(StateReleased):
        states.get_or_create("a")  # a late run of an ended request gets no fresh state
    states.get_or_create("b")
    states.get_or_create("c")
    assert states.release_all() == 2 and len(states) == 0
