"""Choosing codes from logits (NeMo ``sample_codes_from_logits``, ``clear_forbidden_logits``,
``LocalTransformerHelper.sample_autoregressive`` and ``detect_eos``; spec §7.4, §7.0 items 6-7).

Per codebook slot of V = codebook_size + 8 logits: the specials codebook_size + {0, 2..7} are
always cleared to −inf, and EOS (codebook_size + 1) too while it is forbidden. Then either the
argmax (greedy: the same codes on every run) or top-k filtering (ties with the k-th value kept),
softmax(logits / temperature) and one multinomial draw from a caller-seeded generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from voxflow.models.magpie.config import SPECIAL_TOKENS


def cfg_combine(cond: Tensor, uncond: Tensor, scale: float) -> Tensor:
    """Classifier-free guidance, (1 − s)·uncond + s·cond (NeMo ``infer_batch``; 2.5·c − 1.5·u
    at s = 2.5). Any matching shapes."""
    return (1 - scale) * uncond + scale * cond


def clear_forbidden(logits: Tensor, codebook_size: int, forbid_eos: bool) -> Tensor:
    """A copy of logits (..., V) with the always-forbidden specials (and EOS when
    ``forbid_eos``) set to −inf."""
    out = logits.clone()
    ids = [codebook_size + k for k in range(SPECIAL_TOKENS) if k != 1 or forbid_eos]
    out[..., ids] = float("-inf")
    return out


@dataclass(frozen=True)
class Chooser:
    """How codes are picked from cleared logits (B, V) → (B,) int64.

    ``greedy``: argmax (the first of tied maxima). Otherwise keep the logits ≥ the
    ``topk``-th largest, sample from softmax(logits / ``temperature``) with ``generator``
    (seeded by the caller, so reruns repeat). Raises `ValueError` if not greedy and
    ``temperature`` ≤ 0.
    """

    greedy: bool = True
    topk: int = 80
    temperature: float = 0.7
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if not self.greedy and self.temperature <= 0:
            raise ValueError("sampling needs temperature > 0 (use greedy)")

    def __call__(self, logits: Tensor) -> Tensor:
        if self.greedy:
            return logits.argmax(dim=-1)
        k = min(self.topk, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1)[0][:, -1:]
        kept = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(kept / self.temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)


def argmax_codes(logits: Tensor, num_codebooks: int, frame_stacking: int, codebook_size: int,
                 forbid_eos: bool) -> Tensor:
    """NeMo's EOS-check codes: logits (B, C·S·V) CFG-combined ``final_proj`` logits at the last
    position → (B, C, S) int64, each slot's argmax after `clear_forbidden`."""
    b = logits.shape[0]
    v = codebook_size + SPECIAL_TOKENS
    cleared = clear_forbidden(logits.view(b, frame_stacking, num_codebooks, v), codebook_size,
                              forbid_eos)
    return cleared.argmax(dim=-1).transpose(1, 2)


def parallel_codes(logits: Tensor, num_codebooks: int, frame_stacking: int,
                   codebook_size: int, forbid_eos: bool, chooser: Chooser) -> Tensor:
    """Codes without the local transformer (NeMo ``sample_codes_from_logits``): every slot of
    the CFG-combined ``final_proj`` logits (B, C·S·V) chosen independently → (B, C, S) int64.
    Greedy, this equals `argmax_codes`."""
    b = logits.shape[0]
    v = codebook_size + SPECIAL_TOKENS
    cleared = clear_forbidden(logits.view(b, frame_stacking * num_codebooks, v), codebook_size,
                              forbid_eos)
    picked = [chooser(cleared[:, k]) for k in range(frame_stacking * num_codebooks)]
    return torch.stack(picked, dim=1).view(b, frame_stacking, num_codebooks).transpose(1, 2)


def eos_frame(codes: Tensor, eos: int, method: str) -> int | None:
    """The first frame of a stack that ends the item: codes (C, S) → frame index or None.
    ``method``'s suffix: ``any`` (any codebook is EOS), ``all`` (every codebook), ``zero_cb``
    (codebook 0) (NeMo ``find_eos_frame_index``)."""
    hit = codes == eos
    if method.endswith("zero_cb"):
        per_frame = hit[:1].any(dim=0)
    elif method.endswith("all"):
        per_frame = hit.all(dim=0)
    else:
        per_frame = hit.any(dim=0)
    found = per_frame.nonzero()
    return int(found[0, 0]) if found.numel() else None


def end_frame(sampled: Tensor, argmax: Tensor, eos: int, method: str) -> int | None:
    """NeMo ``detect_eos``: the earlier EOS frame of the argmax codes and (for the
    ``argmax_or_multinomial_*`` methods) the sampled codes; each (C, S). None if neither."""
    found = [eos_frame(argmax, eos, method)]
    if method.startswith("argmax_or_multinomial"):
        found.append(eos_frame(sampled, eos, method))
    hits = [f for f in found if f is not None]
    return min(hits) if hits else None
