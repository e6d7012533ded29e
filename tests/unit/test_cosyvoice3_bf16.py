"""`estimator_dtype: bfloat16` (spec §9.3, §10), tiny fixture weights on CPU.

The DiT estimator's Linear/Conv1d weights and activations are bfloat16, its LayerNorms and
attention softmax float32; the Euler state stays float32. Error bounds come from bfloat16's
8-bit significand: unit roundoff u = 2^-8 (a rounded value is within u of the exact one,
relatively). One estimator call rounds its inputs, every weight and each layer's output, so its
error is a few u relative to the output's scale; measured on these fixtures (torch 2.13, CPU):
max |bf16 - fp32| / max |fp32| = 1.7u and rms relative 1.4u for one call (max abs 0.0133), and
for a 10-step mel max abs 0.011 (0.6u of its 4.7 peak), rms relative 0.6u. The bounds below
(4u of the peak, 3u rms) leave about 2x margin; the floor (1e-3, a hundred times the spec's
float32 one-call tolerance) proves bfloat16 actually ran.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import one_torch_thread, tensors, tiny_flow, tiny_prompt  # noqa: E402, F401
from torch.overrides import TorchFunctionMode  # noqa: E402

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT  # noqa: E402
from voxflow.models.cosyvoice3.flow_bucket import FlowBucketRunner, FlowSolve  # noqa: E402

U = 2.0 ** -8  # bfloat16 unit roundoff (8 significant bits)
PEAK_BOUND = 4 * U  # max abs error / max |fp32 output|
RMS_BOUND = 3 * U  # rms error / rms fp32 output
FLOOR = 1e-3  # bf16 must move the output by more than this (float32 reorderings: ~1e-6)
SOLVE = 1e-4  # spec §1 item 7: padding must not move a row's mel beyond the flow tolerance
LADDER = (20, 30, 40, 60, 80)
DIT_INPUTS = ("x", "mask", "mu", "t", "spks", "cond")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def fx() -> dict[str, Any]:
    return tensors("flow_tiny_fixtures.safetensors")


@pytest.fixture(scope="module")
def flows() -> tuple[CausalMaskedDiffWithDiT, CausalMaskedDiffWithDiT]:
    fp32 = tiny_flow()
    bf16 = copy.deepcopy(fp32)
    bf16.decoder.estimator.set_compute_dtype(torch.bfloat16)
    return fp32, bf16


def errors(out: Any, ref: Any) -> tuple[float, float, float]:
    """(max abs error, max abs / max |ref|, rms error / rms ref), in float64."""
    diff = (out.double() - ref.double()).abs()
    ref = ref.double()
    peak = float(diff.max())
    return peak, peak / float(ref.abs().max()), float(diff.pow(2).mean().sqrt()
                                                    / ref.pow(2).mean().sqrt())


def run_dit(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], prefix: str,
            streaming: bool) -> Any:
    i = {k: fx[f"{prefix}in.{k}"] for k in DIT_INPUTS}
    with torch.inference_mode():
        return flow.decoder.estimator(i["x"], i["mask"], i["mu"], i["t"], i["spks"], i["cond"],
                                      streaming=streaming)


def mel(flow: CausalMaskedDiffWithDiT, tokens: Any, streaming: bool) -> Any:
    p = tiny_prompt()
    return flow.inference(tokens, p.prompt_token, p.prompt_feat, p.embedding,
                          streaming=streaming, finalize=not streaming)


@pytest.mark.parametrize("prefix", ["b.", "b.pad."])
@pytest.mark.parametrize("streaming", [False, True])
def test_bf16_estimator_is_close_to_fp32_but_not_equal(flows, fx, prefix, streaming):
    fp32, bf16 = flows
    ref, out = run_dit(fp32, fx, prefix, streaming), run_dit(bf16, fx, prefix, streaming)
    assert out.dtype == torch.float32 and out.shape == ref.shape == (2, 80, 37)
    peak, rel, rms = errors(out, ref)
    assert FLOOR < peak and rel < PEAK_BOUND and rms < RMS_BOUND, (peak, rel, rms)


@pytest.mark.parametrize("streaming", [False, True])
def test_bf16_ten_step_mel_is_close_to_fp32_and_repeats_exactly(flows, fx, streaming):
    fp32, bf16 = flows
    ref = mel(fp32, fx["in.token"], streaming)
    first, again = mel(bf16, fx["in.token"], streaming), mel(bf16, fx["in.token"], streaming)
    assert torch.equal(first, again)  # deterministic: fixed noise, no sampling
    peak, rel, rms = errors(first, ref)
    assert FLOOR < peak and rel < PEAK_BOUND and rms < RMS_BOUND, (peak, rel, rms)


def test_only_the_estimators_linear_and_conv_weights_are_cast(flows):
    fp32, bf16 = flows
    est = bf16.decoder.estimator
    cast = {n for n, m in est.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d))}
    assert len(cast) == 2 + 3 + 2 * 7 + 2  # time MLP, input proj + 2 convs, 2 blocks, output
    for name, p in est.named_parameters():
        assert p.dtype == torch.bfloat16, name
        assert name.rsplit(".", 1)[0] in cast, name
    assert est.rotary_embed.inv_freq.dtype == torch.float32  # RoPE stays float32
    assert est.compute_dtype == torch.bfloat16 and fp32.decoder.estimator.compute_dtype == (
        torch.float32)
    rest = [p for n, p in bf16.named_parameters() if not n.startswith("decoder.estimator.")]
    assert rest and all(p.dtype == torch.float32 for p in rest)  # embedding, speaker, lookahead
    assert list(bf16.state_dict()) == list(fp32.state_dict())  # same keys: still loadable
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        copy.deepcopy(est).set_compute_dtype(torch.float16)


class Calls(TorchFunctionMode):
    """Records each call's name and the dtypes of its tensor arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[Any]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        dtypes = [a.dtype for a in args if isinstance(a, torch.Tensor)]
        self.calls.append((getattr(func, "__name__", str(func)), dtypes))
        return func(*args, **(kwargs or {}))

    def of(self, name: str) -> list[list[Any]]:
        return [d for n, d in self.calls if n == name]


def test_norms_and_softmax_compute_in_fp32_and_matmuls_in_bf16(flows, fx):
    _, bf16 = flows
    with Calls() as calls:
        run_dit(bf16, fx, "b.", streaming=True)
    norms, softmax = calls.of("layer_norm"), calls.of("softmax")
    assert len(norms) == 2 * 2 + 1 and len(softmax) == 2  # 2 blocks x (attn, ff) + output
    assert all(d == [torch.float32] for d in norms + softmax)
    assert not calls.of("scaled_dot_product_attention")  # the explicit fp32-softmax path
    linear, conv = calls.of("linear"), calls.of("conv1d")
    assert len(linear) == 2 + 1 + 2 * 7 + 2 and len(conv) == 2
    assert all(set(d) == {torch.bfloat16} for d in linear + conv)
    matmul = calls.of("matmul")  # q·kᵀ and probs·v per block
    assert len(matmul) == 4 and all(set(d) == {torch.bfloat16} for d in matmul)


def test_the_euler_state_and_velocity_stay_fp32(flows, fx):
    _, bf16 = flows
    seen: list[tuple[Any, Any]] = []
    c = {k: fx[f"c.nonstream.in.{k}"] for k in ("mu", "mask", "spks", "cond")}
    with torch.inference_mode():
        out = bf16.decoder(c["mu"], c["mask"], c["spks"], c["cond"],
                           on_step=lambda step, t, x, v: seen.append((x.dtype, v.dtype)))
    assert out.dtype == torch.float32
    assert seen == [(torch.float32, torch.float32)] * 10


def _runner(flow: CausalMaskedDiffWithDiT) -> FlowBucketRunner:
    return FlowBucketRunner(flow, LADDER, (1, 2, 3, 4, 6, 8), 8, 8192, True, "cpu")


def _solve(flow: CausalMaskedDiffWithDiT, tokens: list[int], streaming: bool) -> FlowSolve:
    p = tiny_prompt()
    with torch.inference_mode():
        cond = flow.conditioning(torch.tensor([tokens], dtype=torch.int32), p.prompt_token,
                                 p.prompt_feat, p.embedding, finalize=not streaming)
    return FlowSolve(cond, streaming)


def _tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 81, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("extra", [0, 1, 37, "2x"])
def test_bf16_padded_bucket_rows_equal_the_unpadded_bf16_solve(flows, streaming, extra):
    fp32, bf16 = flows
    toks = _tokens(13, 0)
    solve = _solve(bf16, toks, streaming)
    frames = solve.frames * 2 if extra == "2x" else solve.frames + int(extra)
    alone = mel(bf16, torch.tensor([toks], dtype=torch.int32), streaming)
    r = _runner(bf16)
    for rows in (1, 3):
        packed = r.pack([solve], rows, frames)
        assert packed["mu"].dtype == torch.float32
        with torch.inference_mode():
            out = r.forward(packed)[:1, :, solve.cond.prompt_frames:solve.frames]
        assert out.dtype == torch.float32 and out.shape == alone.shape
        assert errors(out, alone)[0] <= SOLVE  # measured 0.0 on CPU
    ref = mel(fp32, torch.tensor([toks], dtype=torch.int32), streaming)
    assert errors(alone, ref)[0] > FLOOR  # the bucket path really ran in bf16


def test_bf16_mixed_rows_in_one_call_and_the_eager_route(flows):
    _, bf16 = flows
    cases = [(_tokens(13, 1), True), (_tokens(9, 2), False), (_tokens(16, 3), False),
             (_tokens(11, 4), True)]
    solves = [_solve(bf16, t, s) for t, s in cases]
    routed = _runner(bf16).solve(solves)  # buckets 40, 40, 60, 30: mixed rows share a call
    for (toks, streaming), out in zip(cases, routed, strict=True):
        alone = mel(bf16, torch.tensor([toks], dtype=torch.int32), streaming)
        assert errors(out, alone)[0] <= SOLVE
