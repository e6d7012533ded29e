"""CosyVoice3 strict state-dict loading (spec §1 item 1, §3): tiny fixture state dicts, the
full-size manifest on ``meta`` with its exact counts, real-checkpoint layout, failure messages."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from torch import nn  # noqa: E402

from tests.unit.cosyvoice3_fixtures import FIXTURES, meta, tensors  # noqa: E402
from voxflow.models.cosyvoice3 import loader  # noqa: E402
from voxflow.models.cosyvoice3.loader import StateDictError  # noqa: E402


class Small(nn.Module):
    """A module with a linear, a conv, a persistent and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.conv = nn.Conv1d(3, 2, 5)
        self.register_buffer("steps", torch.arange(6))
        self.register_buffer("scratch", torch.zeros(7), persistent=False)


def small_state(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "proj.weight": torch.randn(3, 4, generator=gen),
        "proj.bias": torch.randn(3, generator=gen),
        "conv.weight": torch.randn(2, 3, 5, generator=gen),
        "conv.bias": torch.randn(2, generator=gen),
        "steps": torch.arange(6) * 2,
    }


# --- strict loading on any module ---------------------------------------------------------


def test_load_strict_copies_every_tensor() -> None:
    module = Small()
    state = small_state()
    assert loader.load_strict(module, state) is module
    for key, value in module.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_missing_extra_and_misshaped_keys_are_all_named() -> None:
    state = small_state()
    del state["conv.bias"]
    state["proj.weight"] = torch.zeros(4, 3)
    state["conv.extra"] = torch.zeros(2, 2)
    with pytest.raises(StateDictError) as caught:
        loader.load_strict(Small(), state, what="flow.pt")
    text = str(caught.value)
    assert text.startswith("flow.pt: 3 state-dict problem(s):")
    assert "missing key 'conv.bias' (module expects [2] float32)" in text
    assert "unexpected key 'conv.extra' ([2, 2] float32)" in text
    assert "mis-shaped key 'proj.weight': checkpoint [4, 3] vs module [3, 4]" in text
    assert len(caught.value.problems) == 3
    assert isinstance(caught.value, ValueError)


def test_each_failure_alone_fails_and_leaves_the_module_untouched() -> None:
    module = Small()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    base = small_state()
    cases = {
        "missing": {k: v for k, v in base.items() if k != "steps"},
        "extra": {**base, "proj.scale": torch.ones(1)},
        "shape": {**base, "conv.weight": torch.zeros(2, 3, 4)},
        "int dtype": {**base, "steps": torch.arange(6.0)},
        "not a tensor": {**base, "proj.bias": [1.0, 2.0, 3.0]},
    }
    for label, state in cases.items():
        with pytest.raises(StateDictError, match=r"1 state-dict problem"):
            loader.load_strict(module, state)  # type: ignore[arg-type]
        for key, value in module.state_dict().items():
            assert torch.equal(value, before[key]), (label, key)


def test_non_persistent_buffers_are_not_expected() -> None:
    loader.check_state_dict(small_state(), Small().state_dict())  # no `scratch`: fine
    with pytest.raises(StateDictError, match="unexpected key 'scratch'"):
        loader.check_state_dict({**small_state(), "scratch": torch.zeros(7)}, Small().state_dict())


def test_floats_are_cast_to_the_module_dtype() -> None:
    module = Small().double()
    state = small_state()
    loader.load_strict(
        module, {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    )
    assert module.proj.weight.dtype == torch.float64
    assert torch.equal(module.proj.weight, state["proj.weight"].half().double())


def test_assign_onto_a_meta_module_materialises_it() -> None:
    with torch.device("meta"):
        module = Small()
    state = small_state()
    with pytest.raises(StateDictError) as caught:  # `scratch` is not in any state dict
        loader.load_strict(module, state, assign=True)
    assert caught.value.problems == [
        "'scratch' [7] float32 is on meta and not in the state dict (a non-persistent buffer?): "
        "build it on a real device before loading"
    ]
    assert module.proj.weight.device.type == "meta"  # nothing was loaded
    with torch.device("meta"):
        later = Small()
    loader.load_strict(later, state, assign=True, set_later=["scratch"])  # the caller's job
    assert later.proj.weight.device.type == "cpu" and later.scratch.device.type == "meta"
    module.scratch = torch.zeros(7)
    loader.load_strict(module, state, assign=True)
    assert module.proj.weight.device.type == "cpu"
    assert isinstance(module.proj.weight, nn.Parameter)
    assert module.proj.weight.data_ptr() == state["proj.weight"].data_ptr()  # no copy
    assert torch.equal(module.steps, state["steps"])


def test_weight_norm_parametrization_and_legacy_names() -> None:
    conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(3, 4, 5))
    g, v = torch.rand(4, 1, 1) + 0.5, torch.randn(4, 3, 5)
    legacy = {"generator.weight_g": g, "generator.weight_v": v, "generator.bias": torch.ones(4)}
    loader.load_strict(conv, loader.normalize_hift_keys(legacy), what="hift.pt")
    assert torch.allclose(conv.weight, g * v / v.norm(dim=(1, 2), keepdim=True))
    with pytest.raises(StateDictError, match="clashes"):
        loader.normalize_hift_keys({"generator.conv.bias": g, "conv.bias": g})


# --- tiny fixture state dicts -------------------------------------------------------------


def test_tiny_state_dicts_have_the_spec_counts() -> None:
    states = loader.read_tiny_state_dicts(FIXTURES)
    assert {k: len(v) for k, v in states.items()} == {"flow.pt": 50, "hift.pt": 328, "llm.pt": 29}
    assert all(t.dtype == torch.float32 for s in states.values() for t in s.values())
    counts = {}
    for name, state in states.items():
        module = loader.skeleton_module(
            state,
            buffers=loader.PERSISTENT_BUFFERS.get(name, ()),
            tied=loader.TIED_PARAMETERS.get(name),
        )
        counts[name] = loader.count_module(module)
    assert counts["flow.pt"] == (50, meta("flow_tiny_meta.json")["params"])  # 226,976
    assert counts["hift.pt"] == (328, meta("hift_tiny_meta.json")["params"])  # 114,627
    lm = states["llm.pt"]
    assert torch.equal(lm["llm.model.lm_head.weight"], lm["llm.model.model.embed_tokens.weight"])
    assert counts["llm.pt"] == (29, 19_558_080 - 151_936 * 64)


def test_tiny_state_dicts_load_into_modules_built_on_meta() -> None:
    states = loader.read_tiny_state_dicts(FIXTURES)
    for name, state in states.items():
        module = loader.skeleton_module(loader.meta_state_dict(_specs(state)))
        loader.load_checkpoint(module, state, name)  # assign=True
        for key, value in module.state_dict().items():
            assert value.device.type == "cpu", key
            assert torch.equal(value, state[key]), key


def test_tiny_layout_is_the_full_layout_with_fewer_blocks() -> None:
    manifest = loader.read_manifest(FIXTURES)
    states = loader.read_tiny_state_dicts(FIXTURES)
    few = {
        "flow.pt": r"decoder\.estimator\.transformer_blocks\.(\d+)\.",
        "llm.pt": r"llm\.model\.model\.layers\.(\d+)\.",
        "hift.pt": None,
    }
    for name, pattern in few.items():
        full = [s.key for s in manifest[name].keys]
        if pattern is not None:
            full = [k for k in full if not (m := re.match(pattern, k)) or int(m.group(1)) < 2]
        assert sorted(states[name]) == sorted(full), name


def test_a_tiny_state_dict_into_a_full_size_module_fails_naming_keys_and_shapes() -> None:
    entry = loader.read_manifest(FIXTURES)["flow.pt"]
    module = loader.manifest_skeleton(entry)
    flow = loader.read_tiny_state_dicts(FIXTURES)["flow.pt"]
    with pytest.raises(StateDictError) as caught:
        loader.load_checkpoint(module, flow, "flow.pt")
    problems = caught.value.problems
    assert "mis-shaped key 'input_embedding.weight': checkpoint [81, 80] vs module [6561, 80]" in (
        problems
    )
    assert (
        "missing key 'decoder.estimator.transformer_blocks.21.ff.ff.2.bias' "
        "(module expects [1024] float32)"
    ) in problems
    assert sum(p.startswith("missing key") for p in problems) == 20 * 14
    assert "... and" in str(caught.value)  # long lists are cut in the message, not in .problems
    assert module.input_embedding.weight.device.type == "meta"  # nothing was loaded


# --- full-size manifest on meta -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tensors_", "params"),
    [("flow.pt", 330, 332_257_088), ("hift.pt", 328, 20_779_887), ("llm.pt", 293, 506_148_480)],
)
def test_full_size_manifest_counts_on_meta(name: str, tensors_: int, params: int) -> None:
    entry = loader.read_manifest(FIXTURES / loader.MANIFEST_NAME)[name]
    module = loader.check_full_size_manifest(entry)
    assert loader.count_module(module) == (tensors_, params)
    state = module.state_dict()
    assert list(state) == [s.key for s in entry.keys]  # the reference order
    assert all(t.device.type == "meta" for t in state.values())
    for spec in entry.keys:
        assert tuple(state[spec.key].shape) == spec.shape and state[spec.key].dtype == spec.dtype
    loader.check_state_dict(loader.meta_state_dict(entry.keys), state, what=name)


def test_full_size_shapes_quoted_by_the_spec() -> None:
    shapes = {
        name: {s.key: s.shape for s in entry.keys}
        for name, entry in loader.read_manifest(FIXTURES).items()
    }
    assert shapes["llm.pt"]["llm.model.model.embed_tokens.weight"] == (151936, 896)
    assert shapes["llm.pt"]["llm.model.model.layers.23.self_attn.k_proj.weight"] == (128, 896)
    assert shapes["llm.pt"]["speech_embedding.weight"] == (6761, 896)
    assert shapes["flow.pt"]["pre_lookahead_layer.conv1.weight"] == (1024, 80, 4)
    assert shapes["flow.pt"]["decoder.estimator.rotary_embed.inv_freq"] == (32,)
    assert shapes["flow.pt"]["decoder.estimator.transformer_blocks.21.attn_norm.linear.weight"] == (
        6144,
        1024,
    )
    assert shapes["hift.pt"]["conv_post.parametrizations.weight.original1"] == (18, 64, 7)
    assert shapes["hift.pt"]["f0_predictor.condnet.0.parametrizations.weight.original0"] == (
        512,
        1,
        1,
    )


def test_a_wrong_count_is_loud() -> None:
    entry = loader.read_manifest(FIXTURES)["hift.pt"]
    short = dataclasses.replace(entry, keys=entry.keys[:-1], num_params=1)
    with pytest.raises(StateDictError) as caught:
        loader.check_full_size_manifest(short)
    text = str(caught.value)
    assert "manifest keys 327, expected 328" in text
    assert "manifest num_params 1, expected 20,779,887" in text
    # an unlisted buffer would count as a parameter
    flow = loader.read_manifest(FIXTURES)["flow.pt"]
    module = loader.skeleton_module(loader.meta_state_dict(flow.keys))
    assert loader.count_module(module) == (330, 332_257_088 + 32)


# --- real checkpoint layout ----------------------------------------------------------------


def _specs(state: dict[str, torch.Tensor]) -> list[loader.TensorSpec]:
    return [loader.TensorSpec(k, tuple(v.shape), v.dtype) for k, v in state.items()]


def test_checkpoint_directory_round_trip(tmp_path: Path) -> None:
    lm = {
        "llm.model.model.embed_tokens.weight": torch.randn(10, 4),
        "llm.model.lm_head.weight": torch.randn(10, 4),
        "llm_decoder.weight": torch.randn(6, 4),
    }
    flow = small_state(1)
    hift = {
        "generator.conv_pre.bias": torch.randn(4),
        "generator.conv_pre.parametrizations.weight.original0": torch.rand(4, 1, 1),
        "generator.conv_pre.parametrizations.weight.original1": torch.randn(4, 3, 5),
    }
    for name, state in {"llm.pt": lm, "flow.pt": flow, "hift.pt": hift}.items():
        torch.save(state, tmp_path / name)
    read = loader.read_checkpoint_dir(tmp_path)
    assert sorted(read["hift.pt"]) == sorted(k.removeprefix("generator.") for k in hift)

    lm_module = loader.skeleton_module(
        loader.meta_state_dict([s for s in _specs(lm) if "lm_head" not in s.key])
    )
    loader.load_checkpoint(lm_module, read["llm.pt"], "llm.pt")  # the unused head is dropped
    assert torch.equal(lm_module.llm_decoder.weight, lm["llm_decoder.weight"])
    with torch.device("meta"):
        flow_module = Small()
    flow_module.scratch = torch.zeros(7)  # non-persistent: built for real, not loaded
    loader.load_checkpoint(flow_module, read["flow.pt"], "flow.pt")
    assert torch.equal(flow_module.conv.weight, flow["conv.weight"])
    hift_module = nn.Module()
    hift_module.conv_pre = nn.utils.parametrizations.weight_norm(nn.Conv1d(3, 4, 5))
    loader.load_checkpoint(hift_module, read["hift.pt"], "hift.pt", assign=False)
    assert torch.equal(
        hift_module.conv_pre.parametrizations.weight.original1,
        hift["generator.conv_pre.parametrizations.weight.original1"],
    )
    # a module that has the head must get it: it is dropped only when the module lacks it
    with pytest.raises(StateDictError, match="missing key 'llm.model.lm_head.weight'"):
        loader.load_checkpoint(
            loader.skeleton_module(loader.meta_state_dict(_specs(lm))),
            {k: v for k, v in read["llm.pt"].items() if "lm_head" not in k},
            "llm.pt",
        )


def test_checkpoint_failures_name_the_file_and_key(tmp_path: Path) -> None:
    torch.save(small_state(), tmp_path / "flow.pt")
    with pytest.raises(FileNotFoundError, match="lacks llm.pt, hift.pt"):
        loader.read_checkpoint_dir(tmp_path)
    torch.save([torch.zeros(1)], tmp_path / "llm.pt")
    with pytest.raises(StateDictError, match="holds a list, not a state dict"):
        loader.read_checkpoint(tmp_path / "llm.pt")
    torch.save({"a": torch.zeros(1), "b": 3}, tmp_path / "hift.pt")
    with pytest.raises(StateDictError, match="key 'b' holds a int, not a tensor"):
        loader.read_checkpoint(tmp_path / "hift.pt")
    with pytest.raises(FileNotFoundError):
        loader.read_checkpoint(tmp_path / "missing.pt")
    bad = {**small_state(), "conv.weight": torch.zeros(2, 3, 3)}
    torch.save(bad, tmp_path / "flow.pt")
    with pytest.raises(StateDictError, match=r"^flow\.pt: 1 state-dict problem") as caught:
        loader.load_checkpoint(Small(), loader.read_checkpoint(tmp_path / "flow.pt"), "flow.pt")
    assert caught.value.problems == [
        "mis-shaped key 'conv.weight': checkpoint [2, 3, 3] vs module [2, 3, 5]"
    ]


def test_fixture_reader_agrees() -> None:
    assert loader.read_safetensors(FIXTURES / "lm_tiny_state_dict.safetensors.gz").keys() == (
        tensors("lm_tiny_state_dict.safetensors.gz").keys()
    )


# --- the real module classes (lm.py, flow.py, hift.py) ----------------------------------------


def _real_modules() -> dict[str, tuple[Callable[[], nn.Module], Callable[[], nn.Module]]]:
    from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig
    from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator, HiFTConfig
    from voxflow.models.cosyvoice3.lm import FULL_LM_CONFIG, TINY_LM_CONFIG, CosyVoice3LM

    return {
        "flow.pt": (
            lambda: CausalMaskedDiffWithDiT(FlowConfig()),
            lambda: CausalMaskedDiffWithDiT(FlowConfig.tiny()),
        ),
        "hift.pt": (
            lambda: CausalHiFTGenerator(HiFTConfig()),
            lambda: CausalHiFTGenerator(HiFTConfig.tiny()),
        ),
        "llm.pt": (lambda: CosyVoice3LM(FULL_LM_CONFIG), lambda: CosyVoice3LM(TINY_LM_CONFIG)),
    }


@pytest.mark.parametrize("name", ["flow.pt", "hift.pt", "llm.pt"])
def test_real_modules_match_the_manifest_and_load_the_tiny_dicts(name: str) -> None:
    full, tiny = _real_modules()[name]
    entry = loader.read_manifest(FIXTURES)[name]
    with torch.device("meta"):
        module = full()
    state = module.state_dict()
    loader.check_state_dict(loader.meta_state_dict(entry.keys), state, what=name)
    assert list(state) == [s.key for s in entry.keys]
    assert loader.count_module(module) == loader.FULL_SIZE_COUNTS[name]
    small = tiny()
    weights = loader.read_tiny_state_dicts(FIXTURES)[name]
    loader.load_checkpoint(small, weights, name, assign=False)
    for key, value in small.state_dict().items():
        assert torch.equal(value.float(), weights[key]), key
