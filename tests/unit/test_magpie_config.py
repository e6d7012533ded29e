"""MagpieTTS configuration: every size read from the checkpoint cfg and state dict (spec §7.1),
special ids derived from ``codebook_size`` (s2's 56 catches a hard-coded 2016), NeMo's
inference defaults and legacy field names, and one clear `ValueError` per bad field."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import (  # noqa: E402
    config,
    header,
    one_torch_thread,  # noqa: F401 (autouse)
    state_dict,
)

from voxflow.models.magpie.config import (  # noqa: E402
    InferenceConfig,
    MagpieConfig,
    TransformerConfig,
    checkpoint_sizes,
)


def from_cfg(cfg: dict[str, Any], tag: str = "s1") -> MagpieConfig:
    doc = header(tag)
    return MagpieConfig.from_nemo(cfg, num_codebooks=doc["num_audio_codebooks"],
                                  codebook_size=doc["codebook_size"],
                                  **checkpoint_sizes(state_dict(tag)))


@pytest.mark.parametrize("tag", ["s1", "s2"])
def test_sizes_and_special_ids_follow_the_header(tag: str) -> None:
    cfg, doc = config(tag), header(tag)
    assert cfg.frame_stacking == doc["frame_stacking_factor"]
    assert cfg.tokens_per_codebook == doc["num_all_tokens_per_codebook"]
    assert (cfg.audio_bos, cfg.audio_eos) == (doc["audio_bos_id"], doc["audio_eos_id"])
    assert (cfg.text_bos, cfg.text_eos) == (doc["text_bos_id"], doc["text_eos_id"])
    assert (cfg.baked_speakers, cfg.baked_frames) == (doc["n_baked_speakers"], doc["baked_T"])
    assert cfg.lt_hidden == doc["local_transformer_hidden_dim"]
    lt = cfg.local_transformer
    assert lt.d_ffn == 4 * cfg.lt_hidden and not lt.apply_norm_out
    assert lt.max_length_causal_mask == cfg.slots + 2  # 10 (s1) / 18 (s2)
    assert cfg.decoder.xa_d_head == 16 and cfg.decoder.xa_n_heads == 1
    assert cfg.inference.apply_prior_to_layers == (1,)
    assert cfg.inference.estimate_alignment_from_layers == (0, 1)
    assert cfg.inference.temperature == 0.6 and cfg.inference.topk == 1


def test_nemo_inference_defaults_and_legacy_names() -> None:
    defaults = InferenceConfig()
    assert (defaults.temperature, defaults.topk, defaults.cfg_scale) == (0.7, 80, 2.5)
    assert defaults.attention_prior_lookahead_window == 5
    assert defaults.max_decoder_steps == 500 and defaults.min_generated_frames == 4
    legacy = InferenceConfig.from_dict({"prior_epsilon": 0.2, "lookahead_window_size": 6,
                                        "some_future_field": 1})
    assert legacy.attention_prior_epsilon == 0.2
    assert legacy.attention_prior_lookahead_window == 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(model_type="decoder_context_tts"), "model_type"),
        (lambda c: c.update(local_transformer_type="maskgit"), "autoregressive"),
        (lambda c: c.update(use_text_conditioning_encoder=True), "baked context only"),
        (lambda c: c["decoder"].update(sa_n_heads=3), "does not divide d_model"),
        (lambda c: c["encoder"].update(d_model=64), "differ from embedding_dim"),
        (lambda c: c["decoder"].update(rotary=True),
         r"unknown transformer field\(s\) \['rotary'\]"),
        (lambda c: c["decoder"].update(use_moe=True), "use_moe"),
        (lambda c: c["decoder"].pop("d_ffn"), "missing field 'd_ffn'"),
        (lambda c: c["inference_parameters"].update(apply_prior_to_layers=[2]),
         r"apply_prior_to_layers \[2\] outside"),
        (lambda c: c["inference_parameters"].update(eos_detection_method="first"),
         "eos_detection_method"),
        (lambda c: c["inference_parameters"].update(ignore_finished_sentence_tracking=False),
         "not supported"),
        (lambda c: c.update(local_transformer_n_heads=3), "does not divide"),
    ],
)
def test_bad_cfg_fields_are_named(change: Any, message: str) -> None:
    cfg = copy.deepcopy(header("s1")["cfg"])
    change(cfg)
    with pytest.raises(ValueError, match=message):
        from_cfg(cfg)


def test_context_must_leave_decoder_positions() -> None:
    cfg = config("s1")
    with pytest.raises(ValueError, match="leaves no decoder positions"):
        replace(cfg, baked_frames=64)
    with pytest.raises(ValueError, match="needs xa_n_heads"):
        TransformerConfig(n_layers=1, d_model=8, d_ffn=16, sa_n_heads=2, kernel_size=1,
                          has_xattn=True)


def test_checkpoint_sizes_need_the_keys() -> None:
    state = dict(state_dict("s1"))
    assert checkpoint_sizes(state) == {"text_vocab_size": 20, "baked_speakers": 2,
                                       "baked_frames": 5}
    del state["_baked_embedding_T"]
    with pytest.raises(ValueError, match="_baked_embedding_T"):
        checkpoint_sizes(state)
