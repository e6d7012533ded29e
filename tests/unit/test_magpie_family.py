"""The `magpie` family through the engine (issue 12, spec §8-9), tiny random weights on CPU:
settings checked once; a request streams in several codec chunks labelled as noise; its audio
equals the offline decode (`generate` then the one-shot NanoCodec decode) of the same codes;
greedy reruns and seeded samples repeat their bytes; a client leaving mid-stream frees the
acoustic KV caches and the codec slots; bad input is refused before any audio."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from contextlib import asynccontextmanager

import numpy as np
import pytest
from pydantic import ValidationError

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import one_torch_thread  # noqa: E402,F401 (autouse fixture)

from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402
from voxflow.errors import InvalidRequestError  # noqa: E402
from voxflow.models.magpie.generate import DecodeOptions, generate  # noqa: E402
from voxflow.models.magpie.settings import MagpieSettings  # noqa: E402
from voxflow.models.magpie.stages import segment_seed  # noqa: E402
from voxflow.models.magpie.weights import StandInTokenizer  # noqa: E402
from voxflow.models.nanocodec.fsq import fsq_decode  # noqa: E402
from voxflow.models.nanocodec.stream import decode  # noqa: E402

NOTE = "random (tiny_random acoustic, tiny_fixture codec): output is noise, not speech"
SPF = 96  # samples per frame of the tiny fixture decoder
FP32 = 5e-5
TEXT = "Hello there. A second sentence."


def _settings(**options):
    return load_settings(None, {
        "engine.warmup": False,
        "models": [{"name": "magpie", "family": "magpie",
                    "options": {"max_frames": 24, **options}}],
    })


@asynccontextmanager
async def _running(settings):
    engine = Engine(settings)
    await engine.start()
    try:
        yield engine, engine.family("magpie")
    finally:
        engine.stop()


def _gauge(engine: Engine, name: str, stage: str) -> float | None:
    return engine.metrics.registry.get_sample_value(name, {"model": "magpie", "stage": stage})


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def _synthesize(settings, text: str = TEXT, seed: int | None = None, voice: str = "random-0"):
    async def main():
        async with _running(settings) as (engine, family):
            request = SpeechRequest("magpie", text, voice, seed=seed)
            chunks = await engine.submit(request).collect()
            gauges = {(n, s): _gauge(engine, n, s)
                      for n in ("voxflow_stage_states", "voxflow_stage_state_bytes")
                      for s in ("acoustic", "codec")}
            for event in ("segments", "truncated_at_max_frames"):
                gauges[("events", event)] = engine.metrics.registry.get_sample_value(
                    "voxflow_stage_events_total",
                    {"model": "magpie", "stage": "acoustic", "event": event})
            return chunks, family, engine.health(), gauges

    return asyncio.run(main())


def _digest(chunks) -> str:
    return hashlib.sha256(np.concatenate([c.samples for c in chunks]).tobytes()).hexdigest()


def test_settings_are_checked_once():
    assert MagpieSettings().codec_chunk_frames == 4
    with pytest.raises(ValidationError, match="extra"):
        MagpieSettings.model_validate({"codec_chunk_size": 4})
    with pytest.raises(ValidationError, match="min_frames 9 exceeds max_frames 8"):
        MagpieSettings(min_frames=9, max_frames=8)
    with pytest.raises(ValidationError, match="tiny_random"):
        MagpieSettings.model_validate({"acoustic": "/some/checkpoint.nemo"})
    with pytest.raises(ValidationError, match="device"):
        MagpieSettings(device="tpu")
    with pytest.raises(ValidationError, match="below one decoder step"):
        MagpieSettings(frame_stacking=2, max_frames=1, min_frames=0)
    with pytest.raises(ValueError, match="codec_chunk_frames"):
        load_settings(None, {"models": [{"name": "m", "family": "magpie",
                                         "options": {"codec_chunk_frames": 0}}]})
    with pytest.raises(ValueError, match=r"models\[0\].options: codec_max_streams 4 is below "
                       "engine.max_inflight_requests 8"):
        load_settings(None, {"engine.max_inflight_requests": 8,
                             "models": [{"name": "m", "family": "magpie",
                                         "options": {"codec_max_streams": 4}}]})
    assert load_settings(None, {"engine.max_inflight_requests": 4, "models": [
        {"name": "m", "family": "magpie", "options": {"codec_max_streams": 4}}]})


def test_stand_in_tokenizer_ends_with_eos():
    ids = StandInTokenizer(20).encode("Ab é")
    assert ids.dtype == np.int64 and ids.tolist() == [65 % 18, 98 % 18, 32 % 18, 233 % 18, 19]


def test_a_request_streams_in_chunks_equal_to_the_offline_decode(caplog):
    settings = _settings(greedy=True, codec_chunk_frames=4)
    with caplog.at_level(logging.WARNING):
        chunks, family, health, gauges = _synthesize(settings)
    assert len(chunks) > 2 and chunks[-1].is_last
    assert all(c.samples.size % SPF == 0 for c in chunks)
    assert family.random_weights_note() == NOTE and family.describe()["weights"] == NOTE
    assert health["models"]["magpie"]["weights"] == NOTE
    assert any("weights are " + NOTE in r.getMessage() for r in caplog.records)
    assert set(family.voices) == {"random-0", "random-1"}
    # the same codes, generated offline and decoded one-shot
    want = []
    for piece in ("Hello there.", "A second sentence."):
        ids = torch.from_numpy(family.tokenizer.encode(piece))[None]
        result = generate(family.acoustic, ids, torch.tensor([ids.shape[1]]), torch.tensor([0]),
                          DecodeOptions(greedy=True))
        codes = result.item_codes(0)
        assert codes.shape[1] >= 4 and int(codes.max()) < 2016
        want.append(decode(family.decoder, fsq_decode(codes[None]))[0].numpy())
    got = np.concatenate([c.samples for c in chunks])
    assert got.shape == np.concatenate(want).shape
    assert float(np.abs(got - np.concatenate(want)).max()) <= FP32
    assert {k: v for k, v in gauges.items() if k[0] != "events"} == dict.fromkeys(
        [(n, s) for n in ("voxflow_stage_states", "voxflow_stage_state_bytes")
         for s in ("acoustic", "codec")], 0.0)


def test_greedy_reruns_are_byte_identical_and_seeds_repeat_samples():
    greedy = _settings(greedy=True)
    assert _digest(_synthesize(greedy, seed=1)[0]) == _digest(_synthesize(greedy, seed=2)[0])
    sampled = _settings(greedy=False, top_k=80, temperature=0.6)
    first, again, other = (_digest(_synthesize(sampled, seed=s)[0]) for s in (7, 7, 8))
    assert first == again and first != other


def test_serving_magpie_imports_no_other_family():
    import subprocess
    import sys

    code = ("import sys; from voxflow.models.registry import family_class; "
            "family_class('magpie'); "
            "print(' '.join(m for m in sys.modules if m.startswith('voxflow.models.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    others = {m.split(".")[2] for m in out} - {"magpie", "nanocodec", "base", "registry",
                                                "nemo_archive", "shared_settings", "files",
                                                "cosyvoice3"}
    assert not others
    # of CosyVoice3 only the strict state-dict check the loaders share (no stages, no LM)
    assert {m for m in out if m.startswith("voxflow.models.cosyvoice3")} <= {
        "voxflow.models.cosyvoice3", "voxflow.models.cosyvoice3.loader"}


def test_sampling_uses_a_generator_per_segment_seeded_from_the_request():
    settings = _settings(greedy=False)
    chunks, family, _, _ = _synthesize(settings, text="One sentence only.", seed=11)
    ids = torch.from_numpy(family.tokenizer.encode("One sentence only."))[None]
    opts = DecodeOptions(greedy=False, seed=segment_seed(11, 0))
    result = generate(family.acoustic, ids, torch.tensor([ids.shape[1]]), torch.tensor([0]), opts)
    want = decode(family.decoder, fsq_decode(result.item_codes(0)[None]))[0].numpy()
    got = np.concatenate([c.samples for c in chunks])
    assert got.shape == want.shape and float(np.abs(got - want).max()) <= FP32


def test_client_leaving_mid_stream_frees_acoustic_caches_and_codec_slots():
    settings = _settings(greedy=True, max_frames=400, codec_chunk_frames=2)
    text = " ".join(f"Sentence {i} of a long request." for i in range(8))

    async def main():
        async with _running(settings) as (engine, family):
            stream = engine.submit(SpeechRequest("magpie", text, "random-1"))
            first = await stream.__anext__()
            held = {s: (_gauge(engine, "voxflow_stage_states", s),
                        _gauge(engine, "voxflow_stage_state_bytes", s))
                    for s in ("acoustic", "codec")}
            await stream.aclose()
            await _until(lambda: family.acoustic_stage.live_states() == 0)
            await _until(lambda: family.codec.live_states() == 0)
            await _until(lambda: family.codec.pool.in_use == 0)
            after = {s: (_gauge(engine, "voxflow_stage_states", s),
                         _gauge(engine, "voxflow_stage_state_bytes", s))
                     for s in ("acoustic", "codec")}
            return first, held, after

    first, held, after = asyncio.run(main())
    assert first.samples.size == 2 * SPF  # one 2-frame chunk reached the client
    assert held["acoustic"][0] >= 1 and held["acoustic"][1] > 0  # segments running: KV caches
    assert held["codec"][0] == 1 and held["codec"][1] > 0
    assert after == {"acoustic": (0, 0), "codec": (0, 0)}


def test_a_segment_without_eos_stops_at_max_frames_and_is_counted():
    chunks, _, health, gauges = _synthesize(_settings(greedy=True, max_frames=6), text="Hi.")
    assert sum(c.samples.size for c in chunks) == 6 * SPF
    assert health["models"]["magpie"]["stages"]["acoustic"] == {
        "segments": 1, "truncated_at_max_frames": 1}
    assert gauges[("events", "segments")] == 1
    assert gauges[("events", "truncated_at_max_frames")] == 1


def test_bad_input_is_refused_before_any_audio():
    settings = _settings()

    async def main():
        async with _running(settings) as (engine, _):
            errors = []
            for text, voice in (("Hello.", "John"), ("   ", "random-0")):
                try:
                    await engine.submit(SpeechRequest("magpie", text, voice)).collect()
                except InvalidRequestError as exc:
                    errors.append(exc.code)
            # nothing speakable is not refused: a short silence (issue 38 item 4)
            silent = await engine.submit(SpeechRequest("magpie", "?!", "random-0")).collect()
            return errors, np.concatenate([c.samples for c in silent])

    errors, silent = asyncio.run(main())
    assert errors == ["voice_not_found", "empty_input"]
    assert silent.size == round(0.2 * 22050) and not silent.any()


def test_a_speed_other_than_1_stretches_each_whole_segment():
    settings = _settings(greedy=True)

    async def main():
        async with _running(settings) as (engine, _):
            out = {}
            for speed in (1.0, 2.0, 2.0):
                request = SpeechRequest("magpie", TEXT, "random-0", speed=speed)
                out.setdefault(speed, []).append(await engine.submit(request).collect())
            return out

    out = asyncio.run(main())
    plain = out[1.0][0]
    fast, again = out[2.0]
    assert len(fast) == 2  # one chunk per segment: each decoded whole, then stretched
    want = sum(round(n / 2) for n in (24 * SPF, 24 * SPF))  # both segments hit max_frames
    assert sum(c.samples.size for c in plain) == 48 * SPF
    assert sum(c.samples.size for c in fast) == want
    assert _digest(fast) == _digest(again)


def test_frame_stacking_2_with_the_full_size_random_codec():
    settings = _settings(greedy=True, frame_stacking=2, codec_weights="full_random",
                         max_frames=8, codec_chunk_frames=4)
    chunks, family, health, _ = _synthesize(settings, text="Hi.")
    assert family.acoustic.config.frame_stacking == 2
    assert family.describe()["samples_per_frame"] == 1024
    assert "full_random codec" in health["models"]["magpie"]["weights"]
    ids = torch.from_numpy(family.tokenizer.encode("Hi."))[None]
    result = generate(family.acoustic, ids, torch.tensor([ids.shape[1]]), torch.tensor([0]),
                      DecodeOptions(greedy=True))
    frames = result.item_codes(0).shape[1]
    assert sum(c.samples.size for c in chunks) == frames * 1024
    assert len(chunks) == -(-frames // 4)  # one chunk per 4 frames, the last maybe shorter


@pytest.mark.parametrize("min_frames", [4, 6])
def test_a_forced_eos_ends_the_segment_at_min_frames_and_is_never_emitted(min_frames):
    from voxflow.models.magpie.family import MagpieFamily
    from voxflow.models.magpie.stages import TextSegment
    from voxflow.stages.autoregressive import Step
    from voxflow.stages.items import RequestInfo, StageBatch, StageItem

    family = MagpieFamily("magpie", MagpieSettings(greedy=True, min_frames=min_frames,
                                                   max_frames=20, codec_chunk_frames=2))
    eos = family.acoustic.config.audio_eos
    with torch.no_grad():  # EOS wins every head whenever it is allowed
        for head in family.acoustic.local_transformer_out_projections:
            head.bias[eos] = 1e4
    acoustic = family.stages()[1]
    info = RequestInfo("r", "magpie", "random-1", "en", 3, True)
    item = StageItem(info, 0, TextSegment("Stop.", family.tokenizer.encode("Stop.")))
    state = acoustic.open_state(item)
    steps: list[Step] = []
    while not steps or not steps[-1].done:
        result = acoustic.step(StageBatch.of([item], step=(len(steps),)), [state])[0]
        assert isinstance(result, Step)
        steps.append(result)
    acoustic.close_state(state)
    parts = [s.emit for s in steps if s.emit is not None]
    codes = np.concatenate(parts, axis=1)
    assert codes.shape == (8, min_frames) and int(codes.max()) < 2016 and int(codes.min()) >= 0
    assert [p.shape[1] for p in parts[:-1]] == [2] * (len(parts) - 1)  # parts of chunk size
    assert acoustic.events() == {"segments": 1, "truncated_at_max_frames": 0}
    assert acoustic.live_states() == 0 and acoustic.state_bytes() == 0
