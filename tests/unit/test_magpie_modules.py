"""MagpieTTS modules against NeMo's outputs on the tiny fixtures (s1 and s2): text encoder per
layer, baked context, audio embedding with frame stacking, teacher-forced decoder with and
without the attention prior (hidden states, cross-attention, ``final_proj``), the prior itself,
CFG, and the float64 forward. Tolerances: the fixtures' README."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import (  # noqa: E402
    FP64_ATOL,
    HIDDEN_ATOL,
    LOGIT_ATOL,
    TAGS,
    io,
    max_diff,
    model,
    one_torch_thread,  # noqa: F401 (autouse)
)

from voxflow.models.magpie.prior import PriorTracker  # noqa: E402
from voxflow.models.magpie.sampling import cfg_combine  # noqa: E402


@pytest.fixture(scope="module", params=TAGS)
def tag(request: Any) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def tiny(tag: str) -> Any:
    return model(tag)


def teacher_forced(m: Any, x: dict[str, Any], prior: Any = None) -> Any:
    """The decoder on ``tf_decoder_input`` (B = 1) over ``tf_cond`` (text item 1, 7 tokens);
    ``prior`` (1, 1, 7) applied to the listed layers (the fixture: layer 1 only)."""
    memory = x["tf_cond"].to(m.dtype)
    mem_mask = torch.ones(memory.shape[:2], dtype=torch.bool)
    priors = None
    if prior is not None:
        layers = m.config.inference.apply_prior_to_layers
        priors = [prior if i in layers else None for i in range(m.config.decoder.n_layers)]
    return m.decode(x["tf_decoder_input"].to(m.dtype), x["tf_decoder_mask"].bool(), memory,
                    mem_mask, priors)


def test_text_encoder_layers_and_padding(tag: str, tiny: Any) -> None:
    x = io(tag)
    assert max_diff(tiny.text_embedding(x["text"]), x["text_embedded"]) == 0.0
    memory, mask, out = tiny.encode_text_layers(x["text"], x["text_lens"])
    assert torch.equal(mask, x["text_mask"].bool())
    for i in range(2):
        assert max_diff(out.layer_outputs[i], x[f"encoder_layer{i}_out"]) < HIDDEN_ATOL
    assert max_diff(memory, x["encoder_out"]) < HIDDEN_ATOL
    # item 1 is padded after 7 tokens: NeMo's padded rows are exactly 0, so are ours
    assert float(memory[1, 7:].abs().max()) == 0.0
    assert float(x["encoder_out"][1, 7:].abs().max()) == 0.0


def test_baked_context_and_audio_embedding(tag: str, tiny: Any) -> None:
    x = io(tag)
    context, mask = tiny.speaker_context(x["context_speakers"])
    assert max_diff(context, x["context_embedding"]) == 0.0
    assert torch.equal(mask, x["context_mask"].bool())
    embedded = tiny.embed_audio(x["tf_codes"])
    assert embedded.shape == x["tf_audio_embedded"].shape  # 8 frames → 8 / S positions
    assert max_diff(embedded, x["tf_audio_embedded"]) == 0.0
    rows = torch.cat([context[1:2], embedded], dim=1)
    assert max_diff(rows, x["tf_decoder_input"]) == 0.0


def test_teacher_forced_decoder_without_prior(tag: str, tiny: Any) -> None:
    x = io(tag)
    out = teacher_forced(tiny, x)
    for i in range(2):
        assert max_diff(out.layer_outputs[i], x[f"tf_decoder_layer{i}_out"]) < HIDDEN_ATOL
        # every query row, the 5 context rows included
        assert max_diff(out.xattn_probs[i], x[f"tf_xattn_probs_layer{i}"]) < HIDDEN_ATOL
    assert max_diff(out.output, x["tf_decoder_out"]) < HIDDEN_ATOL
    logits = tiny.logits(out.output[0, x["tf_logit_positions"]])
    assert max_diff(logits, x["tf_logits_at_positions"]) < LOGIT_ATOL


def test_teacher_forced_decoder_with_prior(tag: str, tiny: Any) -> None:
    x = io(tag)
    out = teacher_forced(tiny, x, x["prior"])
    assert max_diff(out.output, x["tfp_decoder_out"]) < HIDDEN_ATOL
    for i in range(2):
        assert max_diff(out.xattn_probs[i], x[f"tfp_xattn_probs_layer{i}"]) < HIDDEN_ATOL
    assert max_diff(tiny.logits(out.output[:, -1]), x["tfp_logits_last"]) < LOGIT_ATOL
    # the prior changes layer 1 only: layer 0's probabilities are the prior-off ones
    assert max_diff(out.xattn_probs[0], x["tf_xattn_probs_layer0"]) < HIDDEN_ATOL
    assert max_diff(out.xattn_probs[1], x["tf_xattn_probs_layer1"]) > 1e-3


def test_prior_construction_is_exact(tag: str) -> None:
    x = io(tag)
    tracker = PriorTracker([7], window=5, epsilon=0.1)
    attended = int(x["prior_attended_position"][0])
    tracker.counts[0][attended] = 1
    assert torch.equal(tracker.prior([attended], 1, 7), x["prior"])
    assert x["prior"][0, 0].tolist() == pytest.approx([0.1, 0.1, 1, 1, 1, 1, 1])
    sink = PriorTracker([7], window=5, epsilon=0.1)
    sink.counts[0] = {2: 10, 4: 1}
    assert torch.equal(sink.prior([4], 1, 7), x["prior_sink_example"])


def test_prior_tracker_window_and_sinks() -> None:
    tracker = PriorTracker([12], window=5, epsilon=0.1)
    scores = torch.zeros(2, 12)
    scores[0, 4] = 1.0
    scores[0, 11] = 5.0  # outside the window [1, min(6, 9)): ignored
    assert tracker.advance(scores) == [4]
    tracker.counts[0][4] = 8  # a sink: the next window starts at 5
    scores[0, 4] = 9.0
    scores[0, 6] = 2.0
    assert tracker.advance(scores) == [6]
    short = PriorTracker([4], window=5, epsilon=0.1)
    assert short.advance(torch.rand(1, 4)) == [3]  # empty window: the text end
    assert torch.equal(short.prior([3], 2, 6)[0], torch.ones(1, 6))  # len ≤ 5: uniform
    assert torch.equal(short.prior([3], 2, 6)[1], torch.full((1, 6), 0.1))  # uncond row


def test_cfg_rows_and_combination(tag: str, tiny: Any) -> None:
    x = io(tag)
    memory = x["tf_cond"]
    cond_mask = x["cfg_cond_mask"].bool()
    assert cond_mask[1].tolist() == [True] + [False] * 6
    inputs = x["tf_decoder_input"].repeat(2, 1, 1)
    inputs[1, :5] = 0.0  # the unconditional row's context is zeroed
    out = tiny.decode(inputs, x["cfg_decoder_mask"].bool(),
                      torch.cat([memory, torch.zeros_like(memory)]), cond_mask)
    hidden = out.output[:, -1]
    assert max_diff(hidden, x["cfg_decoder_out_last"]) < HIDDEN_ATOL
    logits = tiny.logits(hidden)
    assert max_diff(logits[:1], x["cfg_logits_cond_last"]) < LOGIT_ATOL
    assert max_diff(logits[1:], x["cfg_logits_uncond_last"]) < LOGIT_ATOL
    combined = cfg_combine(logits[:1], logits[1:], 2.5)
    assert max_diff(combined, x["cfg_logits_combined_last"]) < LOGIT_ATOL


def test_float64_forward(tag: str) -> None:
    """Every input rebuilt in float64 from the ids (the fp64 NeMo model embedded them itself)."""
    m = model(tag, torch.float64)
    x = io(tag)
    memory, _ = m.encode_text(x["text"], x["text_lens"])
    assert max_diff(memory, x["encoder_out_fp64"]) < FP64_ATOL
    context, _ = m.speaker_context(torch.tensor([1]))
    x64 = dict(x, tf_cond=memory[1:2, :7],
               tf_decoder_input=torch.cat([context, m.embed_audio(x["tf_codes"])], dim=1))
    out = teacher_forced(m, x64)
    assert max_diff(out.output, x["tf_decoder_out_fp64"]) < FP64_ATOL
    assert max_diff(m.logits(out.output[:, -1]), x["tf_logits_last_fp64"]) < FP64_ATOL
    prior_out = teacher_forced(m, x64, x["prior"])
    assert max_diff(prior_out.output, x["tfp_decoder_out_fp64"]) < FP64_ATOL


def test_float64_cfg_rows(tag: str) -> None:
    m = model(tag, torch.float64)
    x = io(tag)
    memory, _ = m.encode_text(x["text"], x["text_lens"])
    memory = memory[1:2, :7]
    context, _ = m.speaker_context(torch.tensor([1]))
    rows = torch.cat([context, m.embed_audio(x["tf_codes"])], dim=1).repeat(2, 1, 1)
    rows[1, :5] = 0.0
    out = m.decode(rows, x["cfg_decoder_mask"].bool(),
                   torch.cat([memory, torch.zeros_like(memory)]), x["cfg_cond_mask"].bool())
    hidden = out.output[:, -1]
    assert max_diff(hidden, x["cfg_decoder_out_last_fp64"]) < FP64_ATOL
    logits = m.logits(hidden)
    combined = cfg_combine(logits[:1], logits[1:], 2.5)
    assert max_diff(combined, x["cfg_logits_combined_last_fp64"]) < FP64_ATOL


def test_bad_inputs_raise_before_any_compute(tag: str, tiny: Any) -> None:
    """Spec §9: unknown speakers, ids outside the tables and malformed code shapes."""
    cfg = tiny.config
    with pytest.raises(ValueError, match=r"speaker index \[2\] outside \[0, 2\)"):
        tiny.speaker_context(torch.tensor([2]))
    with pytest.raises(ValueError, match="text ids must lie in"):
        tiny.encode_text(torch.tensor([[3, cfg.text_vocab_size]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="code ids must lie in"):
        tiny.embed_audio(torch.full((1, 8, cfg.frame_stacking), cfg.tokens_per_codebook))
    with pytest.raises(ValueError, match="codes must be"):
        tiny.embed_audio(torch.zeros(1, 7, cfg.frame_stacking, dtype=torch.long))
