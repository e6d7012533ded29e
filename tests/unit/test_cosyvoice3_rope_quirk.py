"""The DiT's RoPE quirk (spec §6): x-transformers rotates the first dim_head channels of q and k
*before* the head split, so only head 0 is rotated. Parity with the reference depends on it; the
mutation "every head rotated" misses the estimator fixture by ~1e-2 against the 1e-5 tolerance."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import tensors  # noqa: E402

from voxflow.models.cosyvoice3 import dit  # noqa: E402
from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig  # noqa: E402


def _estimator_error(fx: dict[str, Any]) -> float:
    model = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    model.load_state_dict(tensors("flow_tiny_state_dict.safetensors"), strict=True)
    i = {k: fx[f"b.in.{k}"] for k in ("x", "mask", "mu", "t", "spks", "cond")}
    with torch.no_grad():
        out = model.eval().decoder.estimator(i["x"], i["mask"], i["mu"], i["t"], i["spks"],
                                             i["cond"], streaming=False)
    return float((out.double() - fx["b.out_nonstream"].double()).abs().max())


def _rotary_on_every_head(x: Any, freqs: Any) -> Any:
    rot = freqs.shape[-1]
    heads = x.float().unflatten(-1, (-1, rot))  # [B, T, H, dim_head]
    f = freqs.unsqueeze(-2)
    turned = heads * f.cos() + dit.rotate_pairs(heads) * f.sin()
    return turned.flatten(-2).to(x.dtype)


def test_rope_rotates_head_0_only_and_passes_the_other_heads_unchanged() -> None:
    x = torch.randn(2, 7, 32)
    freqs = torch.rand(7, 8) * 3
    out = dit.apply_rotary(x, freqs)
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert not torch.allclose(out[..., :8], x[..., :8])


def test_rope_on_every_head_misses_the_reference_estimator(monkeypatch) -> None:
    fx = tensors("flow_tiny_fixtures.safetensors")
    assert _estimator_error(fx) < 1e-5
    monkeypatch.setattr(dit, "apply_rotary", _rotary_on_every_head)
    assert _estimator_error(fx) > 1e-3
