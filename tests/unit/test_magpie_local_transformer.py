"""The MagpieTTS local transformer (LT) against NeMo on one step (s1: biased in-projection
32 → 16, 1 layer; s2: identity in-projection, 2 layers × 2 heads, 16 slots): every head's raw
logits with the LT KV cache, the greedy CFG codes, and NeMo's teacher-forced (training) path."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import (  # noqa: E402
    LOGIT_ATOL,
    TAGS,
    io,
    max_diff,
    model,
    one_torch_thread,  # noqa: F401 (autouse)
)

from voxflow.models.magpie.local_transformer import (  # noqa: E402
    sample_codes,
    teacher_forced_logits,
)
from voxflow.models.magpie.sampling import Chooser  # noqa: E402


@pytest.mark.parametrize("tag", TAGS)
def test_lt_step_logits_and_greedy_codes(tag: str) -> None:
    m, x = model(tag), io(tag)
    step = sample_codes(m, x["cfg_decoder_out_last"], use_cfg=True, cfg_scale=2.5,
                        forbid_eos=True, chooser=Chooser(greedy=True), keep_logits=True)
    assert step.raw_logits is not None
    assert step.raw_logits.shape == x["lt_step_logits_raw"].shape  # (2, C·S, V)
    assert max_diff(step.raw_logits, x["lt_step_logits_raw"]) < LOGIT_ATOL
    assert step.codes.shape == x["lt_step_codes_greedy"].shape  # (1, C, S)
    assert torch.equal(step.codes, x["lt_step_codes_greedy"])


@pytest.mark.parametrize("tag", TAGS)
def test_lt_teacher_forced_matches_nemo_and_the_cached_path(tag: str) -> None:
    m, x = model(tag), io(tag)
    hidden = x["cfg_decoder_out_last"][:1]
    logits = teacher_forced_logits(m, hidden, x["lt_step_codes_greedy"])
    want = x["lt_teacher_forced_logits"].reshape(1, -1)
    assert max_diff(logits, want) < LOGIT_ATOL
    # no cache (one pass) vs the cached slot-by-slot pass, cond row: the same function
    cached = x["lt_step_logits_raw"][:1].reshape(1, -1)
    assert max_diff(logits, cached) < LOGIT_ATOL


def test_greedy_lt_never_emits_forbidden_specials() -> None:
    m = model("s2")
    cfg = m.config
    torch.manual_seed(0)
    hidden = torch.randn(6, cfg.d_model) * 3
    codes = sample_codes(m, hidden, use_cfg=True, cfg_scale=2.5, forbid_eos=True,
                         chooser=Chooser(greedy=True)).codes
    assert int(codes.max()) < cfg.codebook_size  # EOS forbidden: audio ids only
    sampled = sample_codes(m, hidden, use_cfg=False, cfg_scale=1.0, forbid_eos=False,
                           chooser=Chooser(greedy=False, topk=80, temperature=5.0,
                                           generator=torch.Generator().manual_seed(3))).codes
    allowed = set(range(cfg.codebook_size)) | {cfg.audio_eos}
    assert set(sampled.flatten().tolist()) <= allowed
