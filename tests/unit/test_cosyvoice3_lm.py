"""CosyVoice3 LM (spec §5, build item 9) against the reference fixtures, plus sampling unit tests.

Fixture tolerances (spec §1): prefill embeddings exact; one module call 1e-5; KV-cache steps 1e-4;
greedy tokens exact. Sampling (RAS) is not in the fixtures: hand-made distributions.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.unit.cosyvoice3_fixtures import meta, tensors  # noqa: E402
from voxflow.models.cosyvoice3.lm import (  # noqa: E402
    FULL_LM_CONFIG,
    TINY_LM_CONFIG,
    CosyVoice3LM,
    KVCache,
    LMDecoder,
    generate,
    length_limits,
)
from voxflow.models.cosyvoice3.sampling import (  # noqa: E402
    GreedySampler,
    RasSampler,
    SilentTokenFilter,
    mask_before_min_len,
    nucleus_candidates,
)

S = 81  # tiny speech_token_size


@pytest.fixture(scope="module")
def lm() -> CosyVoice3LM:
    model = CosyVoice3LM(TINY_LM_CONFIG)
    model.load_state_dict(tensors("lm_tiny_state_dict.safetensors.gz"), strict=True)
    return model.eval()


@pytest.fixture(scope="module")
def fx() -> dict:
    return tensors("lm_tiny_fixtures.safetensors")


@pytest.fixture(scope="module")
def zs_input(lm: CosyVoice3LM, fx: dict):
    with torch.inference_mode():
        return lm.prefill_embeds(
            fx["in.text"][0], fx["in.prompt_text"][0], fx["in.prompt_speech_token"][0]
        )


def maxdiff(a, b) -> float:
    return float((a - b).abs().max())


# --- layout -----------------------------------------------------------------------------------


def test_tiny_config_matches_the_fixture_metadata() -> None:
    cfg = meta("tiny_configs.json")["lm"]
    q = cfg["backbone"]["Qwen2Config"]
    t = TINY_LM_CONFIG.qwen2
    assert (t.hidden_size, t.intermediate_size, t.num_hidden_layers) == (
        q["hidden_size"],
        q["intermediate_size"],
        q["num_hidden_layers"],
    )
    assert (t.num_attention_heads, t.num_key_value_heads, t.head_dim) == (
        q["num_attention_heads"],
        q["num_key_value_heads"],
        q["head_dim"],
    )
    assert (t.vocab_size, t.rope_theta, t.rms_norm_eps) == (
        q["vocab_size"],
        q["rope_theta"],
        q["rms_norm_eps"],
    )
    assert TINY_LM_CONFIG.speech_token_size == cfg["args"]["speech_token_size"]
    full = cfg["full_size_differences"]
    f = FULL_LM_CONFIG.qwen2
    assert (f.hidden_size, f.intermediate_size, f.num_hidden_layers) == (
        full["hidden_size"],
        full["intermediate_size"],
        full["num_hidden_layers"],
    )
    assert (f.num_attention_heads, f.num_key_value_heads) == (
        full["num_attention_heads"],
        full["num_key_value_heads"],
    )
    assert FULL_LM_CONFIG.speech_token_size == full["speech_token_size"]
    lm_meta = meta("lm_tiny_meta.json")
    c = TINY_LM_CONFIG
    assert (c.sos, c.eos, c.task_id, c.fill) == tuple(
        lm_meta[k] for k in ("sos", "eos", "task_id", "fill")
    )
    assert lm_meta["stop_ids"] == [S, c.speech_vocab - 1]


def test_tiny_state_dict_keys_and_shapes_equal_the_fixture(lm: CosyVoice3LM) -> None:
    ref = tensors("lm_tiny_state_dict.safetensors.gz")
    ours = lm.state_dict()
    assert len(ours) == len(ref) == 29
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        k: tuple(v.shape) for k, v in ref.items()
    }
    for k, v in ref.items():
        assert torch.equal(ours[k], v), k
    # lm_head is tied to embed_tokens, as in the reference
    assert lm.llm.model.lm_head.weight is lm.llm.model.model.embed_tokens.weight


def test_strict_load_refuses_missing_and_extra_keys() -> None:
    model = CosyVoice3LM(TINY_LM_CONFIG)
    ref = tensors("lm_tiny_state_dict.safetensors.gz")
    missing = dict(ref)
    del missing["llm_decoder.weight"]
    with pytest.raises(RuntimeError, match="llm_decoder.weight"):
        model.load_state_dict(missing, strict=True)
    extra = dict(ref)
    extra["llm_embedding.weight"] = torch.zeros(2, 64)
    with pytest.raises(RuntimeError, match="llm_embedding"):
        model.load_state_dict(extra, strict=True)


def test_full_size_layout_on_meta_equals_the_manifest() -> None:
    manifest = meta("full_size_state_dict_manifest.json")["llm.pt"]
    with torch.device("meta"):
        model = CosyVoice3LM(FULL_LM_CONFIG)
    sd = model.state_dict()
    assert len(sd) == manifest["num_tensors"] == 293
    assert [k for k in sd] == [e["key"] for e in manifest["keys"]]
    assert {k: list(v.shape) for k, v in sd.items()} == {
        e["key"]: e["shape"] for e in manifest["keys"]
    }
    assert all(v.dtype == torch.float32 for v in sd.values())
    assert sum(p.numel() for p in model.parameters()) == manifest["num_params"] == 506_148_480
    assert sum(v.numel() for v in sd.values()) == manifest["num_state_elements"]


# --- prefill ----------------------------------------------------------------------------------


def test_zero_shot_prefill_embeds_are_exact(zs_input, fx: dict) -> None:
    assert zs_input.shape == (30, 64)
    assert torch.equal(zs_input, fx["zs.prefill_input_embeds"])


def test_zero_shot_prefill_equals_the_meta_layout(lm: CosyVoice3LM, zs_input) -> None:
    layout = meta("lm_tiny_meta.json")["zs_layout"]
    with torch.inference_mode():
        rows = [
            (lm.embed_speech if table == "speech" else lm.embed_text)(torch.tensor([i]))[0]
            for table, i in layout
        ]
    assert torch.equal(torch.stack(rows), zs_input)


def test_cross_lingual_prefill_and_first_logits(lm: CosyVoice3LM, fx: dict) -> None:
    with torch.inference_mode():
        x = lm.prefill_embeds(fx["in.cross_text"][0])
        assert torch.equal(x, fx["xl.prefill_input_embeds"])
        logits, hidden = lm(x[None])
    assert logits.shape == (1, 281) and hidden.shape == (1, 64)
    assert maxdiff(logits[0], fx["xl.first_logits"]) < 1e-5
    assert int(logits[0, :S].argmax()) == meta("lm_tiny_meta.json")["xl_first_token_speech_only"][0]


# --- decode -----------------------------------------------------------------------------------


def test_greedy_decode_matches_the_reference(lm: CosyVoice3LM, zs_input, fx: dict) -> None:
    min_len, max_len = length_limits(5)
    assert (min_len, max_len) == (10, 100)
    dec = LMDecoder(lm, zs_input, min_len, max_len, GreedySampler(S), "reference_sos_only")
    steps = [dec.step() for _ in range(20)]
    assert all(s is not None and not s.stop for s in steps)
    logits = torch.stack([s.logits for s in steps])
    logp = torch.stack([s.logp for s in steps])
    hidden = torch.stack([s.hidden for s in steps])
    # row 0: one call after the prefill (1e-5); later rows go through the KV cache (1e-4)
    assert maxdiff(logits[0], fx["zs.greedy.logits"][0]) < 1e-5
    assert maxdiff(logp[0], fx["zs.greedy.logp"][0]) < 1e-5
    assert maxdiff(hidden[0], fx["zs.greedy.last_hidden"][0]) < 1e-5
    assert maxdiff(logits, fx["zs.greedy.logits"]) < 1e-4
    assert maxdiff(logp, fx["zs.greedy.logp"]) < 1e-4
    assert maxdiff(hidden, fx["zs.greedy.last_hidden"]) < 1e-4
    assert dec.tokens == fx["zs.greedy.tokens"].tolist()
    assert dec.cache.length == 30 + 19


def test_reference_min_len_quirk_stops_after_two_tokens(
    lm: CosyVoice3LM, zs_input, fx: dict
) -> None:
    lm_meta = meta("lm_tiny_meta.json")
    dec = LMDecoder(lm, zs_input, 10, 100, GreedySampler(), "reference_sos_only")
    steps = []
    while (out := dec.step()) is not None:
        steps.append(out)
    assert [s.token for s in steps] == lm_meta["argmax_all_tokens"] + [
        lm_meta["argmax_all_stop_id"]
    ]
    assert dec.tokens == [56, 68] and dec.done and steps[-1].stop
    logits = torch.stack([s.logits for s in steps])
    assert maxdiff(logits[0], fx["zs.argmax_all.logits"][0]) < 1e-5
    assert maxdiff(logits, fx["zs.argmax_all.logits"]) < 1e-4


def test_mask_all_stop_keeps_going_until_min_len(lm: CosyVoice3LM, zs_input, fx: dict) -> None:
    dec = LMDecoder(lm, zs_input, 10, 100, GreedySampler(), "mask_all_stop")
    tokens = list(dec)
    assert len(tokens) >= 10
    # below min_len every stop id is masked, so plain argmax = the speech-only greedy run
    assert tokens[:10] == fx["zs.greedy.tokens"][:10].tolist()
    assert all(t < S for t in tokens)


def test_max_len_ends_the_segment(lm: CosyVoice3LM, zs_input, fx: dict) -> None:
    dec = LMDecoder(lm, zs_input, 0, 3, GreedySampler(S))
    assert list(dec) == fx["zs.greedy.tokens"][:3].tolist()
    assert dec.step() is None
    assert list(LMDecoder(lm, zs_input, 0, 0, GreedySampler(S))) == []


def test_generate_zero_shot_runs_to_max_len_with_speech_only_greedy(
    lm: CosyVoice3LM, fx: dict
) -> None:
    tokens = generate(
        lm,
        fx["in.text"][0],
        GreedySampler(S),
        fx["in.prompt_text"][0],
        fx["in.prompt_speech_token"][0],
        min_len_rule="reference_sos_only",
    )
    assert len(tokens) == 100
    assert tokens[:20] == fx["zs.greedy.tokens"].tolist()


def test_kv_cache_equals_a_full_recompute(lm: CosyVoice3LM, zs_input, fx: dict) -> None:
    tokens = fx["zs.greedy.tokens"][:6]
    with torch.inference_mode():
        seq = torch.cat([zs_input, lm.embed_speech(tokens)])
        full_logits, _ = lm(seq[None])  # no cache, causal over all 36 positions
        # prefill in two chunks (the second one attends to a non-empty cache with T > 1)
        cache = KVCache()
        lm(seq[None, :20], cache)
        chunk_logits, _ = lm(seq[None, 20:], cache)
        assert cache.length == 36
    assert maxdiff(chunk_logits, full_logits) < 1e-5
    assert maxdiff(full_logits[0], fx["zs.greedy.logits"][6]) < 1e-4


def test_batched_rows_equal_single_rows(lm: CosyVoice3LM, zs_input, fx: dict) -> None:
    with torch.inference_mode():
        other = zs_input.flip(0)
        single = [lm(x[None])[0] for x in (zs_input, other)]
        cache = KVCache()
        batched, _ = lm(torch.stack([zs_input, other]), cache)
        step = lm.embed_speech(torch.tensor([56, 3]))[:, None]
        stepped, _ = lm(step, cache)
    assert maxdiff(batched[0], single[0][0]) < 1e-5
    assert maxdiff(batched[1], single[1][0]) < 1e-5
    assert maxdiff(stepped[0], fx["zs.greedy.logits"][1]) < 1e-4


def test_bfloat16_runs_close_to_float32(zs_input, fx: dict) -> None:
    model = CosyVoice3LM(TINY_LM_CONFIG)
    model.load_state_dict(tensors("lm_tiny_state_dict.safetensors.gz"), strict=True)
    model = model.to(torch.bfloat16).eval()
    with torch.inference_mode():
        logits, hidden = model(zs_input.to(torch.bfloat16)[None])
    assert logits.dtype == hidden.dtype == torch.bfloat16
    assert maxdiff(logits[0].float(), fx["zs.greedy.logits"][0]) < 0.1


def test_length_limits() -> None:
    assert length_limits(5) == (10, 100)
    assert length_limits(0) == (0, 0)
    # prompt + speech must fit the 15,000-frame noise: 7500 − P tokens (spec §11)
    assert length_limits(400, prompt_speech_len=100) == (800, 7400)
    assert length_limits(4000, prompt_speech_len=7000) == (500, 500)


def test_ras_decode_is_deterministic_per_seed_and_respects_min_len(
    lm: CosyVoice3LM, fx: dict
) -> None:
    args = (fx["in.text"][0],)
    kwargs = {
        "prompt_text_ids": fx["in.prompt_text"][0],
        "prompt_speech_tokens": fx["in.prompt_speech_token"][0],
    }
    rng_before = torch.random.get_rng_state()
    a = generate(lm, *args, RasSampler.from_seed(7), **kwargs)
    b = generate(lm, *args, RasSampler.from_seed(7), **kwargs)
    assert torch.equal(rng_before, torch.random.get_rng_state())  # the global RNG is untouched
    assert a == b
    assert 10 <= len(a) <= 100 and all(0 <= t < S for t in a)


# --- sampling on hand-made distributions ------------------------------------------------------


def logs(probs: list[float]):
    return torch.tensor(probs, dtype=torch.float32).log()


def test_min_len_masks() -> None:
    x = torch.zeros(S + 200)
    mask_before_min_len(x, S, "reference_sos_only")
    assert torch.isinf(x[S]) and torch.isfinite(x[S + 1 :]).all() and torch.isfinite(x[:S]).all()
    y = torch.zeros(S + 200)
    mask_before_min_len(y, S, "mask_all_stop")
    assert torch.isinf(y[S:]).all() and torch.isfinite(y[:S]).all()


def test_nucleus_keeps_the_crossing_token() -> None:
    # mass before each sorted token: 0, .5, .7, .85 -> the token that crosses 0.8 (.15) is in
    scores = logs([0.05, 0.2, 0.5, 0.1, 0.15])
    ids, probs = nucleus_candidates(scores)
    assert ids.tolist() == [2, 1, 4]
    assert torch.allclose(probs, torch.tensor([0.5, 0.2, 0.15]))


def test_nucleus_top_k_cap_and_stable_ties() -> None:
    ids, _ = nucleus_candidates(torch.zeros(100))  # uniform: 80 within top_p, capped at 25
    assert ids.tolist() == list(range(25))
    ids, _ = nucleus_candidates(logs([0.9, 0.1]))  # first token already crosses 0.8
    assert ids.tolist() == [0]
    ids, _ = nucleus_candidates(logs([0.3, 0.3, 0.3, 0.1]))  # ties keep id order
    assert ids.tolist() == [0, 1, 2]


def test_ras_samples_the_renormalised_nucleus() -> None:
    sampler = RasSampler.from_seed(0)
    scores = logs([0.05, 0.2, 0.5, 0.1, 0.15])
    counts = {i: 0 for i in range(5)}
    n = 3000
    for _ in range(n):
        counts[sampler(scores, [])] += 1
    assert counts[0] == counts[3] == 0
    for i, p in ((2, 0.5 / 0.85), (1, 0.2 / 0.85), (4, 0.15 / 0.85)):
        assert abs(counts[i] / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_ras_resamples_a_repeated_token_from_the_full_softmax() -> None:
    # the nucleus is {3} alone; id 5 is outside it, reachable only through the full softmax
    probs = [0.0] * 8
    probs[3], probs[5] = 0.99, 0.01
    scores = logs(probs)
    sampler = RasSampler.from_seed(1)
    assert sampler(scores, []) == 3
    assert sampler(scores, [3, 0, 0]) == 5  # 3 seen once in the window -> -inf, resample
    assert sampler(scores, [3] + [0] * 10) == 3  # 11 tokens ago: outside the window of 10
    assert torch.isfinite(scores[3])  # the caller's scores are not modified
    masked = scores.clone()
    masked[5] = float("-inf")  # a masked id stays excluded in the resample
    with pytest.raises(RuntimeError):
        sampler(masked, [3])  # nothing left to sample: torch refuses an all-zero distribution


def test_ras_generators_are_per_request() -> None:
    scores = torch.randn(281, generator=torch.Generator().manual_seed(3))
    alone = RasSampler.from_seed(11)
    seq_alone = [alone(scores, []) for _ in range(20)]
    a, b = RasSampler.from_seed(11), RasSampler.from_seed(11)
    seq_a, seq_b = [], []
    for _ in range(20):  # interleaved requests do not disturb each other
        seq_a.append(a(scores, []))
        seq_b.append(b(scores, []))
    assert seq_a == seq_b == seq_alone
    assert a.generator is not b.generator


def test_ras_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        RasSampler(torch.Generator(), top_p=0.0)
    with pytest.raises(ValueError):
        RasSampler(torch.Generator(), top_k=0)


# --- silent filter ----------------------------------------------------------------------------


def test_silent_filter_matches_the_reference_loop() -> None:
    script = meta("token2wav_tiny_meta.json")["script_tokens"]
    expected = tensors("token2wav_tiny_fixtures.safetensors")["stream.tokens_after_filter"]
    kept = SilentTokenFilter().filter(script)
    assert len(script) == 40 and len(kept) == 37
    assert kept == expected.tolist()


def test_silent_filter_resets_on_speech() -> None:
    f = SilentTokenFilter()
    assert [f.accept(t) for t in [1] * 7] == [True] * 5 + [False] * 2
    assert f.accept(40)
    assert [f.accept(t) for t in [2, 28, 29, 55, 248, 494]] == [True] * 5 + [False]


def test_a_meta_built_lm_loaded_with_assign_runs_after_its_rope_table_is_made(
    lm: CosyVoice3LM, zs_input
) -> None:
    """The real-checkpoint path (spec §3: build on meta, load with assign): the RoPE table is
    in no checkpoint, so the loader refuses to leave it on meta unless the caller makes it
    (`ROPE_BUFFERS`, `materialize_buffers`); then the logits equal the normally built model's."""
    from voxflow.models.cosyvoice3 import loader
    from voxflow.models.cosyvoice3.lm import ROPE_BUFFERS

    state = tensors("lm_tiny_state_dict.safetensors.gz")
    with torch.device("meta"):
        refused = CosyVoice3LM(TINY_LM_CONFIG)
    with pytest.raises(loader.StateDictError, match="rotary_emb.inv_freq"):
        loader.load_strict(refused, state, assign=True)
    with torch.device("meta"):
        built = CosyVoice3LM(TINY_LM_CONFIG)
    loader.load_strict(built, state, assign=True, set_later=ROPE_BUFFERS)
    built.materialize_buffers("cpu")
    assert all(t.device.type == "cpu" for t in [*built.parameters(), *built.buffers()])
    with torch.inference_mode():
        want, _ = lm(zs_input[None])
        got, _ = built.eval()(zs_input[None])
    assert torch.equal(got, want)
