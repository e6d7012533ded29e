"""Strict loading of MagpieTTS weights (spec §9 "config or weights ≠ expected inventory: fail at
load, before allocating state"; §7.0 items 1, 8, 12).

- `prepare_state_dict`: drops NeMo's ``*.self_attention.causal_mask`` buffers (rebuilt on the
  fly here), after checking each is the lower-triangular ones matrix NeMo registers.
- `load_model`: builds `MagpieModel` on ``meta``, checks every key and shape
  (`cosyvoice3.loader.check_state_dict`: missing, unexpected and mis-shaped keys each named),
  checks the baked-context buffers' values, then assigns the tensors cast to ``dtype``.
- `read_manifest` / `build_full_size`: a full-size model from ``full_manifest.json`` built on
  ``meta`` (no weights allocated), every manifest key and shape checked, parameter counts per
  module compared with the manifest's.

Not here yet: reading a ``.nemo`` archive (``model_config.yaml`` + ``model_weights.ckpt``).
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
from voxflow.models.magpie.config import InferenceConfig, MagpieConfig, TransformerConfig
from voxflow.models.magpie.model import MagpieModel

__all__ = ["StateDictError", "load_model", "prepare_state_dict", "read_manifest",
           "build_full_size", "full_size_config"]

CAUSAL_MASK_SUFFIX = ".self_attention.causal_mask"
_BAKED_BUFFERS = ("_baked_embedding_T", "_baked_embedding_D", "baked_context_embedding_len")


def build_model(config: MagpieConfig, device: torch.device | str = "meta") -> MagpieModel:
    """An uninitialised `MagpieModel` on ``device`` (``meta``: nothing allocated)."""
    with torch.device(device):
        return MagpieModel(config)


def prepare_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``state_dict`` without its ``causal_mask`` buffers. Raises `StateDictError` if one is not
    (1, 1, n, n) lower-triangular ones (a meta tensor is checked by shape only)."""
    out: dict[str, Tensor] = {}
    problems: list[str] = []
    for key, value in state_dict.items():
        if not key.endswith(CAUSAL_MASK_SUFFIX):
            out[key] = value
            continue
        n = value.shape[-1]
        if value.dim() != 4 or tuple(value.shape[:3]) != (1, 1, n):
            problems.append(f"causal mask {key!r} has shape {list(value.shape)}")
        elif not value.is_meta and not torch.equal(value[0, 0].float(), torch.ones(n, n).tril()):
            problems.append(f"causal mask {key!r} is not lower-triangular ones")
    if problems:
        raise StateDictError("MagpieTTS state dict", problems)
    return out


def _baked_problems(state: Mapping[str, Tensor], config: MagpieConfig) -> list[str]:
    """Value checks of the baked-context buffers (NeMo crashes on a speaker shorter than T)."""
    problems: list[str] = []
    want = {"_baked_embedding_T": config.baked_frames, "_baked_embedding_D": config.d_model}
    for key, value in want.items():
        got = state[key]
        if not got.is_meta and int(got) != value:
            problems.append(f"{key} is {int(got)}, config says {value}")
    lens = state["baked_context_embedding_len"]
    if not lens.is_meta and bool((lens != config.baked_frames).any()):
        problems.append(f"baked_context_embedding_len {lens.tolist()}: every speaker must have "
                        f"{config.baked_frames} frames")
    return problems


def load_model(
    state_dict: Mapping[str, Tensor],
    config: MagpieConfig,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> MagpieModel:
    """A ready model (eval mode, no gradients) from a NeMo ``state_dict()`` (causal masks optional).

    Float tensors are cast to ``dtype`` (the fixtures' float16 values upcast exactly) and moved
    to ``device``; the int64 buffers keep their dtype. Raises `StateDictError` naming every
    missing, unexpected or mis-shaped key and any baked-context buffer that disagrees with
    ``config``, before anything is allocated.
    """
    state = prepare_state_dict(state_dict)
    module = build_model(config, "meta")
    check_state_dict(state, module.state_dict(), what="MagpieTTS")
    problems = _baked_problems(state, config)
    if problems:
        raise StateDictError("MagpieTTS", problems)
    ready = {k: v.to(device=device, dtype=dtype) if v.dtype.is_floating_point
             else v.to(device=device) for k, v in state.items()}
    module.load_state_dict(ready, strict=True, assign=True)
    module.requires_grad_(False)
    return module.eval()


@dataclass(frozen=True)
class ManifestEntry:
    """One model of ``full_manifest.json``: its ``settings`` (S, LT sizes, text vocab, baked
    speakers and T), ``shapes`` key → (shape, dtype name) in NeMo state-dict order (causal masks
    included) and the stated ``counts``."""

    revision: str
    settings: dict[str, int]
    shapes: dict[str, tuple[tuple[int, ...], str]]
    counts: dict[str, Any]
    n_causal_masks: int
    special_ids: dict[str, int]


def read_manifest(path: str | Path) -> list[ManifestEntry]:
    """The entries of ``full_manifest.json`` (the file, or a directory holding it). Raises
    KeyError on a missing field."""
    path = Path(path)
    if path.is_dir():
        path = path / "full_manifest.json"
    with reading(path, "MagpieTTS manifest"):
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return [
        ManifestEntry(
            revision=entry["revision"],
            settings={k: int(v) for k, v in entry["settings"].items()},
            shapes={k["key"]: (tuple(k["shape"]), k["dtype"]) for k in entry["keys"]},
            counts=entry["counts"],
            n_causal_masks=int(entry["n_causal_mask_buffers"]),
            special_ids={k: int(v) for k, v in entry["special_ids"].items()},
        )
        for entry in doc["revisions"]
    ]


def full_size_config(settings: Mapping[str, int], *, num_codebooks: int = 8,
                     codebook_size: int = 2016) -> MagpieConfig:
    """The published architecture (NeMo ``examples/tts/conf/magpietts/magpietts.yaml`` at
    ``a80c059``: d_model 768, encoder 6 layers k3 causal, decoder 12 layers k1 with 1 × 128
    cross-attention, 12 heads, d_ffn 3072, 2048 positions; spec §7.2) with a manifest entry's
    checkpoint-only settings. Real checkpoints carry their own cfg: use
    `MagpieConfig.from_nemo` for those."""
    encoder = TransformerConfig(
        n_layers=6, d_model=768, d_ffn=3072, sa_n_heads=12, kernel_size=3, is_causal=True,
        apply_norm_out=True, max_length_causal_mask=2048, use_learnable_pos_emb=True)
    decoder = TransformerConfig(
        n_layers=12, d_model=768, d_ffn=3072, sa_n_heads=12, kernel_size=1, is_causal=True,
        apply_norm_out=True, max_length_causal_mask=2048, use_learnable_pos_emb=True,
        has_xattn=True, xa_n_heads=1, xa_d_head=128, xa_d_memory=768)
    return MagpieConfig(
        d_model=768, num_codebooks=num_codebooks, codebook_size=codebook_size,
        frame_stacking=settings["frame_stacking_factor"],
        text_vocab_size=settings["text_vocab"], baked_speakers=settings["baked_speakers"],
        baked_frames=settings["baked_T"], encoder=encoder, decoder=decoder,
        lt_layers=settings["local_transformer_n_layers"],
        lt_heads=settings["local_transformer_n_heads"],
        lt_hidden=settings["local_transformer_hidden_dim"],
        inference=InferenceConfig())


def _module_counts(module: MagpieModel) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, param in module.named_parameters():
        top = name.split(".", 1)[0]
        counts[top] = counts.get(top, 0) + param.numel()
    return counts


def build_full_size(entry: ManifestEntry) -> MagpieModel:
    """Build ``entry``'s model on ``meta`` and load the manifest's keys strictly (meta tensors
    of the listed shapes and dtypes): every key and shape must match, the causal masks must
    number ``n_causal_mask_buffers``, and the parameter total and per-module counts must equal
    the manifest's. Returns the meta model; raises `StateDictError` listing every difference."""
    config = full_size_config(entry.settings)
    meta = {key: torch.empty(shape, dtype=getattr(torch, dtype), device="meta")
            for key, (shape, dtype) in entry.shapes.items()}
    module = load_model(meta, config, dtype=torch.float32, device="meta")
    problems: list[str] = []
    masks = sum(1 for key in entry.shapes if key.endswith(CAUSAL_MASK_SUFFIX))
    if masks != entry.n_causal_masks:
        problems.append(f"{masks} causal masks, manifest says {entry.n_causal_masks}")
    total = sum(p.numel() for p in module.parameters())
    if total != entry.counts["params_total"]:
        problems.append(f"{total:,} parameters, manifest says {entry.counts['params_total']:,}")
    got = _module_counts(module)
    for name, want in entry.counts["by_module"].items():
        if got.get(name, 0) != want:
            problems.append(f"module {name}: {got.get(name, 0):,} parameters, manifest {want:,}")
    ids = {"audio_bos": config.audio_bos, "audio_eos": config.audio_eos,
           "num_all_tokens_per_codebook": config.tokens_per_codebook,
           "text_bos": config.text_bos, "text_eos": config.text_eos}
    problems += [f"{k} {v}, manifest says {entry.special_ids[k]}"
                 for k, v in ids.items() if entry.special_ids.get(k) != v]
    if problems:
        raise StateDictError(f"full-size MagpieTTS ({entry.revision})", problems)
    return module
