"""The NanoCodec stage inside the engine (issue 12), fed by the stand-in acoustic stage of
`fake_codec` (spec §8.2 Phase A): a request's streamed audio equals the one-shot decode of its
codes, and a client that leaves mid-stream leaves no codec state behind
(``voxflow_stage_states`` and ``voxflow_stage_state_bytes`` for ``stage="codec"`` back to 0)."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from fake_codec import register_codec_family, segment_codes  # noqa: E402

from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402
from voxflow.models.nanocodec.fsq import fsq_decode  # noqa: E402
from voxflow.models.nanocodec.stream import decode  # noqa: E402

FP32 = 5e-5


def _settings(monkeypatch, **options):
    register_codec_family(monkeypatch)
    return load_settings(None, {
        "engine.warmup": False,
        "models": [{"name": "codec", "family": "fakecodec", "options": options}],
    })


@asynccontextmanager
async def _running(settings):
    engine = Engine(settings)
    await engine.start()
    try:
        yield engine, engine.family("codec")
    finally:
        engine.stop()


def _metric(engine: Engine, name: str) -> float | None:
    return engine.metrics.registry.get_sample_value(name, {"model": "codec", "stage": "codec"})


async def _until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_streamed_request_equals_the_one_shot_decode_of_its_codes(monkeypatch):
    settings = _settings(monkeypatch, hop=3, chunk_frames=4)
    text = "abcdefghij|klmno"  # segments of 10 and 5 frames, parts of 3 frames

    async def main():
        async with _running(settings) as (engine, family):
            chunks = await engine.submit(SpeechRequest("codec", text, "random-0", seed=7)).collect()
            return chunks, family, engine

    chunks, family, engine = asyncio.run(main())
    got = np.concatenate([c.samples for c in chunks])
    want = [decode(family.decoder, fsq_decode(torch.from_numpy(
        segment_codes(7, seg, n))[None]))[0].numpy() for seg, n in ((0, 10), (1, 5))]
    assert got.shape == (15 * 96,) and chunks[-1].is_last
    assert float(np.abs(got - np.concatenate(want)).max()) <= FP32
    assert family.codec.pool.in_use == 0
    assert _metric(engine, "voxflow_stage_states") == 0
    assert _metric(engine, "voxflow_stage_state_bytes") == 0


def test_client_leaving_mid_stream_frees_the_codec_state(monkeypatch):
    settings = _settings(monkeypatch, hop=2, chunk_frames=2, step_sleep_s=0.02)
    text = "abcdefghijklmnopqrstuvwxyzabcdefghijklmn"

    async def main():
        async with _running(settings) as (engine, family):
            stream = engine.submit(SpeechRequest("codec", text, "random-0"))
            first = await stream.__anext__()
            held = (_metric(engine, "voxflow_stage_states"),
                    _metric(engine, "voxflow_stage_state_bytes"))
            await stream.aclose()
            await _until(lambda: family.codec.live_states() == 0)
            await _until(lambda: family.codec.pool.in_use == 0)
            return first, held, family, engine

    first, held, family, engine = asyncio.run(main())
    assert first.samples.size == 2 * 96  # one 2-frame chunk reached the client
    assert held == (1, family.codec.pool.slot_bytes)  # one slot, nothing queued
    assert _metric(engine, "voxflow_stage_states") == 0
    assert _metric(engine, "voxflow_stage_state_bytes") == 0
