"""One LM decode step for several segments at once, each with its own KV cache (spec §5, §9.2).

Segments in a running batch have caches of different lengths T_i. A step feeds each one token
(its last speech token's embedding) at its own position T_i: every layer projects the B tokens
together, rotates each row's q and k at its own position, appends the row's k and v to its own
`KVCache`, pads the B caches on the right to the longest and attends with a key mask (padded
keys never reach a row). Attention ignores key order, so a row's keys padded on the right give
its unbatched result up to float rounding (tested within 1e-5 of `LMDecoder`).

Shapes: B rows, D hidden, H query heads, Hk kv heads, Dh head dim, V = S + 200, T key length.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from voxflow.models.cosyvoice3.lm import (
    CosyVoice3LM,
    KVCache,
    Qwen2Attention,
    Qwen2DecoderLayer,
    apply_rope,
)


def _padded_kv(
    caches: Sequence[KVCache], layer: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Keys and values of `layer` over all rows, right-padded: ([B, Hk, T, Dh] twice, and the
    key mask [B, 1, 1, T] bool, True on a row's real keys)."""
    lengths = [int(c.keys[layer].shape[2]) for c in caches]
    longest = max(lengths)
    keys = torch.cat([F.pad(c.keys[layer], (0, 0, 0, longest - n)) for c, n in
                      zip(caches, lengths, strict=True)])
    values = torch.cat([F.pad(c.values[layer], (0, 0, 0, longest - n)) for c, n in
                        zip(caches, lengths, strict=True)])
    positions = torch.arange(longest, device=keys.device)
    mask = positions[None, :] < torch.tensor(lengths, device=keys.device)[:, None]  # [B, T]
    return keys, values, mask[:, None, None, :]


def _attention(attn: Qwen2Attention, x: Tensor, cos: Tensor, sin: Tensor, layer: int,
               caches: Sequence[KVCache]) -> Tensor:
    """x [B, 1, D] at each row's own position (cos/sin [B, 1, 1, Dh]) -> [B, 1, D]."""
    b = x.shape[0]
    q = attn.q_proj(x).view(b, 1, attn.num_heads, attn.head_dim).transpose(1, 2)  # [B, H, 1, Dh]
    k = attn.k_proj(x).view(b, 1, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(b, 1, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    for i, cache in enumerate(caches):
        cache.update(layer, k[i : i + 1], v[i : i + 1])  # each row's own cache grows by one
    keys, values, mask = _padded_kv(caches, layer)
    rep = attn.num_heads // attn.num_kv_heads
    if rep > 1:
        keys = keys.repeat_interleave(rep, dim=1)  # [B, H, T, Dh]
        values = values.repeat_interleave(rep, dim=1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, H, 1, Dh]
    out = out.transpose(1, 2).reshape(b, 1, attn.num_heads * attn.head_dim)
    result: Tensor = attn.o_proj(out)
    return result


def _layer(block: Qwen2DecoderLayer, x: Tensor, cos: Tensor, sin: Tensor,
           caches: Sequence[KVCache]) -> Tensor:
    x = x + _attention(block.self_attn, block.input_layernorm(x), cos, sin, block.index, caches)
    out: Tensor = x + block.mlp(block.post_attention_layernorm(x))
    return out


@torch.inference_mode()
def decode_step(
    lm: CosyVoice3LM, inputs: Tensor, caches: Sequence[KVCache]
) -> tuple[Tensor, Tensor]:
    """One decode step of B segments: inputs [B, 1, D] (each row's next input embedding), one
    prefilled `KVCache` per row (each grows by one position) -> (logits [B, V], hidden [B, D]).

    Raises:
        ValueError: the row count differs from the caches', or a cache is empty (prefill a
            segment with `CosyVoice3LM.forward` first).
    """
    if inputs.shape[0] != len(caches) or inputs.shape[1] != 1:
        raise ValueError(f"inputs {list(inputs.shape)} must be [B, 1, D] for {len(caches)} "
                         "caches")
    if any(c.length == 0 for c in caches):
        raise ValueError("every cache must be prefilled before a batched decode step")
    backbone = lm.llm.model.model
    positions = torch.tensor([c.length for c in caches], device=inputs.device)
    cos, sin = backbone.rotary_emb(positions, inputs.dtype)  # [B, Dh] each
    cos, sin = cos[:, None, None, :], sin[:, None, None, :]  # [B, 1, 1, Dh]: per-row position
    h = inputs
    for block in backbone.layers:
        assert isinstance(block, Qwen2DecoderLayer)
        h = _layer(block, h, cos, sin, caches)
    hidden = backbone.norm(h)[:, -1]  # [B, D]
    return lm.llm_decoder(hidden), hidden


def _chunk_attention(attn: Qwen2Attention, x: Tensor, cos: Tensor, sin: Tensor, layer: int,
                     caches: Sequence[KVCache], lengths: Sequence[int]) -> Tensor:
    """x [B, N, D] (row i's first lengths[i] positions real, the rest padding) at each row's
    own positions (cos/sin [B, 1, N, Dh]) -> [B, N, D]; causal within each row's chunk."""
    b, n, _ = x.shape
    q = attn.q_proj(x).view(b, n, attn.num_heads, attn.head_dim).transpose(1, 2)  # [B, H, N, Dh]
    k = attn.k_proj(x).view(b, n, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(b, n, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    past = [c.length for c in caches]
    for i, (cache, m) in enumerate(zip(caches, lengths, strict=True)):
        cache.update(layer, k[i : i + 1, :, :m], v[i : i + 1, :, :m])  # real positions only
    keys, values, real = _padded_kv(caches, layer)  # real [B, 1, 1, T]
    t = keys.shape[2]
    kpos = torch.arange(t, device=x.device)
    qpos = torch.tensor(past, device=x.device)[:, None] + torch.arange(n, device=x.device)
    mask = real & (kpos[None, None, None, :] <= qpos[:, None, :, None])  # [B, 1, N, T]
    rep = attn.num_heads // attn.num_kv_heads
    if rep > 1:
        keys = keys.repeat_interleave(rep, dim=1)
        values = values.repeat_interleave(rep, dim=1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, H, N, Dh]
    out = out.transpose(1, 2).reshape(b, n, attn.num_heads * attn.head_dim)
    result: Tensor = attn.o_proj(out)
    return result


@torch.inference_mode()
def forward_rows(
    lm: CosyVoice3LM, inputs: Sequence[Tensor], caches: Sequence[KVCache]
) -> tuple[Tensor, Tensor]:
    """One batched forward of B rows that each feed their own chunk after their own KV cache:
    a fed (bistream) call of several positions, a one-token decode step, a first call on an
    empty cache. inputs[i] is [n_i, D] (n_i >= 1); row i sits at positions L_i .. L_i + n_i - 1
    (L_i = caches[i].length) with a causal mask inside its chunk; each cache grows by n_i.
    Chunks are right-padded to the longest; padded positions never reach a cache or a real
    row's keys. Returns (logits [B, V] at each row's last real position, hidden [B, D]); equal
    to `CosyVoice3LM.forward` row by row up to float rounding.

    Raises:
        ValueError: the row count differs from the caches', or a chunk is empty.
    """
    if len(inputs) != len(caches) or not inputs:
        raise ValueError(f"{len(inputs)} input chunks for {len(caches)} caches")
    lengths = [int(x.shape[0]) for x in inputs]
    if min(lengths) < 1:
        raise ValueError("every row must feed at least one position")
    n = max(lengths)
    x = torch.stack([F.pad(c, (0, 0, 0, n - m)) for c, m in zip(inputs, lengths, strict=True)])
    backbone = lm.llm.model.model
    positions = (torch.tensor([c.length for c in caches], device=x.device)[:, None]
                 + torch.arange(n, device=x.device))  # [B, N]
    cos, sin = backbone.rotary_emb(positions.reshape(-1), x.dtype)
    cos = cos.view(len(inputs), 1, n, -1)
    sin = sin.view(len(inputs), 1, n, -1)
    h = x
    for block in backbone.layers:
        assert isinstance(block, Qwen2DecoderLayer)
        attn_in = block.input_layernorm(h)
        h = h + _chunk_attention(block.self_attn, attn_in, cos, sin, block.index, caches,
                                 lengths)
        h = h + block.mlp(block.post_attention_layernorm(h))
    last = torch.tensor([m - 1 for m in lengths], device=x.device)
    hidden = backbone.norm(h)[torch.arange(len(inputs), device=x.device), last]  # [B, D]
    return lm.llm_decoder(hidden), hidden
