"""NanoCodec loading (spec §1 items 2 and 6, §5): weight norm folded once at load equals NeMo's
fold, strict keys and shapes, checkpoint prefixes, and the full-size decoder on ``meta`` with
its exact tensor, parameter and cache counts."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from nanocodec_fixtures import FIXTURES, config, tensors  # noqa: E402

from voxflow.models.nanocodec.config import DecoderConfig, cache_inventory  # noqa: E402
from voxflow.models.nanocodec.layers import weight_norm_fold  # noqa: E402
from voxflow.models.nanocodec.loader import (  # noqa: E402
    StateDictError,
    build_decoder,
    check_full_size,
    load_decoder,
    read_manifest,
    split_checkpoint,
)

FOLD_ATOL = 1e-6


@pytest.fixture(scope="module")
def state() -> dict[str, Any]:
    return tensors("tiny_decoder_state_dict.safetensors")


@pytest.fixture(scope="module")
def folded() -> dict[str, Any]:
    return tensors("tiny_decoder_folded_weights.safetensors")


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


def test_fixture_config_is_the_tiny_config() -> None:
    for name in ("tiny_decoder_state_dict.safetensors", "tiny_decoder_io.safetensors",
                 "tiny_decoder_prefixes.safetensors"):
        assert DecoderConfig.from_dict(config(name)) == DecoderConfig.tiny()


def test_tiny_module_layout_is_nemo_state_dict_311_tensors(state: dict[str, Any]) -> None:
    ours = build_decoder(DecoderConfig.tiny()).state_dict()
    assert len(ours) == len(state) == 311
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        k: tuple(v.shape) for k, v in state.items()}


def test_folded_weights_equal_nemo_fold(state: dict[str, Any], folded: dict[str, Any]) -> None:
    decoder = load_decoder(state, DecoderConfig.tiny())
    ours = decoder.state_dict()
    assert set(ours) == set(folded) and len(ours) == 233
    worst = max(max_diff(ours[k], folded[k]) for k in folded)
    assert worst <= FOLD_ATOL


def test_fold_keeps_negative_g_and_divides_by_norm_v_quirks(
    state: dict[str, Any], folded: dict[str, Any]
) -> None:
    # The tiny g are != ||v|| and some negative: |g|, or skipping g or the division, must miss.
    key = "up_sample_conv_layers.0.conv"
    g = state[f"{key}.parametrizations.weight.original0"]
    v = state[f"{key}.parametrizations.weight.original1"]
    want = folded[f"{key}.weight"]
    assert (g < 0).any()
    assert max_diff(weight_norm_fold(g, v), want) <= FOLD_ATOL
    assert max_diff(weight_norm_fold(g.abs(), v), want) > 1e-2
    assert max_diff(v * g, want) > 1e-2
    assert max_diff(v / v.norm(2, dim=(1, 2), keepdim=True), want) > 1e-2


def test_transposed_conv_norm_is_over_input_channel_dim_0(state: dict[str, Any]) -> None:
    # ConvTranspose1d's dim 0 is C_in: g (80, 1, 1), v (80, 1, 16), bias (40,).
    key = "up_sample_conv_layers.0.conv"
    assert tuple(state[f"{key}.parametrizations.weight.original0"].shape) == (80, 1, 1)
    assert tuple(state[f"{key}.parametrizations.weight.original1"].shape) == (80, 1, 16)
    assert tuple(state[f"{key}.bias"].shape) == (40,)


def test_fp64_fold_from_g_and_v_not_from_fp32_folded_file(
    state: dict[str, Any], folded: dict[str, Any]
) -> None:
    decoder = load_decoder(state, DecoderConfig.tiny(), dtype=torch.float64)
    weight = decoder.pre_conv.conv.weight
    assert weight is not None and weight.dtype == torch.float64
    assert 0 < max_diff(weight, folded["pre_conv.conv.weight"]) <= FOLD_ATOL


def test_missing_extra_and_misshaped_keys_are_all_named(state: dict[str, Any]) -> None:
    broken = dict(state)
    del broken["post_conv.conv.bias"]
    broken["post_conv.conv.extra"] = torch.zeros(2)
    broken["pre_conv.conv.parametrizations.weight.original1"] = torch.zeros(80, 32, 5)
    with pytest.raises(StateDictError) as err:
        load_decoder(broken, DecoderConfig.tiny())
    text = str(err.value)
    assert "missing key 'post_conv.conv.bias'" in text
    assert "unexpected key 'post_conv.conv.extra'" in text
    assert "mis-shaped key 'pre_conv.conv.parametrizations.weight.original1'" in text
    assert "[80, 32, 5] vs module [80, 32, 7]" in text


def test_full_size_weights_refused_by_the_tiny_config() -> None:
    manifest = read_manifest(FIXTURES)
    meta = {k: torch.empty(s, device="meta") for k, s in manifest.shapes.items()}
    with pytest.raises(StateDictError, match="385 state-dict problem") as err:
        load_decoder(meta, DecoderConfig.tiny(), device="meta")
    problems = err.value.problems
    assert any(p.startswith("unexpected key 'res_layers.4.") for p in problems)
    assert "mis-shaped key 'pre_conv.conv.bias': checkpoint [864] vs module [80]" in problems


def quantizer_buffers() -> dict[str, Any]:
    out = {}
    for g in range(8):
        out[f"vector_quantizer.fsqs.{g}.dim_base_index"] = torch.tensor(
            [1, 8, 56, 336], dtype=torch.int32).reshape(1, 4, 1)
        out[f"vector_quantizer.fsqs.{g}.num_levels"] = torch.tensor(
            [8, 7, 6, 6], dtype=torch.int32).reshape(1, 4, 1)
    return out


def test_checkpoint_prefixes_legacy_names_and_skipped_modules(state: dict[str, Any]) -> None:
    ckpt: dict[str, Any] = {"audio_encoder.x": torch.zeros(1), "discriminator.y": torch.zeros(1)}
    for key, value in state.items():
        key = key.replace("parametrizations.weight.original0", "weight_g")
        key = key.replace("parametrizations.weight.original1", "weight_v")
        ckpt["audio_decoder." + key] = value
    ckpt.update(quantizer_buffers())
    decoder_state, quantizer = split_checkpoint(ckpt)
    assert set(decoder_state) == set(state) and len(quantizer) == 16
    load_decoder(decoder_state, DecoderConfig.tiny())


def test_checkpoint_with_other_fsq_levels_or_unknown_prefix_refused() -> None:
    ckpt = quantizer_buffers()
    ckpt["vector_quantizer.fsqs.3.num_levels"] = torch.tensor(
        [8, 5, 5, 5], dtype=torch.int32).reshape(1, 4, 1)
    ckpt["decoder.pre_conv.conv.bias"] = torch.zeros(3)
    with pytest.raises(StateDictError) as err:
        split_checkpoint(ckpt)
    assert "fsqs.3.num_levels" in str(err.value)
    assert "unexpected key 'decoder.pre_conv.conv.bias'" in str(err.value)


def test_full_size_on_meta_387_tensors_31_564_085_params_after_folding() -> None:
    manifest = read_manifest(FIXTURES)
    assert manifest.config == DecoderConfig()
    assert len(manifest.shapes) == 387
    assert all(k.startswith("audio_decoder.") for k in manifest.checkpoint_keys)
    module = check_full_size(manifest)
    assert all(p.device.type == "meta" for p in module.parameters())
    assert sum(p.numel() for p in module.parameters()) == 31_564_085
    assert build_decoder(DecoderConfig()).state_dict().keys() == manifest.shapes.keys()


def test_full_size_inventory_97_caches_186_816_values_per_stream() -> None:
    inventory = cache_inventory(DecoderConfig())
    assert len(inventory) == 97
    assert sum(s.numel for s in inventory) == 186_816
    res_convs = sum(216 * c for c in (432, 216, 108, 54, 27))  # spec §6: 216·C_i per stage
    tails = 432 * 8 + 216 * 8 + 108 * 4 + 54 * 2 + 27 * 2
    assert res_convs + tails + 32 * 6 + 27 * 2 == 186_816
    assert inventory[0].name == "pre_conv" and inventory[-1].name == "post_conv"
    assert inventory[1].name == "up_sample_conv_layers.0" and inventory[1].columns == 8


def test_tiny_inventory_78_caches_16_812_values_match_module_slots() -> None:
    inventory = cache_inventory(DecoderConfig.tiny())
    assert len(inventory) == 78 and sum(s.numel for s in inventory) == 16_812
    module = build_decoder(DecoderConfig.tiny())
    slots = {name: m.slot for name, m in module.named_modules() if hasattr(m, "slot")}
    assert [slots[s.name] for s in inventory] == list(range(78))
    assert module.num_slots == 78


def test_too_large_topology_refused_before_allocating() -> None:
    with pytest.raises(ValueError, match="exceeds the limit"):
        cache_inventory(DecoderConfig(base_channels=864 * 32))


def test_unsupported_activation_refused() -> None:
    with pytest.raises(ValueError, match="activation"):
        DecoderConfig(activation="snake")
