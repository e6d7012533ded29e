"""Strict loading of NanoCodec decoder weights (spec §1 items 2 and 6, §5).

- `load_decoder`: a state dict in NeMo's module layout (311 tensors tiny, 387 full size) →
  a `NanoCodecDecoder` built on ``meta``, checked key by key (missing, unexpected and
  mis-shaped keys all named, cosyvoice3.loader.check_state_dict), assigned without a copy when
  dtype and device already match, then weight norm folded once in the target dtype.
- `split_checkpoint`: a ``.nemo`` ``model_weights.ckpt`` state dict → decoder keys (prefix
  ``audio_decoder.`` removed, legacy ``weight_g``/``weight_v`` renamed) and the FSQ buffers
  (``vector_quantizer.``), checked against the levels the decoder assumes; encoder and
  discriminator keys dropped.
- `read_manifest` / `check_full_size`: the full-size decoder from
  ``full_decoder_manifest.json`` on ``meta``, with the exact counts of spec §1 item 6.

A ``.nemo`` tar and its ``model_config.yaml`` are read by `voxflow.models.nemo_archive`
(`read_nemo`, then `nanocodec_config` and `split_checkpoint`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from voxflow.models.cosyvoice3.loader import StateDictError, check_state_dict
from voxflow.models.files import reading
from voxflow.models.nanocodec.config import DecoderConfig, cache_inventory
from voxflow.models.nanocodec.decoder import NanoCodecDecoder
from voxflow.models.nanocodec.fsq import BASES, LEVELS, NUM_GROUPS

__all__ = ["StateDictError", "load_decoder", "split_checkpoint", "check_full_size"]

DECODER_PREFIX = "audio_decoder."
QUANTIZER_PREFIX = "vector_quantizer."
SKIPPED_PREFIXES = ("audio_encoder.", "discriminator.")
_LEGACY = {"weight_g": "parametrizations.weight.original0",
           "weight_v": "parametrizations.weight.original1"}
# spec §1 item 6 / §5: full-size decoder (tensors as stored, parameters after folding, caches,
# state values per stream)
FULL_SIZE_COUNTS = {"tensors": 387, "params_folded": 31_564_085, "caches": 97,
                    "state_floats": 186_816}
TINY_TENSORS = 311


def build_decoder(config: DecoderConfig, device: torch.device | str = "meta") -> NanoCodecDecoder:
    """An unfolded decoder whose tensors are uninitialised on ``device`` (``meta``: no memory)."""
    with torch.device(device):
        return NanoCodecDecoder(config)


def load_decoder(
    state_dict: Mapping[str, Tensor],
    config: DecoderConfig,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    prepack: bool = True,
) -> NanoCodecDecoder:
    """A ready decoder (eval, weight norm folded in ``dtype``) from an unfolded state dict in
    NeMo's module layout (no ``audio_decoder.`` prefix; `split_checkpoint` strips it). With
    ``prepack`` (float32 on the CPU only) the convs' weights are also reordered once for oneDNN.

    Each tensor is cast to ``dtype`` and moved to ``device`` before folding, so a float64
    decoder folds g and v in float64 (spec §5). Raises `StateDictError` naming every missing,
    unexpected or mis-shaped key.
    """
    module = build_decoder(config, "meta")
    check_state_dict(state_dict, module.state_dict(), what="NanoCodec decoder")
    ready = {key: value.to(device=device, dtype=dtype) for key, value in state_dict.items()}
    module.load_state_dict(ready, strict=True, assign=True)
    module.fold_weight_norm()
    if prepack:
        module.prepack()
    return module.eval()


def split_checkpoint(
    state_dict: Mapping[str, Tensor],
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(decoder state, quantizer buffers) of a NanoCodec checkpoint, prefixes removed.

    Raises `StateDictError` for a key under no known prefix, two keys mapping to one name, or
    FSQ buffers other than 8 groups of ``dim_base_index`` [1, 8, 56, 336] and ``num_levels``
    [8, 7, 6, 6], each (1, 4, 1) (spec §3: checked at load).
    """
    decoder: dict[str, Tensor] = {}
    quantizer: dict[str, Tensor] = {}
    problems: list[str] = []
    for key, value in state_dict.items():
        if key.startswith(SKIPPED_PREFIXES):
            continue
        if key.startswith(QUANTIZER_PREFIX):
            quantizer[key.removeprefix(QUANTIZER_PREFIX)] = value
            continue
        if not key.startswith(DECODER_PREFIX):
            problems.append(f"unexpected key {key!r} (no known prefix)")
            continue
        owner, _, leaf = key.removeprefix(DECODER_PREFIX).rpartition(".")
        name = f"{owner}.{_LEGACY[leaf]}" if leaf in _LEGACY else f"{owner}.{leaf}"
        if name in decoder:
            problems.append(f"key {key!r} clashes with another key as {name!r}")
        decoder[name] = value
    problems += quantizer_problems(quantizer)
    if problems:
        raise StateDictError("NanoCodec checkpoint", problems)
    return decoder, quantizer


def quantizer_problems(buffers: Mapping[str, Tensor]) -> list[str]:
    """What differs between ``buffers`` and the 8 FSQ groups the decoder assumes ([] if none)."""
    want = {}
    for g in range(NUM_GROUPS):
        want[f"fsqs.{g}.dim_base_index"] = BASES
        want[f"fsqs.{g}.num_levels"] = LEVELS
    problems = [f"missing quantizer buffer {k!r}" for k in want if k not in buffers]
    problems += [f"unexpected quantizer buffer {k!r}" for k in buffers if k not in want]
    for key, values in want.items():
        got = buffers.get(key)
        if got is not None and (got.shape != (1, 4, 1) or tuple(got.flatten().tolist()) != values):
            problems.append(f"quantizer buffer {key!r} is {got.flatten().tolist()} "
                            f"{list(got.shape)}, expected {list(values)} [1, 4, 1]")
    return problems


@dataclass(frozen=True)
class Manifest:
    """``full_decoder_manifest.json``: the decoder config, its keys in state-dict order
    (module-level key → shape), the checkpoint keys, the stated counts and FSQ buffers."""

    config: DecoderConfig
    shapes: dict[str, tuple[int, ...]]
    checkpoint_keys: tuple[str, ...]
    counts: dict[str, int]
    quantizer: dict[str, Tensor]


def read_manifest(path: str | Path) -> Manifest:
    """Read the manifest (the JSON file, or a directory holding it). Raises KeyError on a
    missing field, ValueError on a dtype other than float32 / int32."""
    path = Path(path)
    if path.is_dir():
        path = path / "full_decoder_manifest.json"
    with reading(path, "NanoCodec manifest"):
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    bad = [k["key"] for k in doc["decoder_keys"] if k["dtype"] != "float32"]
    if bad:
        raise ValueError(f"manifest decoder keys not float32: {bad}")
    quantizer = {b["key"]: torch.tensor(b["values"], dtype=torch.int32).reshape(b["shape"])
                 for b in doc["quantizer_buffers"]}
    return Manifest(
        config=DecoderConfig.from_dict(doc["decoder_config"]),
        shapes={k["key"]: tuple(k["shape"]) for k in doc["decoder_keys"]},
        checkpoint_keys=tuple(k["checkpoint_key"] for k in doc["decoder_keys"]),
        counts={k: int(v) for k, v in doc["counts"].items()},
        quantizer=quantizer,
    )


def check_full_size(manifest: Manifest) -> NanoCodecDecoder:
    """Build the manifest's decoder on ``meta``, load the manifest's keys strictly (meta
    tensors), fold it there, and check spec §1 item 6: 387 tensors, every checkpoint key under
    ``audio_decoder.``, 31,564,085 parameters after folding, 97 caches of 186,816 values per
    stream, FSQ buffers as expected. Returns the folded meta decoder.

    Raises `StateDictError` listing every key problem or count that differs.
    """
    meta = {k: torch.empty(s, device="meta") for k, s in manifest.shapes.items()}
    module = load_decoder(meta, manifest.config, device="meta", prepack=False)
    inventory = cache_inventory(manifest.config)
    got = {
        "tensors": len(manifest.shapes),
        "params_folded": sum(p.numel() for p in module.parameters()),
        "caches": len(inventory),
        "state_floats": sum(s.numel for s in inventory),
    }
    problems = [f"{name} {got[name]:,}, expected {want:,}"
                for name, want in FULL_SIZE_COUNTS.items() if got[name] != want]
    if manifest.counts.get("params_after_folding_weight_norm") != got["params_folded"]:
        problems.append("the manifest's own folded parameter count differs")
    problems += [f"checkpoint key {k!r} lacks {DECODER_PREFIX!r}"
                 for k in manifest.checkpoint_keys if not k.startswith(DECODER_PREFIX)]
    problems += quantizer_problems(manifest.quantizer)
    if problems:
        raise StateDictError("full-size NanoCodec decoder", problems)
    return module


def random_state_dict(
    config: DecoderConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32
) -> dict[str, Tensor]:
    """Random unfolded weights in NeMo's layout (timing and full-size numerics only; the audio
    is noise): v ~ N(0, 1), g ~ U(0.5, 1) (rows of unit-ish norm keep activations bounded),
    bias ~ N(0, 0.01²), α ~ U(0.3, 2)."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Tensor] = {}
    for key, ref in build_decoder(config, "meta").state_dict().items():
        shape = ref.shape
        if key.endswith("original0"):
            value = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.5 + 0.5
        elif key.endswith("original1"):
            value = torch.randn(shape, generator=gen, dtype=torch.float64)
        elif key.endswith("bias"):
            value = torch.randn(shape, generator=gen, dtype=torch.float64) * 0.01
        else:  # snake alpha
            value = torch.rand(shape, generator=gen, dtype=torch.float64) * 1.7 + 0.3
        out[key] = value.to(dtype)
    return out
