"""The CosyVoice3 family on the engine contract (issue 10, spec §9), tiny random weights on CPU:
each stage alone (front end, batched LM steps and hop emission, token2wav parts), then the
engine: seeded requests give the same bytes run to run and beside other requests, states are
freed, and everything is labelled as noise from random weights."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("tiktoken")

from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402
from voxflow.errors import InvalidRequestError  # noqa: E402
from voxflow.models.base import UNSPEAKABLE_SILENCE_S  # noqa: E402
from voxflow.models.cosyvoice3.lm import KVCache  # noqa: E402
from voxflow.models.cosyvoice3.lm_batch import decode_step  # noqa: E402
from voxflow.models.cosyvoice3.model import CosyVoice3Family  # noqa: E402
from voxflow.models.cosyvoice3.settings import CosyVoice3Settings  # noqa: E402
from voxflow.models.cosyvoice3.stages import TextSegment, segment_seed  # noqa: E402
from voxflow.models.cosyvoice3.text import ENDOFPROMPT_ID  # noqa: E402
from voxflow.models.cosyvoice3.token2wav import Token2WavSegment  # noqa: E402
from voxflow.stages.autoregressive import Step  # noqa: E402
from voxflow.stages.items import RequestInfo, StageBatch, StageItem  # noqa: E402
from voxflow.stages.outputs import Audio, Segments  # noqa: E402
from voxflow.text.document import parse_input  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cosyvoice3-tiny.yaml"
VOICE = "random-tiny"
NOTE = "random (tiny_fixture): output is noise, not speech"
SAMPLES_PER_TOKEN = 960  # 2 mel frames x 480 samples


@pytest.fixture(scope="module")
def family() -> CosyVoice3Family:
    return CosyVoice3Family("cosyvoice3", CosyVoice3Settings())


def _info(request_id: str = "r", seed: int = 5, seeded: bool = True) -> RequestInfo:
    return RequestInfo(request_id, "cosyvoice3", VOICE, "en", seed, seeded)


def _text_item(family: CosyVoice3Family, text: str, segment: int = 0, speed: float = 1.0,
               **info) -> StageItem:
    ids = np.asarray(family.tokenizer.encode(text), np.int32)
    return StageItem(_info(**info), segment, TextSegment(text, ids), speed=speed)


def _decode(family: CosyVoice3Family, item: StageItem) -> tuple[list[Step], object]:
    """Drive the LM stage over one segment as the engine's loop does; its steps and state."""
    lm = family.stages()[1]
    state = lm.begin(item)
    steps: list[Step] = []
    while not steps or not steps[-1].done:
        result = lm.step(StageBatch.of([item], step=(len(steps),)), [state])[0]
        assert isinstance(result, Step)
        steps.append(result)
    return steps, state


def test_loads_the_tiny_weights_and_labels_them_random(family, caplog):
    assert family.voices[VOICE].sample_rate == 24000 and family.default_voice == VOICE
    assert family.random_weights_note() == NOTE
    assert family.describe()["weights"] == NOTE
    assert family.languages(VOICE)[:3] == ("und", "zh", "en")
    with caplog.at_level(logging.WARNING):
        CosyVoice3Family("again", CosyVoice3Settings())
    assert any("weights are " + NOTE in r.getMessage() for r in caplog.records)


def test_frontend_segments_text_into_ids_with_markers_read_as_text(family, caplog):
    frontend = family.stages()[0]
    text = "First sentence here. Then <|endofprompt|> a second one!"
    item = StageItem(_info(), -1, parse_input(text))
    with caplog.at_level(logging.WARNING):
        (plan,) = frontend.run(StageBatch.of([item]))
    assert isinstance(plan, Segments) and len(plan.payloads) == 2
    first, second = plan.payloads
    assert first.text == "First sentence here."
    assert first.ids.dtype == np.int32
    assert first.ids.tolist() == family.tokenizer.encode("First sentence here.")
    assert ENDOFPROMPT_ID not in second.ids.tolist()  # spec §11: markers escaped
    assert any(NOTE in r.getMessage() and "request r" in r.getMessage() for r in caplog.records)
    (empty,) = frontend.run(StageBatch.of([StageItem(_info(), -1, parse_input("🙂 ... !"))]))
    assert isinstance(empty, Segments) and empty.payloads == []  # silence (issue 38 item 4)
    assert empty.lead_silence_s == UNSPEAKABLE_SILENCE_S


def test_batched_decode_step_equals_each_row_alone(family):
    lm = family.models.lm
    voice = family.voice_models[VOICE]
    with torch.inference_mode():
        prefills = [lm.prefill_embeds(torch.tensor(ids), voice.prompt_text_ids,
                                      voice.prompt_speech_tokens)
                    for ids in ([10, 20, 30], [7] * 9, [1, 2])]
        alone, together = [], []
        for prefill in prefills:
            for caches in (alone, together):
                cache = KVCache()
                lm(prefill[None], cache)
                caches.append(cache)
        inputs = lm.embed_speech(torch.tensor([3, 50, 77]))[:, None]  # [3, 1, D]
        rows, hidden = decode_step(lm, inputs, together)
        singles = [lm(inputs[i : i + 1], alone[i])[0][0] for i in range(3)]
    assert rows.shape == (3, 281) and hidden.shape == (3, 64)
    for i in range(3):
        assert float((rows[i] - singles[i]).abs().max()) < 1e-5
        assert together[i].length == alone[i].length == prefills[i].shape[0] + 1


def test_lm_emits_one_part_per_streamed_hop_then_the_rest(family):
    steps, state = _decode(family, _text_item(family, "Hello there, a longer sentence to say."))
    parts = [s.emit for s in steps if s.emit is not None]
    sizes = [p.size for p in parts]
    tokens = np.concatenate(parts)
    assert tokens.tolist() == state.tokens and len(tokens) >= state.min_len
    assert state.min_len == 2 * 9 and state.max_len == 20 * 9  # 9 text ids
    # P = 7, hop 5: the first part is 8 settled + 3 lookahead tokens, then 10, 20, 20 ...
    # (no silent-token runs were dropped here: filtered == sampled)
    assert state.filtered == len(tokens)
    hops = [11, 10, 20, 20, 20, 20, 20, 20, 20]
    streamed = sizes[:-1]
    assert streamed == hops[: len(streamed)] and sizes[-1] < 20 + 3 + 1
    assert steps[-1].done and all(not s.done for s in steps[:-1])


@pytest.mark.parametrize("speed", [1.5, 1.0])
def test_lm_emits_one_part_offline_or_at_speed_not_1(family, speed):
    offline = CosyVoice3Settings(token2wav_mode="offline")
    fam = family if speed != 1.0 else CosyVoice3Family("offline", offline)
    steps, state = _decode(fam, _text_item(fam, "Hello there, a longer sentence.", speed=speed))
    parts = [s.emit for s in steps if s.emit is not None]
    assert len(parts) == 1 and parts[0].tolist() == state.tokens and state.schedule is None


def test_seeded_segments_sample_the_same_tokens_and_others_differ(family):
    text = "Hello there, a longer sentence to say."
    a = _decode(family, _text_item(family, text, seed=11))[1].tokens
    b = _decode(family, _text_item(family, text, seed=11))[1].tokens
    c = _decode(family, _text_item(family, text, seed=11, segment=1))[1].tokens
    assert a == b and a != c
    assert segment_seed(11, 0) != segment_seed(11, 1) and 0 <= segment_seed(2**63 - 1, 9) < 2**63


def test_token2wav_parts_give_the_pieces_of_one_whole_segment(family):
    steps, state = _decode(family, _text_item(family, "Hello there, a longer sentence to say."))
    stage = family.stages()[2]
    parts = [s.emit for s in steps if s.emit is not None]
    outputs = []
    for k, part in enumerate(parts):
        item = StageItem(_info("t2w"), 0, part, part=k, final=k == len(parts) - 1)
        (out,) = stage.run(StageBatch.of([item]))
        assert isinstance(out, Audio) and out.samples.dtype == np.float32
        outputs.append(out.samples)
    assert stage.live_states() == 1
    stage.release("t2w")
    assert stage.live_states() == 0
    # The same tokens through one Token2WavSegment: the same pieces, sample for sample.
    ref = Token2WavSegment(family.models.flow, family.models.hift, family.flow_prompt(VOICE),
                           family.models.hops)
    with torch.inference_mode():
        pieces = []
        for part in parts[:-1]:
            pieces.append(torch.cat(ref.push(part.tolist()), dim=1))
        pieces.append(torch.cat(ref.push(parts[-1].tolist()) + ref.finish(), dim=1))
    for got, want in zip(outputs, pieces, strict=True):
        assert np.array_equal(got, want[0].numpy())
    total = sum(o.size for o in outputs)
    assert total == SAMPLES_PER_TOKEN * len(state.tokens)
    # First part: 8 settled tokens -> 16 mel frames, 8 held back -> 3840 samples (as the
    # reference trace's first call); each later streamed part settles its hop's 2 x hop frames.
    assert outputs[0].size == 3840
    assert [o.size for o in outputs[1:-1]] == [960 * p.size for p in parts[1:-1]]


def _engine_settings(**overrides):
    return load_settings(str(CONFIG), {"engine.warmup": False, **overrides})


def _sha(chunks) -> tuple[str, int]:
    audio = np.concatenate([c.samples for c in chunks])
    return hashlib.sha256(audio.tobytes()).hexdigest(), int(audio.size)


def test_seeded_requests_give_identical_audio_alone_and_beside_others():
    text = "Hello there. This is a second sentence, a little longer."

    async def main():
        engine = Engine(_engine_settings())
        await engine.start()
        try:
            first = await engine.submit(SpeechRequest("cosyvoice3", text, VOICE, seed=3)).collect()
            crowd = [engine.submit(SpeechRequest("cosyvoice3", text + f" Extra {i}.", VOICE))
                     for i in range(3)]
            again = engine.submit(SpeechRequest("cosyvoice3", text, VOICE, seed=3))
            results = await asyncio.gather(again.collect(), *(s.collect() for s in crowd))
            other = await engine.submit(SpeechRequest("cosyvoice3", text, VOICE, seed=4)).collect()
            held = [q.stage.live_states() for q in engine.models["cosyvoice3"].queues]
            labels = {"model": "cosyvoice3", "stage": "lm", "le": "1.0"}
            registry = engine.metrics.registry
            alone = registry.get_sample_value("voxflow_batch_size_bucket", labels)
            steps = registry.get_sample_value("voxflow_batch_size_count", {
                "model": "cosyvoice3", "stage": "lm"})
            return first, results, other, held, steps - alone
        finally:
            engine.stop()

    first, results, other, held, batched_steps = asyncio.run(main())
    assert batched_steps > 0  # the unseeded requests decoded together in some steps
    sha, samples = _sha(first)
    assert samples > 0 and samples % SAMPLES_PER_TOKEN == 0
    assert _sha(results[0]) == (sha, samples)  # beside three unseeded requests
    assert _sha(other)[0] != sha
    assert all(_sha(r)[1] > 0 for r in results[1:])
    assert len(first) > 2 and first[-1].is_last  # streamed in several chunks
    assert held == [0, 0, 0]


def test_bad_voice_and_empty_text_are_refused_before_any_work():
    async def main():
        engine = Engine(_engine_settings())
        await engine.start()
        try:
            errors = []
            for voice, text in (("tiny", "Hello."), (VOICE, "   ")):
                try:
                    engine.submit(SpeechRequest("cosyvoice3", text, voice))
                except InvalidRequestError as exc:
                    errors.append((exc.status, exc.param))
            return errors
        finally:
            engine.stop()

    assert asyncio.run(main()) == [(400, "voice"), (400, "input")]


def test_speak_writes_a_wav_whose_comment_says_noise_and_repeats_with_a_seed(capsys, tmp_path):
    from voxflow.cli import main

    digests = []
    for name in ("a.wav", "b.wav"):
        out = tmp_path / name
        argv = ["speak", "--config", str(CONFIG), "A sentence.", "-o", str(out), "--seed", "2"]
        assert main(argv) == 0
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    err = capsys.readouterr().err
    assert "note: the weights are " + NOTE in err
    import soundfile as sf

    with sf.SoundFile(str(tmp_path / "a.wav")) as f:
        assert f.comment == NOTE
        assert f.samplerate == 24000 and f.frames > 0 and f.frames % SAMPLES_PER_TOKEN == 0
    assert digests[0] == digests[1]


def test_a_checkpoint_directory_loads_on_meta_with_assign_and_equals_the_tiny_path(
    family, tmp_path, monkeypatch
):
    """The real-checkpoint path (llm.pt, flow.pt, hift.pt with its ``generator.`` prefix),
    exercised with the tiny weights saved as .pt files and the full sizes swapped for tiny."""
    from voxflow.models.cosyvoice3 import loader, weights
    from voxflow.models.cosyvoice3.flow import FlowConfig
    from voxflow.models.cosyvoice3.hift import HiFTConfig
    from voxflow.models.cosyvoice3.lm import TINY_LM_CONFIG

    states = loader.read_tiny_state_dicts(weights.REPO_FIXTURES)
    states["hift.pt"] = {"generator." + k: v for k, v in states["hift.pt"].items()}
    for name, state in states.items():
        torch.save(state, tmp_path / name)
    monkeypatch.setattr(weights, "FULL_SIZES",
                        (TINY_LM_CONFIG, FlowConfig.tiny(), HiFTConfig.tiny()))
    sine = family.models.hift.m_source.sine_waves
    monkeypatch.setattr(weights, "full_size_sine_waves", lambda: sine)
    models = weights._checkpoint(CosyVoice3Settings(), torch.device("cpu"), tmp_path)
    assert models.kind == "checkpoint" and models.random_note is None
    for module in (models.lm, models.flow, models.hift):
        assert not any(t.is_meta for t in [*module.parameters(), *module.buffers()])
    tokens = [5, 17, 40, 3, 66, 12, 9, 80, 33, 21, 7, 44, 2]
    audio = []
    for m in (family.models, models):
        segment = Token2WavSegment(m.flow, m.hift, family.flow_prompt(VOICE), m.hops)
        with torch.inference_mode():
            audio.append(torch.cat(segment.push(tokens) + segment.finish(), dim=1))
        with torch.inference_mode():
            prefill = m.lm.prefill_embeds(torch.tensor([4, 8]))
            audio.append(m.lm(prefill[None])[0])
    assert torch.equal(audio[0], audio[2]) and audio[0].shape == (1, 960 * len(tokens))
    assert torch.equal(audio[1], audio[3])


def test_cancelling_mid_stream_frees_the_lm_and_token2wav_states():
    text = " ".join(f"Sentence number {i} is here, and it goes on a while." for i in range(6))

    async def main():
        engine = Engine(_engine_settings())
        await engine.start()
        try:
            queues = engine.models["cosyvoice3"].queues
            stream = engine.submit(SpeechRequest("cosyvoice3", text, VOICE, seed=1))
            await stream.__anext__()
            during = [(q.stage.live_states(), q.stage.state_bytes()) for q in queues]
            await stream.aclose()
            for _ in range(500):
                if all(q.stage.live_states() == 0 for q in queues):
                    break
                await asyncio.sleep(0.01)
            after = [(q.stage.live_states(), q.stage.state_bytes()) for q in queues]
            return during, after, engine.metrics.registry
        finally:
            engine.stop()

    during, after, registry = asyncio.run(main())
    # Mid-stream a KV cache (lm) or an accumulated mel (token2wav) is held, with its bytes.
    assert any(n > 0 and size > 0 for n, size in during[1:]), during
    assert after == [(0, 0), (0, 0), (0, 0)]
    for stage in ("lm", "token2wav"):
        labels = {"model": "cosyvoice3", "stage": stage}
        assert registry.get_sample_value("voxflow_stage_states", labels) == 0
        assert registry.get_sample_value("voxflow_stage_state_bytes", labels) == 0
    assert registry.get_sample_value("voxflow_cancellations_total",
                                     {"model": "cosyvoice3", "reason": "client"}) == 1


def test_without_torch_the_config_validates_and_loading_names_the_extra():
    import subprocess
    import sys

    script = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "safetensors"):
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
sys.meta_path.insert(0, Refuse())
from voxflow.config import load_settings
from voxflow.models.registry import family_class
settings = load_settings({str(CONFIG)!r})
assert settings.models[0].options.weights == "tiny_fixture"
try:
    family_class("cosyvoice3")
except ModuleNotFoundError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=CONFIG.parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("model family 'cosyvoice3' needs the package 'torch', which "
                                   "is not installed (install it with: pip install -e "
                                   "'.[cosyvoice3]')")


def test_require_graphs_without_cuda_is_refused_at_start_up():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: require_graphs is honoured here")
    with pytest.raises(ValueError, match="require_graphs is set, but CUDA is not"):
        CosyVoice3Family("cv3", CosyVoice3Settings(require_graphs=True, device="cuda"))


def test_a_bfloat16_estimator_starts_serves_and_repeats_a_seeded_request(family):
    """`estimator_dtype: bfloat16` (spec §9.3): the family starts with the DiT's weights cast
    (the rest float32), describes it, and serves a seeded request twice with the same bytes,
    which differ from the float32 family's audio for the same seed (bf16 really ran)."""
    text = "Hello there."

    async def serve(dtype: str):
        engine = Engine(_engine_settings(**{"models.0.options.estimator_dtype": dtype}))
        await engine.start()
        try:
            models = engine.models["cosyvoice3"].family.models
            runs = [await engine.submit(SpeechRequest("cosyvoice3", text, VOICE, seed=3))
                    .collect() for _ in range(2)]
            return models, runs
        finally:
            engine.stop()

    models, (first, again) = asyncio.run(serve("bfloat16"))
    est = models.flow.decoder.estimator
    assert est.proj_out.weight.dtype == torch.bfloat16 == est.compute_dtype
    assert models.flow.input_embedding.weight.dtype == torch.float32
    assert {p.dtype for p in [*models.lm.parameters(), *models.hift.parameters()]} == {
        torch.float32}
    sha, samples = _sha(first)
    assert samples > 0 and samples % SAMPLES_PER_TOKEN == 0 and first[-1].is_last
    assert _sha(again) == (sha, samples)
    _, (fp32, _) = asyncio.run(serve("float32"))
    assert _sha(fp32)[1] == samples and _sha(fp32)[0] != sha  # same tokens, other flow dtype
    bf16 = CosyVoice3Family("cv3", CosyVoice3Settings(estimator_dtype="bfloat16"))
    assert bf16.details()["estimator_dtype"] == "bfloat16"
    assert family.details()["estimator_dtype"] == "float32"


def test_a_bfloat16_estimator_casts_checkpoint_weights_like_the_tiny_ones(tmp_path, monkeypatch):
    """The checkpoint path (real key layout, loaded float32 on meta with assign) then cast to
    bfloat16 gives the same flow as the tiny path cast the same way."""
    from cosyvoice3_fixtures import tiny_prompt

    from voxflow.models.cosyvoice3 import loader, weights
    from voxflow.models.cosyvoice3.flow import FlowConfig
    from voxflow.models.cosyvoice3.hift import HiFTConfig
    from voxflow.models.cosyvoice3.lm import TINY_LM_CONFIG

    settings = CosyVoice3Settings(estimator_dtype="bfloat16")
    tiny = weights._tiny(settings, torch.device("cpu"))
    states = loader.read_tiny_state_dicts(weights.REPO_FIXTURES)
    for name, state in states.items():
        torch.save(state, tmp_path / name)
    monkeypatch.setattr(weights, "FULL_SIZES",
                        (TINY_LM_CONFIG, FlowConfig.tiny(), HiFTConfig.tiny()))
    monkeypatch.setattr(weights, "full_size_sine_waves", lambda: tiny.hift.m_source.sine_waves)
    ckpt = weights._checkpoint(settings, torch.device("cpu"), tmp_path)
    for m in (tiny, ckpt):
        est = m.flow.decoder.estimator
        assert {p.dtype for p in est.parameters()} == {torch.bfloat16}
        assert est.rotary_embed.inv_freq.dtype == torch.float32
    token = torch.tensor([[5, 17, 40, 3, 66, 12, 9, 80, 33, 21]])
    p = tiny_prompt()
    mels = [m.flow.inference(token, p.prompt_token, p.prompt_feat, p.embedding, streaming=False,
                             finalize=True) for m in (tiny, ckpt)]
    assert torch.equal(mels[0], mels[1]) and mels[0].dtype == torch.float32
