"""The autoregressive local transformer (LT): one decoder step's C·S codes, slot by slot
(NeMo ``LocalTransformerHelper.sample_autoregressive`` / ``compute_logits``; spec §7.4 item 4,
§7.0 items 2-3).

Sequence: [in_proj(h), in_proj(emb_0(tok_0)), …], where h is the decoder's last hidden state
and emb_k is ``audio_embeddings[k]``; slot k = c + C·i (frame 0's codebooks first). Head k reads
the LT output at position k. With CFG the rows are [cond; uncond]: head logits are combined,
the chosen token is copied into the unconditional row. The LT keeps a KV cache inside one step
(reset every step); its C·S-th token is never fed back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from voxflow.models.magpie.model import MagpieModel
from voxflow.models.magpie.sampling import Chooser, cfg_combine, clear_forbidden


@dataclass
class LTStep:
    """One step's LT result: ``codes`` (B, C, S) int64 and, when asked, ``raw_logits``
    (R, C·S, V): every head's logits before CFG, R = 2B with CFG (rows [cond; uncond])."""

    codes: Tensor
    raw_logits: Tensor | None = None


def sample_codes(
    model: MagpieModel,
    hidden: Tensor,
    *,
    use_cfg: bool,
    cfg_scale: float,
    forbid_eos: bool,
    chooser: Chooser,
    keep_logits: bool = False,
) -> LTStep:
    """Sample one frame stack: hidden (R, D) last decoder states (R = 2B with CFG, [cond;
    uncond]) → `LTStep`. ``forbid_eos`` clears EOS (while step·S < min frames)."""
    cfg = model.config
    lt = model.local_transformer
    rows = hidden.shape[0]
    b = rows // 2 if use_cfg else rows
    cache = lt.new_cache()
    ones = torch.ones(rows, 1, dtype=torch.bool, device=hidden.device)
    step_in = model.local_transformer_in_projection(hidden.unsqueeze(1))
    picked: list[Tensor] = []
    raw: list[Tensor] = []
    for k in range(cfg.slots):
        out = lt(step_in, ones, cache=cache).output[:, -1, :]
        logits = model.local_transformer_out_projections[k](out)
        if keep_logits:
            raw.append(logits)
        scores = cfg_combine(logits[:b], logits[b:], cfg_scale) if use_cfg else logits
        token = chooser(clear_forbidden(scores, cfg.codebook_size, forbid_eos))
        picked.append(token)
        if k + 1 < cfg.slots:
            fed = torch.cat([token, token]) if use_cfg else token
            emb = model.audio_embeddings[k](fed).unsqueeze(1)
            step_in = model.local_transformer_in_projection(emb)
    codes = torch.stack(picked, dim=1).view(b, cfg.frame_stacking, cfg.num_codebooks)
    return LTStep(codes=codes.transpose(1, 2),
                  raw_logits=torch.stack(raw, dim=1) if keep_logits else None)


def teacher_forced_logits(model: MagpieModel, hidden: Tensor, codes: Tensor) -> Tensor:
    """NeMo's training path (``compute_logits``, autoregressive layout): hidden (B, D), codes
    (B, C, S) → (B, C·S·V) logits, head k reading position k of [h, emb_0(c_0), …, emb_{CS−1}]
    with no cache and no CFG."""
    cfg = model.config
    b = hidden.shape[0]
    rows = [hidden]
    for i in range(cfg.frame_stacking):
        for c in range(cfg.num_codebooks):
            rows.append(model.audio_embeddings[c + i * cfg.num_codebooks](codes[:, c, i]))
    seq = model.local_transformer_in_projection(torch.stack(rows, dim=1))
    mask = torch.ones(b, seq.shape[1], dtype=torch.bool, device=hidden.device)
    out = model.local_transformer(seq, mask).output
    heads = [model.local_transformer_out_projections[k](out[:, k]) for k in range(cfg.slots)]
    return torch.cat(heads, dim=1)
