"""MagpieTTS strict loading: the tiny fixture state dicts load (causal masks dropped, float16
upcast exactly); unknown, missing and mis-shaped keys and wrong baked-context buffers raise an
error naming the key; the two full-size models of ``full_manifest.json`` build on ``meta`` with
every manifest key and shape and NeMo's parameter counts, no weights allocated."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import (  # noqa: E402
    FIXTURES,
    TAGS,
    config,
    one_torch_thread,  # noqa: F401 (autouse)
    state_dict,
)

from voxflow.models.magpie.loader import (  # noqa: E402
    StateDictError,
    build_full_size,
    load_model,
    read_manifest,
)


def load(state: dict[str, Any], tag: str = "s1") -> Any:
    return load_model(state, config(tag))


@pytest.mark.parametrize("tag", TAGS)
def test_tiny_state_dict_loads_exactly(tag: str) -> None:
    state = state_dict(tag)
    m = load(state, tag)
    assert m.final_proj.weight.dtype == torch.float32
    assert torch.equal(m.final_proj.weight, state["final_proj.weight"].float())
    masks = [k for k in state if k.endswith("causal_mask")]
    assert len(masks) == (5 if tag == "s1" else 6)
    assert set(m.state_dict()) == set(state) - set(masks)
    assert not any(p.requires_grad for p in m.parameters())
    lt_in = type(m.local_transformer_in_projection).__name__
    assert lt_in == ("Linear" if tag == "s1" else "Identity")  # LT 16 wide in s1, 32 in s2


def test_missing_key_is_named() -> None:
    state = dict(state_dict("s1"))
    del state["decoder.layers.1.cross_attention.kv_net.weight"]
    with pytest.raises(StateDictError, match=r"missing key 'decoder\.layers\.1\.cross_attention"
                                             r"\.kv_net\.weight'"):
        load(state)


def test_unexpected_key_is_named() -> None:
    state = dict(state_dict("s1"))
    state["context_encoder.layers.0.norm_self.weight"] = torch.ones(32)
    with pytest.raises(StateDictError,
                       match=r"unexpected key 'context_encoder\.layers\.0\.norm_self\.weight'"):
        load(state)


def test_misshaped_key_is_named_with_both_shapes() -> None:
    state = dict(state_dict("s1"))
    state["audio_embeddings.3.weight"] = torch.zeros(2016, 32)
    with pytest.raises(StateDictError, match=r"mis-shaped key 'audio_embeddings\.3\.weight': "
                                             r"checkpoint \[2016, 32\] vs module \[2024, 32\]"):
        load(state)


def test_s2_weights_do_not_fit_the_s1_config() -> None:
    with pytest.raises(StateDictError) as caught:
        load_model(state_dict("s2"), config("s1"))
    text = str(caught.value)
    assert "audio_embeddings.8.weight" in text and "final_proj.weight" in text


def test_baked_context_buffers_are_checked() -> None:
    state = dict(state_dict("s1"))
    state["baked_context_embedding_len"] = torch.tensor([5, 4])
    with pytest.raises(StateDictError, match="baked_context_embedding_len"):
        load(state)
    state = dict(state_dict("s1"))
    state["_baked_embedding_T"] = torch.tensor(4)
    with pytest.raises(StateDictError, match="_baked_embedding_T is 4, config says 5"):
        load(state)


def test_bad_causal_mask_is_rejected() -> None:
    state = dict(state_dict("s1"))
    key = "decoder.layers.0.self_attention.causal_mask"
    state[key] = torch.ones(1, 1, 64, 64)
    with pytest.raises(StateDictError, match="not lower-triangular"):
        load(state)


def test_full_size_models_build_on_meta_from_the_manifest() -> None:
    entries = read_manifest(FIXTURES)
    assert [e.settings["frame_stacking_factor"] for e in entries] == [1, 2]
    want = {1: (224_222_080, 231), 2: (284_200_192, 260)}
    for entry in entries:
        m = build_full_size(entry)
        params, keys = want[entry.settings["frame_stacking_factor"]]
        assert sum(p.numel() for p in m.parameters()) == params
        assert len(entry.shapes) == keys
        assert all(t.is_meta for t in m.state_dict().values())  # nothing allocated
        shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
        listed = {k: s for k, (s, _) in entry.shapes.items() if not k.endswith("causal_mask")}
        assert shapes == listed


def test_full_size_manifest_with_a_wrong_shape_fails() -> None:
    entry = read_manifest(FIXTURES)[1]
    shapes = dict(entry.shapes)
    shapes["local_transformer.position_embeddings.weight"] = ((10, 768), "float32")
    broken = type(entry)(entry.revision, entry.settings, shapes, entry.counts,
                         entry.n_causal_masks, entry.special_ids)
    with pytest.raises(StateDictError, match=r"local_transformer\.position_embeddings\.weight"):
        build_full_size(broken)
