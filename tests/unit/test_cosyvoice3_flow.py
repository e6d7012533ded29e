"""CosyVoice3 flow parity with the reference fixtures (spec §1 build items 4-7, §6).

The tiny `CausalMaskedDiffWithDiT` is loaded strictly from `flow_tiny_state_dict.safetensors` and
checked against `flow_tiny_fixtures.safetensors` in the spec's order: conditioning (a.*), the DiT
estimator (b.*), the Euler + CFG solve (c.*), flow inference (d.*). Tolerances (spec §1): 1e-5
for one module call and each solver step, 1e-4 for 10-step solves.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import meta, tensors  # noqa: E402

from voxflow.models.cosyvoice3.dit import DiT, attention_mask  # noqa: E402
from voxflow.models.cosyvoice3.flow import (  # noqa: E402
    CausalMaskedDiffWithDiT,
    FlowConfig,
    cosine_t_span,
    fixed_noise,
)

ONE_CALL = 1e-5
SOLVE = 1e-4


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


@pytest.fixture(scope="module")
def fx() -> dict[str, Any]:
    return tensors("flow_tiny_fixtures.safetensors")


@pytest.fixture(scope="module")
def flow() -> CausalMaskedDiffWithDiT:
    model = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    model.load_state_dict(tensors("flow_tiny_state_dict.safetensors"), strict=True)
    return model.eval()


# ---- state-dict layout (spec §3) ----


def test_tiny_state_dict_keys_and_shapes_are_the_reference_layout() -> None:
    ref = tensors("flow_tiny_state_dict.safetensors")
    sd = CausalMaskedDiffWithDiT(FlowConfig.tiny()).state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {k: tuple(v.shape) for k, v in ref.items()}
    assert len(sd) == 50 == meta("flow_tiny_meta.json")["n_state"]
    model = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    assert sum(p.numel() for p in model.parameters()) == meta("flow_tiny_meta.json")["params"]


def test_full_size_on_meta_equals_the_manifest() -> None:
    with torch.device("meta"):
        model = CausalMaskedDiffWithDiT(FlowConfig())
    manifest = meta("full_size_state_dict_manifest.json")["flow.pt"]
    got = [(k, list(v.shape), str(v.dtype).removeprefix("torch."))
           for k, v in model.state_dict().items()]
    assert got == [(e["key"], e["shape"], e["dtype"]) for e in manifest["keys"]]
    assert len(got) == manifest["num_tensors"] == 330
    assert sum(p.numel() for p in model.parameters()) == manifest["num_params"] == 332_257_088
    assert "rand_noise" not in "".join(k for k, _, _ in got)


def test_strict_load_refuses_a_missing_key() -> None:
    sd = dict(tensors("flow_tiny_state_dict.safetensors"))
    del sd["decoder.estimator.rotary_embed.inv_freq"]
    with pytest.raises(RuntimeError, match="inv_freq"):
        CausalMaskedDiffWithDiT(FlowConfig.tiny()).load_state_dict(sd, strict=True)


def test_fixed_noise_is_the_reference_buffer(fx: dict[str, Any]) -> None:
    noise = fixed_noise()
    assert noise.shape == (1, 80, 15000) and noise.dtype == torch.float32
    digest = hashlib.sha256(noise.numpy().tobytes()).hexdigest()
    assert digest == meta("flow_tiny_meta.json")["rand_noise_sha256"]
    assert torch.equal(noise[:, :, :200], fx["rand_noise.first200"])


# ---- item 4: conditioning (a.*) ----


def test_speaker_projection(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any]) -> None:
    with torch.no_grad():
        spks = flow.speaker(fx["in.embedding"])
    assert spks.shape == (1, 80)
    assert max_diff(spks, fx["a.spks"]) < ONE_CALL


def test_token_embedding(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any]) -> None:
    all_token = torch.cat((fx["in.prompt_token"], fx["in.token"]), dim=1)
    assert torch.equal(all_token, fx["a.all_token"])
    with torch.no_grad():
        emb = flow.embed_tokens(all_token)
    assert max_diff(emb, fx["a.token_emb"]) < ONE_CALL


@pytest.mark.parametrize(("finalize", "name", "length"),
                         [(True, "finalize", 25), (False, "nonfinal", 22)])
def test_pre_lookahead(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], finalize: bool,
                       name: str, length: int) -> None:
    with torch.no_grad():
        out = flow.lookahead(fx["a.token_emb"], finalize)
    assert out.shape == (1, length, 80)
    assert max_diff(out, fx[f"a.prelookahead_out_{name}"]) < ONE_CALL


@pytest.mark.parametrize(("finalize", "name", "frames"),
                         [(True, "finalize", 50), (False, "nonfinal", 44)])
def test_mu_cond_mask(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], finalize: bool,
                      name: str, frames: int) -> None:
    with torch.no_grad():
        c = flow.conditioning(fx["in.token"], fx["in.prompt_token"], fx["in.prompt_feat"],
                              fx["in.embedding"], finalize)
    assert c.mu.shape == (1, 80, frames) and c.prompt_frames == 14
    assert max_diff(c.mu, fx[f"a.mu_{name}"]) < ONE_CALL
    assert max_diff(c.spks, fx["a.spks"]) < ONE_CALL
    assert torch.equal(c.mask, torch.ones(1, 1, frames))
    if finalize:  # the solve fixture's cond: prompt mel in frames 0..13, zeros after
        assert torch.equal(c.cond, fx["c.nonstream.in.cond"])
    assert torch.equal(c.cond[:, :, :14], fx["in.prompt_feat"].transpose(1, 2))
    assert not c.cond[:, :, 14:].any()


# ---- item 5: DiT estimator (b.*) ----


def run_dit(estimator: DiT, fx: dict[str, Any], prefix: str, streaming: bool) -> Any:
    i = {k: fx[f"{prefix}in.{k}"] for k in ("x", "mask", "mu", "t", "spks", "cond")}
    with torch.no_grad():
        return estimator(i["x"], i["mask"], i["mu"], i["t"], i["spks"], i["cond"],
                         streaming=streaming)


@pytest.mark.parametrize("prefix", ["b.", "b.pad."])
@pytest.mark.parametrize(("streaming", "name"), [(False, "nonstream"), (True, "stream")])
def test_dit_estimator(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], prefix: str,
                       streaming: bool, name: str) -> None:
    out = run_dit(flow.decoder.estimator, fx, prefix, streaming)
    ref = fx[f"{prefix}out_{name}"]
    assert out.shape == ref.shape == (2, 80, 37)
    assert max_diff(out, ref) < ONE_CALL


def test_padded_frames_keep_their_conv_and_ff_values(flow: CausalMaskedDiffWithDiT,
                                                     fx: dict[str, Any]) -> None:
    """Spec §6 padding quirk: the output at padded frames is not zeroed (the fixture holds it)."""
    out = run_dit(flow.decoder.estimator, fx, "b.pad.", streaming=False)
    assert fx["b.pad.in.mask"][1, 0, -7:].sum() == 0
    assert out[1, :, -7:].abs().max() > 0.01


def test_streaming_mask_is_chunk_causal_from_frame_0() -> None:
    mask = torch.ones(2, 1, 37)
    mask[1, 0, 30:] = 0
    m = attention_mask(mask, streaming=True, chunk_size=10)
    assert m.shape == (2, 1, 37, 37) and m.dtype == torch.bool
    for i in (0, 9, 10, 19, 36):
        end = min((i // 10 + 1) * 10, 37)
        assert m[0, 0, i, :end].all() and not m[0, 0, i, end:].any()
    assert m[1, 0, 36, :30].all() and not m[1, 0, 36, 30:].any()
    full = attention_mask(mask, streaming=False, chunk_size=10)
    assert full[0].all() and torch.equal(full[1, 0, 5], mask[1, 0].bool())


def test_a_row_without_valid_keys_attends_everything() -> None:
    m = attention_mask(torch.zeros(1, 1, 5), streaming=False, chunk_size=10)
    assert m.all()


# ---- item 6: Euler + CFG (c.*) ----


def solve(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], name: str) -> tuple[Any, ...]:
    """The c.{name} solve and its trace: t [10], x [10, 80, 50], v [10, 2, 80, 50], out."""
    c = f"c.{name}."
    steps: list[tuple[Any, Any, Any]] = []

    def hook(step: int, t: Any, x: Any, v_pair: Any) -> None:
        assert step == len(steps)
        steps.append((t.clone(), x.clone(), v_pair.clone()))

    with torch.no_grad():
        out = flow.decoder(fx[c + "in.mu"], fx[c + "in.mask"], fx[c + "in.spks"],
                           fx[c + "in.cond"], streaming=name == "stream", on_step=hook)
    assert len(steps) == 10
    t = torch.cat([s[0] for s in steps])
    x = torch.cat([s[1] for s in steps])
    v = torch.stack([s[2] for s in steps])
    return t, x, v, out


def test_noise_slice_is_x0(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any]) -> None:
    x0 = flow.decoder.noise(50, torch.device("cpu"), torch.float32)
    assert torch.equal(x0, fx["c.nonstream.in.noise_z"])
    assert torch.equal(x0, fx["c.stream.in.noise_z"])


def test_cosine_schedule() -> None:
    t = cosine_t_span(10)
    assert t.shape == (11,) and t[0] == 0 and abs(float(t[-1]) - 1) < 1e-7
    assert torch.all(t[1:] > t[:-1])


@pytest.mark.parametrize("name", ["nonstream", "stream"])
def test_euler_cfg_steps_and_output(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any],
                                    name: str) -> None:
    t, x, v, out = solve(flow, fx, name)
    c = f"c.{name}."
    assert max_diff(t, fx[c + "step_t"]) < ONE_CALL
    assert max_diff(x, fx[c + "step_x"]) < ONE_CALL
    assert max_diff(v, fx[c + "step_v_pair"]) < ONE_CALL
    assert out.shape == (1, 80, 50) and out.dtype == torch.float32
    assert max_diff(out, fx[c + "out_full"]) < SOLVE


def test_each_step_from_the_reference_inputs(flow: CausalMaskedDiffWithDiT,
                                             fx: dict[str, Any]) -> None:
    """One estimator call per step on the fixture's own x and t gives its v pair (no drift)."""
    c = "c.stream."
    est = flow.decoder.estimator
    mu = torch.cat((fx[c + "in.mu"], torch.zeros_like(fx[c + "in.mu"])))
    spks = torch.cat((fx[c + "in.spks"], torch.zeros_like(fx[c + "in.spks"])))
    cond = torch.cat((fx[c + "in.cond"], torch.zeros_like(fx[c + "in.cond"])))
    mask = torch.ones(2, 1, 50)
    with torch.no_grad():
        for k in range(10):
            x = fx[c + "step_x"][k:k + 1].expand(2, -1, -1)
            t = fx[c + "step_t"][k].repeat(2)
            v = est(x, mask, mu, t, spks, cond, streaming=True)
            assert max_diff(v, fx[c + "step_v_pair"][k]) < ONE_CALL


def test_a_batch_of_rows_solves_each_row_alone(flow: CausalMaskedDiffWithDiT,
                                               fx: dict[str, Any]) -> None:
    """Two requests in one solve (2B = 4 estimator rows) give each its own mel."""
    c = "c.stream."
    mu, mask, spks, cond = (fx[c + "in." + k] for k in ("mu", "mask", "spks", "cond"))
    with torch.no_grad():
        alone = flow.decoder(mu, mask, spks, cond, streaming=True)
        both = flow.decoder(torch.cat((mu, mu.flip(2))), torch.cat((mask, mask)),
                            torch.cat((spks, -spks)), torch.cat((cond, cond)), streaming=True)
    assert max_diff(both[:1], alone) < ONE_CALL
    assert max_diff(both[:1], both[1:]) > 0.01


# ---- item 7: flow inference (d.*) ----


def infer(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], token: Any, streaming: bool,
          finalize: bool) -> Any:
    return flow.inference(token, fx["in.prompt_token"], fx["in.prompt_feat"], fx["in.embedding"],
                          streaming=streaming, finalize=finalize)


@pytest.mark.parametrize(("mode", "streaming"), [("nonstream", False), ("stream", True)])
@pytest.mark.parametrize(("end", "finalize", "frames"),
                         [("final", True, 36), ("nonfinal", False, 30)])
def test_flow_inference(flow: CausalMaskedDiffWithDiT, fx: dict[str, Any], mode: str,
                        streaming: bool, end: str, finalize: bool, frames: int) -> None:
    mel = infer(flow, fx, fx["in.token"], streaming, finalize)
    assert mel.shape == (1, 80, frames) and mel.dtype == torch.float32
    assert max_diff(mel, fx[f"d.{mode}.{end}.mel"]) < SOLVE
    if finalize:
        assert max_diff(fx[f"d.{mode}.{end}.mel"], fx[f"c.{mode}.out_full"][:, :, 14:]) == 0


def test_streamed_calls_repeat_the_settled_prefix(flow: CausalMaskedDiffWithDiT,
                                                  fx: dict[str, Any]) -> None:
    """Spec §6 streaming property, §9.7 schedule (P = 7, first hop 5 + pad 3): call 0 on 11
    tokens gives 16 frames; call 1 on 18 tokens repeats them (P + offset = 15 tokens = 3 chunks)."""
    first = infer(flow, fx, fx["in.token"][:, :11], streaming=True, finalize=False)
    second = infer(flow, fx, fx["in.token"], streaming=True, finalize=False)
    assert first.shape == (1, 80, 16) and second.shape == (1, 80, 30)
    assert max_diff(second[:, :, :16], first) < ONE_CALL
    full = infer(flow, fx, fx["in.token"], streaming=False, finalize=False)
    assert max_diff(full[:, :, :16], first) > 0.01  # full attention sees the later frames


@pytest.mark.parametrize("streaming", [False, True])
def test_right_padding_with_masked_keys_keeps_valid_frames(flow: CausalMaskedDiffWithDiT,
                                                           fx: dict[str, Any],
                                                           streaming: bool) -> None:
    """The basis of padded buckets (spec §6, §10): 37 valid frames padded to 50."""
    i = {k: fx[f"b.pad.in.{k}"][:1] for k in ("x", "mask", "mu", "t", "spks", "cond")}
    pad = [torch.nn.functional.pad(i[k], (0, 13)) for k in ("x", "mask", "mu")]
    cond = torch.nn.functional.pad(i["cond"], (0, 13))
    est = flow.decoder.estimator
    with torch.no_grad():
        alone = est(i["x"], i["mask"], i["mu"], i["t"], i["spks"], i["cond"], streaming=streaming)
        padded = est(pad[0], pad[1], pad[2], i["t"], i["spks"], cond, streaming=streaming)
    assert max_diff(padded[:, :, :37], alone) < ONE_CALL
