"""The MagpieTTS decode loop against NeMo's ``infer_batch`` greedy decodes (5 per model, s1 and
s2: CFG on / off, prior on / off, min frames 4 / 0, cap 16 / 5), with and without the decoder
KV cache: returned codes and lengths, every step's LT codes and masked argmax codes (exact),
the last hidden state (atol 2e-5), the raw argmax and EOS logits of the CFG logits; then the
rules NeMo leaves implicit (reruns, seeded sampling, EOS and specials, CFG scale 1)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import (  # noqa: E402
    DECODES,
    HIDDEN_ATOL,
    LOGIT_ATOL,
    TAGS,
    header,
    io,
    max_diff,
    model,
    one_torch_thread,  # noqa: F401 (autouse)
)

from voxflow.models.magpie.generate import DecodeOptions, DecodeResult, generate  # noqa: E402


def fixture_options(m: Any, name: str, **changes: Any) -> DecodeOptions:
    """The settings of decode ``name`` (README "Greedy decodes")."""
    params = m.config.inference
    if "noprior" in name:
        params = replace(params, apply_attention_prior=False)
    if "min0" in name:
        params = replace(params, min_generated_frames=0)
    if "cap5" in name:
        params = replace(params, max_decoder_steps=5)
    options = DecodeOptions(params=params, use_cfg="nocfg" not in name)
    return replace(options, **changes)


def run(tag: str, name: str, **changes: Any) -> DecodeResult:
    """Decode text item 1 with speaker 1, as the fixtures did."""
    m, x = model(tag), io(tag)
    n = int(x["text_lens"][1])
    return generate(m, x["text"][1:2, :n], x["text_lens"][1:2], torch.tensor([1]),
                    fixture_options(m, name, **changes))


@pytest.mark.parametrize("kv_cache", [False, True], ids=["recompute", "kv_cache"])
@pytest.mark.parametrize("name", DECODES)
@pytest.mark.parametrize("tag", TAGS)
def test_greedy_decode_matches_nemo(tag: str, name: str, kv_cache: bool) -> None:
    x, key = io(tag), f"dec_{name}"
    result = run(tag, name, kv_cache=kv_cache, trace=True)
    assert result.steps == header(tag)["decodes"][name]["steps"]
    # s2 cap5: NeMo reports 5 frames but returns 4 (the cap is not a multiple of S)
    assert result.item_codes(0).shape[-1] == min(int(result.lengths[0]), result.codes.shape[-1])
    assert result.codes.shape == x[f"{key}_codes"].shape
    assert torch.equal(result.codes, x[f"{key}_codes"])
    assert torch.equal(result.lengths, x[f"{key}_codes_len"])
    lt = torch.stack([s.lt_codes for s in result.trace])
    assert torch.equal(lt, x[f"{key}_step_lt_codes"])
    argmax = torch.stack([s.argmax_codes for s in result.trace])
    assert torch.equal(argmax, x[f"{key}_step_argmax_codes"])
    hidden = torch.stack([s.hidden_last for s in result.trace])
    assert max_diff(hidden, x[f"{key}_step_hidden_last"]) < HIDDEN_ATOL
    s, c, v = model(tag).config.frame_stacking, 8, model(tag).config.tokens_per_codebook
    logits = torch.stack([t.logits for t in result.trace]).view(result.steps, s, c, v)
    assert torch.equal(logits.argmax(-1), x[f"{key}_step_fp_argmax"])
    eos = logits[..., model(tag).config.audio_eos]
    assert max_diff(eos, x[f"{key}_step_fp_eos_logit"]) < LOGIT_ATOL


@pytest.mark.parametrize("tag", TAGS)
def test_greedy_reruns_are_bit_identical(tag: str) -> None:
    first = run(tag, "greedy_cfg_noprior_min4", trace=True)
    second = run(tag, "greedy_cfg_noprior_min4", trace=True)
    assert torch.equal(first.codes, second.codes)
    for a, b in zip(first.trace, second.trace, strict=True):
        assert torch.equal(a.hidden_last, b.hidden_last)
        assert torch.equal(a.logits, b.logits)


@pytest.mark.parametrize("tag", TAGS)
def test_seeded_sampling_repeats_per_seed(tag: str) -> None:
    m = model(tag)
    params = replace(m.config.inference, topk=80, temperature=1.0)

    def sample(seed: int) -> DecodeResult:
        x = io(tag)
        return generate(m, x["text"][:1], x["text_lens"][:1], torch.tensor([0]),
                        DecodeOptions(params=params, greedy=False, seed=seed))

    a, b, other = sample(7), sample(7), sample(8)
    assert torch.equal(a.codes, b.codes) and torch.equal(a.lengths, b.lengths)
    assert not torch.equal(a.codes[:, :, :4], other.codes[:, :, :4])


@pytest.mark.parametrize("tag", TAGS)
def test_no_eos_before_min_frames_and_no_specials_kept(tag: str) -> None:
    """Over seeds and both texts: an item never ends before ``min_generated_frames``; the
    frames before its end hold audio ids only (EOS and the other specials never reach the
    codec)."""
    m, x = model(tag), io(tag)
    cfg = m.config
    for min_frames in (4, 6):
        params = replace(cfg.inference, topk=80, temperature=1.5, min_generated_frames=min_frames)
        for seed in range(3):
            result = generate(m, x["text"], x["text_lens"], torch.tensor([0, 1]),
                              DecodeOptions(params=params, greedy=False, seed=seed))
            for item in range(2):
                assert int(result.lengths[item]) >= min_frames
                kept = result.item_codes(item)
                assert kept.shape[-1] == min(int(result.lengths[item]), result.codes.shape[-1])
                assert int(kept.max()) < cfg.codebook_size


@pytest.mark.parametrize("tag", TAGS)
def test_cfg_scale_one_equals_the_conditional_run(tag: str) -> None:
    m = model(tag)
    params = replace(m.config.inference, cfg_scale=1.0, min_generated_frames=8)
    with_cfg = run(tag, "greedy_cfg_prior_min4", params=params)
    without = run(tag, "greedy_nocfg_prior_min4", params=params)
    assert torch.equal(with_cfg.codes, without.codes)
    assert torch.equal(with_cfg.lengths, without.lengths)


def test_batch_of_two_matches_each_alone() -> None:
    """Items decode independently in a padded batch (text 0 has 10 tokens, text 1 has 7)."""
    m, x = model("s1"), io("s1")
    params = replace(m.config.inference, max_decoder_steps=12)
    both = generate(m, x["text"], x["text_lens"], torch.tensor([0, 1]),
                    DecodeOptions(params=params))
    for item in range(2):
        n = int(x["text_lens"][item])
        alone = generate(m, x["text"][item:item + 1, :n], x["text_lens"][item:item + 1],
                         torch.tensor([item]), DecodeOptions(params=params))
        length = int(alone.lengths[0])
        assert int(both.lengths[item]) == length
        assert torch.equal(both.codes[item, :, :length], alone.codes[0, :, :length])


def test_frame_cap_below_one_step_is_refused() -> None:
    m, x = model("s2"), io("s2")
    params = replace(m.config.inference, max_decoder_steps=1)
    with pytest.raises(ValueError, match="below one decoder step"):
        generate(m, x["text"][:1], x["text_lens"][:1], torch.tensor([0]),
                 DecodeOptions(params=params))


@pytest.mark.parametrize("tag", TAGS)
def test_without_the_local_transformer_greedy_keeps_the_argmax_codes(tag: str) -> None:
    """NeMo's parallel path (no LT): greedy, the kept codes are the masked argmax codes, and
    the decoder hidden states of the first step equal the LT run's (same inputs)."""
    result = run(tag, "greedy_cfg_prior_min4", use_local_transformer=False, trace=True)
    for step in result.trace:
        assert torch.equal(step.lt_codes, step.argmax_codes)
    with_lt = run(tag, "greedy_cfg_prior_min4", trace=True)
    assert torch.equal(result.trace[0].hidden_last, with_lt.trace[0].hidden_last)
    again = run(tag, "greedy_cfg_prior_min4", use_local_transformer=False)
    assert torch.equal(result.codes, again.codes)
