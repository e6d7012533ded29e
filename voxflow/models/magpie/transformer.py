"""The MagpieTTS transformer stack (NeMo ``transformer_2501.py`` + ``ffn_modules.py``), with an
optional per-request KV cache that NeMo's decoder path lacks (spec §7.5).

Pre-norm layers: LayerNorm without bias (eps 1e-5) → causal self-attention (fused Q|K|V) →
optional cross-attention over a LayerNorm-ed memory (fused K|V, own head count and width) →
conv FFN (GELU-tanh between two bias-free ``Conv1d``, causal left padding) ; learned absolute
positions added once at the input, optional final ``norm_out`` (spec §7.2). Module and
parameter names equal NeMo's, so a NeMo state dict loads as is (minus ``causal_mask``
buffers, which are built on the fly here).

Masks follow NeMo exactly: a padded *query* row of self-attention is all ``-inf`` and its
probabilities are then zeroed (keys are not masked: causality keeps padding at the end
unseen), masked memory keys get probability 0, and every layer multiplies its input and output
by the row mask.

Shapes: B batch rows, T new positions, D ``d_model``, H heads, Tm memory positions. Float
tensors are in the module's dtype (float32 or float64); masks are bool (True = valid).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxflow.models.magpie.config import TransformerConfig


@dataclass
class LayerCache:
    """One layer's cached tensors: self-attention K and V (B, T_past, H, dh) in NeMo's layout,
    and the cross-attention K and V of the memory (computed once, after ``norm_xattn_memory``)."""

    self_k: Tensor | None = None
    self_v: Tensor | None = None
    cross_k: Tensor | None = None
    cross_v: Tensor | None = None


@dataclass
class KVCache:
    """A transformer's state between calls: per-layer `LayerCache` and the number of positions
    already processed (the next call's first position index)."""

    layers: list[LayerCache]
    length: int = 0

    @classmethod
    def empty(cls, n_layers: int) -> KVCache:
        """A cache with nothing processed yet."""
        return cls(layers=[LayerCache() for _ in range(n_layers)])


@dataclass
class TransformerOutput:
    """``output`` (B, T, D) after ``norm_out``; ``layer_outputs`` each layer's (B, T, D) output;
    ``xattn_probs`` each layer's cross-attention probabilities (B, H, T, Tm) (empty without
    cross-attention)."""

    output: Tensor
    layer_outputs: list[Tensor] = field(default_factory=list)
    xattn_probs: list[Tensor] = field(default_factory=list)


class CausalConv(nn.Module):
    """NeMo ``ConvolutionLayer`` without bias: input and output multiplied by the row mask,
    ``kernel_size − 1`` zeros padded on the left when causal (else symmetric padding)."""

    def __init__(self, d_in: int, d_out: int, kernel_size: int, causal: bool) -> None:
        super().__init__()
        self.left = kernel_size - 1 if causal else 0
        padding = 0 if causal else (kernel_size - 1) // 2
        self.conv = nn.Conv1d(d_in, d_out, kernel_size, padding=padding, bias=False)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, D_in, T), mask (B, T) in x's dtype → (B, D_out, T)."""
        x = x * mask.unsqueeze(1)
        if self.left:
            x = F.pad(x, (self.left, 0))
        return self.conv(x) * mask.unsqueeze(1)


class ConvFF(nn.Module):
    """NeMo ``PositionwiseConvFF``: proj (D → d_ffn), GELU-tanh, o_net (d_ffn → D)."""

    def __init__(self, d_model: int, d_ffn: int, kernel_size: int, causal: bool) -> None:
        super().__init__()
        self.proj = CausalConv(d_model, d_ffn, kernel_size, causal)
        self.o_net = CausalConv(d_ffn, d_model, kernel_size, causal)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, T, D), mask (B, T) in x's dtype → (B, T, D)."""
        h = F.gelu(self.proj(x.transpose(1, 2), mask), approximate="tanh")
        return self.o_net(h, mask).transpose(1, 2)


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float, fill: Tensor | None,
            causal_offset: int | None, prior: Tensor | None,
            zero: Tensor | None) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention as NeMo ``Attention.attn_naive`` computes it (eval mode).

    q (B, Tq, H, dh), k and v (B, Tk, H, dh). ``fill``: broadcastable bool, True where the
    score is set to −inf; ``causal_offset``: query i may see keys ≤ offset + i; ``prior``
    (B, 1, Tk): probabilities multiplied by (prior + float tiny) and renormalised; ``zero``:
    broadcastable bool, True where the probability is set to 0 afterwards.
    Returns (y (B, Tq, H·dh), probabilities (B, H, Tq, Tk)).
    """
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    b, _, tq, _ = q.shape
    score = torch.matmul(q, k.transpose(2, 3)) * scale
    if fill is not None:
        score.masked_fill_(fill, float("-inf"))
    if causal_offset is not None:
        tk = k.shape[2]
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(causal_offset)
        score.masked_fill_(~allowed, float("-inf"))
    prob = F.softmax(score, dim=-1)
    if prior is not None:
        weight = prior[:, None] + torch.finfo(prior.dtype).tiny
        prob = prob * weight
        prob = prob / prob.sum(dim=-1, keepdim=True)
    if zero is not None:
        prob = prob.masked_fill(zero, 0.0)
    y = torch.matmul(prob, v).transpose(1, 2).contiguous().view(b, tq, -1)
    return y, prob


class SelfAttention(nn.Module):
    """Causal (or not) multi-head self-attention, fused ``qkv_net`` (Q|K|V rows), ``o_net``."""

    def __init__(self, d_model: int, n_heads: int, causal: bool) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.scale = self.d_head ** -0.5
        self.causal = causal
        self.qkv_net = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o_net = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor, mask: Tensor, cache: LayerCache | None) -> Tensor:
        """x (B, T, D) normed input of the new positions, mask (B, T) bool; with ``cache`` the
        keys and values of earlier positions are prepended and the new ones stored."""
        b, t, _ = x.shape
        qkv = self.qkv_net(x).reshape(b, t, 3, self.n_heads, self.d_head)
        q, k, v = (part.squeeze(2) for part in qkv.chunk(3, dim=2))
        offset = 0
        if cache is not None:
            if cache.self_k is not None and cache.self_v is not None:
                offset = cache.self_k.shape[1]
                k = torch.cat([cache.self_k, k], dim=1)
                v = torch.cat([cache.self_v, v], dim=1)
            cache.self_k, cache.self_v = k, v
        rows = ~mask[:, None, :, None]
        y, _ = _attend(q, k, v, self.scale, rows, offset if self.causal else None, None, rows)
        return self.o_net(y)


class CrossAttention(nn.Module):
    """Multi-head attention from the decoder positions to the (normed) text memory:
    ``q_net`` (D → H·dh), ``kv_net`` (D_mem → 2·H·dh, K|V), ``o_net`` (H·dh → D)."""

    def __init__(self, d_model: int, d_memory: int, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_head
        self.scale = d_head ** -0.5
        self.q_net = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.kv_net = nn.Linear(d_memory, 2 * n_heads * d_head, bias=False)
        self.o_net = nn.Linear(n_heads * d_head, d_model, bias=False)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """memory (B, Tm, D_mem), already normed → K, V (B, Tm, H, dh)."""
        b, tm, _ = memory.shape
        kv = self.kv_net(memory).reshape(b, tm, 2, self.n_heads, self.d_head)
        k, v = kv.chunk(2, dim=2)
        return k.squeeze(2), v.squeeze(2)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, memory_mask: Tensor,
                prior: Tensor | None) -> tuple[Tensor, Tensor]:
        """x (B, T, D) normed query, K/V from `memory_kv`, memory_mask (B, Tm) bool, prior
        (B, 1, Tm) or None → (output (B, T, D), probabilities (B, H, T, Tm))."""
        b, t, _ = x.shape
        q = self.q_net(x).reshape(b, t, self.n_heads, self.d_head)
        keys = ~memory_mask[:, None, None]
        y, prob = _attend(q, k, v, self.scale, keys, None, prior, keys)
        return self.o_net(y), prob


class TransformerLayer(nn.Module):
    """One pre-norm layer (NeMo ``TransformerLayer``, eval mode, no MoE)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.has_xattn = cfg.has_xattn
        self.norm_self = nn.LayerNorm(d, bias=False)
        self.self_attention = SelfAttention(d, cfg.sa_n_heads, cfg.is_causal)
        if cfg.has_xattn:
            assert cfg.xa_n_heads is not None and cfg.xa_d_head is not None
            assert cfg.xa_d_memory is not None
            self.norm_xattn_query = nn.LayerNorm(d, bias=False)
            self.cross_attention = CrossAttention(d, cfg.xa_d_memory, cfg.xa_n_heads,
                                                  cfg.xa_d_head)
            self.norm_xattn_memory: nn.Module = (
                nn.LayerNorm(cfg.xa_d_memory, bias=False) if cfg.apply_norm_to_cond
                else nn.Identity())
        self.norm_pos_ff = nn.LayerNorm(d, bias=False)
        self.pos_ff = ConvFF(d, cfg.d_ffn, cfg.kernel_size, cfg.is_causal)

    def forward(self, x: Tensor, mask: Tensor, memory: Tensor | None,
                memory_mask: Tensor | None, prior: Tensor | None,
                cache: LayerCache | None) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D), mask (B, T) bool, memory (B, Tm, D_mem) un-normed text memory →
        (output (B, T, D), cross-attention probabilities (B, H, T, Tm) or None)."""
        scale = mask.to(x.dtype).unsqueeze(-1)
        x = x * scale
        x = x + self.self_attention(self.norm_self(x), mask, cache)
        prob = None
        if self.has_xattn and memory is not None:
            assert memory_mask is not None
            if cache is not None and cache.cross_k is not None and cache.cross_v is not None:
                k, v = cache.cross_k, cache.cross_v
            else:
                k, v = self.cross_attention.memory_kv(self.norm_xattn_memory(memory))
                if cache is not None:
                    cache.cross_k, cache.cross_v = k, v
            y, prob = self.cross_attention(self.norm_xattn_query(x), k, v, memory_mask, prior)
            x = x + y
        x = x + self.pos_ff(self.norm_pos_ff(x), mask.to(x.dtype))
        return x * scale, prob


class Transformer(nn.Module):
    """NeMo ``transformer_2501.Transformer`` (inference): positions, layers, ``norm_out``.

    Raises `ValueError` when the positions would pass ``max_length_causal_mask`` or a cache is
    used with a conv FFN wider than one position (its past inputs are not cached).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.n_layers))
        self.position_embeddings: nn.Embedding | None = (
            nn.Embedding(cfg.max_length_causal_mask, cfg.d_model)
            if cfg.use_learnable_pos_emb else None)
        self.norm_out: nn.Module = (nn.LayerNorm(cfg.d_model, bias=False)
                                    if cfg.apply_norm_out else nn.Identity())

    def new_cache(self) -> KVCache:
        """An empty cache for `forward` (raises `ValueError` if the FFN kernel is not 1)."""
        if self.cfg.kernel_size != 1:
            raise ValueError(f"a KV cache needs kernel_size 1, got {self.cfg.kernel_size}")
        return KVCache.empty(self.cfg.n_layers)

    def forward(
        self,
        x: Tensor,
        mask: Tensor,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        priors: list[Tensor | None] | None = None,
        cache: KVCache | None = None,
    ) -> TransformerOutput:
        """x (B, T, D) new positions, mask (B, T) bool; memory (B, Tm, D) and memory_mask
        (B, Tm) bool for cross-attention; priors: one (B, 1, Tm) float tensor or None per layer
        (NeMo's per-layer ``attn_prior`` list). With ``cache``, x holds only positions
        ``cache.length`` … onwards and the cache is advanced by T."""
        offset = cache.length if cache is not None else 0
        t = x.shape[1]
        if offset + t > self.cfg.max_length_causal_mask:
            raise ValueError(f"{offset + t} positions exceed max_length_causal_mask "
                             f"{self.cfg.max_length_causal_mask}")
        if self.position_embeddings is not None:
            positions = torch.arange(offset, offset + t, device=x.device).unsqueeze(0)
            x = x + self.position_embeddings(positions)
        out = TransformerOutput(output=x)
        for i, layer in enumerate(self.layers):
            prior = priors[i] if priors is not None else None
            layer_cache = cache.layers[i] if cache is not None else None
            x, prob = layer(x, mask, memory, memory_mask, prior, layer_cache)
            out.layer_outputs.append(x)
            if prob is not None:
                out.xattn_probs.append(prob)
        if cache is not None:
            cache.length = offset + t
        out.output = self.norm_out(x)
        return out
