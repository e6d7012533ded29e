"""Serving one bistream generation on the engine (issue 43 item 2), tiny weights on CPU: a request
fed with text while it runs streams audio before its text has ended; seeded reruns give the same
bytes whatever the text arrival; while it waits for text it holds its KV cache, takes no LM call
and does not keep other requests from running; cancelling or a text timeout frees every state;
families that speak sentence by sentence refuse a fed request."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("tiktoken")

from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402
from voxflow.errors import TextStalledError  # noqa: E402
from voxflow.stages.text_feed import TextFeed  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cosyvoice3-tiny.yaml"
VOICE = "random-tiny"
PIECES = ["Hello the", "re, this is", " one stream", " of text. And a sec", "ond sentence ",
          "follows it, word by word", " until the end."]


def _engine(**options) -> Engine:
    overrides = {"engine.warmup": False}
    overrides.update({f"models.0.options.{k}": v for k, v in options.items()})
    return Engine(load_settings(str(CONFIG), overrides))


def _sha(chunks) -> tuple[str, int]:
    audio = np.concatenate([c.samples for c in chunks]) if chunks else np.zeros(0, np.float32)
    return hashlib.sha256(audio.tobytes()).hexdigest(), int(audio.size)


def _fed(engine: Engine, first: str, seed: int | None = 9, **extra):
    feed = TextFeed()
    feed.push(first)
    request = SpeechRequest("cosyvoice3", first, VOICE, seed=seed, text_feed=feed, **extra)
    return feed, engine.submit(request, timeout_s=600)


def _lm(engine: Engine):
    return engine.models["cosyvoice3"].queues[1].stage


async def _states_freed(engine: Engine) -> list[tuple[int, int]]:
    queues = engine.models["cosyvoice3"].queues
    for _ in range(300):
        if all(q.stage.live_states() == 0 for q in queues):
            break
        await asyncio.sleep(0.01)
    return [(q.stage.live_states(), q.stage.state_bytes()) for q in queues]


def test_audio_streams_while_text_arrives_and_reruns_are_identical():
    async def main():
        engine = _engine()
        await engine.start()
        try:
            # arrival 1: piece by piece; the first audio must come before the text ends
            feed, stream = _fed(engine, PIECES[0])
            for piece in PIECES[1:4]:
                feed.push(piece)
            first = await asyncio.wait_for(stream.__anext__(), 60)
            ended_before_first_audio = feed.ended
            for piece in PIECES[4:]:
                feed.push(piece)
                await asyncio.sleep(0.02)
            feed.end()
            slow = [first, *[c async for c in stream]]
            # arrival 2: everything at once; arrival 3: one character at a time
            feed, stream = _fed(engine, PIECES[0])
            feed.push("".join(PIECES[1:]))
            feed.end()
            whole = await stream.collect()
            text = "".join(PIECES)
            feed, stream = _fed(engine, text[0])
            for ch in text[1:]:
                feed.push(ch)
            feed.end()
            chars = await stream.collect()
            feed, stream = _fed(engine, PIECES[0], seed=10)
            feed.push("".join(PIECES[1:]))
            feed.end()
            other = await stream.collect()
            return ended_before_first_audio, slow, whole, chars, other, await _states_freed(engine)
        finally:
            engine.stop()

    ended_early, slow, whole, chars, other, freed = asyncio.run(main())
    assert not ended_early and slow[0].samples.size > 0  # audio while text still arrives
    assert len(slow) > 2 and slow[-1].is_last
    sha, samples = _sha(slow)
    assert samples > 0 and samples % 960 == 0  # 960 samples per speech token
    assert _sha(whole) == (sha, samples) == _sha(chars)  # arrival timing changes nothing
    assert _sha(other)[0] != sha
    assert freed == [(0, 0), (0, 0), (0, 0)]


def test_a_request_waiting_for_text_holds_its_cache_without_compute_and_others_run():
    async def main():
        engine = _engine()
        await engine.start()
        try:
            feed, stream = _fed(engine, "Only a few")
            collected = asyncio.create_task(stream.collect())  # iterating starts the work
            lm = _lm(engine)
            for _ in range(500):  # the first group's tokens, then it waits for text
                states = list(lm._live.values())
                if states and states[0].stream.schedule.waiting:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            state = next(iter(lm._live.values()))
            calls = state.stream.schedule.calls
            other = await engine.submit(SpeechRequest("cosyvoice3", "Meanwhile, this one.",
                                                      VOICE, seed=1)).collect()
            await asyncio.sleep(0.2)
            waiting = (state.stream.schedule.waiting, state.stream.schedule.calls, calls,
                       lm.live_states(), lm.nbytes(state))
            feed.push(" words, then the rest of the sentence.")
            feed.end()
            mine = await collected
            return waiting, other, mine, await _states_freed(engine)
        finally:
            engine.stop()

    (waiting, calls_after, calls_before, live, _), other, mine, freed = asyncio.run(main())
    assert waiting and calls_after == calls_before  # parked: no LM call while it waited
    assert live == 1  # its state stayed while the other request ran to its end
    assert _sha(other)[1] > 0 and _sha(mine)[1] > 0
    assert freed == [(0, 0), (0, 0), (0, 0)]


def test_cancelling_a_fed_request_frees_every_state():
    async def main():
        engine = _engine()
        await engine.start()
        try:
            feed, stream = _fed(engine, "A long stream of text that keeps the model busy for a")
            feed.push(" while, sentence after sentence, and it never ends on its own.")
            await asyncio.wait_for(stream.__anext__(), 60)
            queues = engine.models["cosyvoice3"].queues
            during = [(q.stage.live_states(), q.stage.state_bytes()) for q in queues]
            await stream.aclose()
            return during, await _states_freed(engine)
        finally:
            engine.stop()

    during, after = asyncio.run(main())
    assert during[1][0] == 1 and during[1][1] > 0  # the LM held the generation's KV cache
    assert after == [(0, 0), (0, 0), (0, 0)]


def test_a_stream_without_text_or_end_times_out_and_frees_its_state():
    async def main():
        engine = _engine(bistream_text_timeout_s=0.3)
        await engine.start()
        try:
            _, stream = _fed(engine, "Then nothing more is sent,")
            try:
                await asyncio.wait_for(stream.collect(), 60)
            except TextStalledError as exc:
                error = exc
            return error, await _states_freed(engine)
        finally:
            engine.stop()

    error, freed = asyncio.run(main())
    assert (error.status, error.code) == (408, "text_timeout")
    assert "No text arrived for 0.3 s" in error.message
    assert freed == [(0, 0), (0, 0), (0, 0)]


def test_the_reference_rules_error_fails_the_request_not_the_engine():
    """`bistream_rule: reference` masks only sos in the mixed phase (Q5): with the tiny random
    weights a seeded RAS draw soon picks another id >= S, which the reference raises on. The
    request fails with that error; the engine serves the next request."""
    async def main():
        engine = _engine(bistream_rule="reference")
        await engine.start()
        try:
            feed, stream = _fed(engine, PIECES[0])
            feed.push("".join(PIECES[1:]))
            feed.end()
            try:
                await stream.collect()
            except Exception as exc:  # noqa: BLE001 (what the request ended with)
                error = exc
            after = await engine.submit(SpeechRequest("cosyvoice3", "Still fine.", VOICE,
                                                      seed=1)).collect()
            return error, after, await _states_freed(engine)
        finally:
            engine.stop()

    error, after, freed = asyncio.run(main())
    assert "should not get token" in str(error) and getattr(error, "status", None) == 500
    assert _sha(after)[1] > 0
    assert freed == [(0, 0), (0, 0), (0, 0)]


def test_a_fed_generation_caches_its_settled_flow_frames_and_sounds_the_same_without():
    # `flow_settled_cache: auto` is `fed` on the CPU: the fed segment's streamed flow calls
    # solve only their new frames; `off` recomputes every prefix. Same audio up to rounding.
    async def run(**options):
        engine = _engine(**options)
        await engine.start()
        try:
            feed, stream = _fed(engine, " ".join(PIECES))
            feed.end()
            first = await asyncio.wait_for(stream.__anext__(), 60)
            token2wav = engine.models["cosyvoice3"].queues[2].stage
            cached = [s.segment.flow_cache is not None for s in token2wav.states.values()
                      if s.segment is not None]
            chunks = [first, *[c async for c in stream]]
            return cached, np.concatenate([c.samples for c in chunks])
        finally:
            engine.stop()

    cached, audio = asyncio.run(run())
    uncached, plain = asyncio.run(run(flow_settled_cache="off"))
    assert cached == [True] and uncached == [False]
    assert audio.size == plain.size > 24000
    assert float(np.abs(audio - plain).max()) <= 1e-4
