"""CosyVoice3's DiT flow-matching estimator (spec §6 "DiT", "Masks", "Padding quirk").

The estimator predicts the flow velocity v(x, t | mu, spks, cond) for one Euler step. Layout is
channels-first at the interface, as the reference `cosyvoice/flow/DiT/dit.py::DiT.forward` takes it:

- ``x``, ``mu``, ``cond``: float32 [B, 80, T], T in mel frames (50 fps), frame 0 = prompt frame 0;
- ``mask``: float [B, 1, T], 1 for a valid frame, 0 for padding (cast to bool here);
- ``t``: float32 [B] (or a 0-dim scalar), flow time in [0, 1];
- ``spks``: float32 [B, 80], the projected speaker embedding;
- returns float32 [B, 80, T].

Precision (spec §9.3 ``estimator_dtype``): the compute dtype is the dtype of the Linear and
Conv1d weights, float32 as loaded, or bfloat16 after `DiT.set_compute_dtype`. In bfloat16 the
linear, conv and attention-projection matmuls and the activations between them run in
bfloat16 (q·kᵀ included), while the LayerNorms (with their modulation), the attention
softmax (its scores cast up, then scaled and masked), RoPE and the sinusoidal time features
compute in float32 by explicit casts (no autocast; spec §10). fp16 is reported to overflow
in this LayerNorm (spec §13), and bf16 with its 8-bit significand would round the
normalisation statistics and softmax weights too coarsely.
Inputs and output stay float32 at the interface, so the Euler state and solver arithmetic
around the estimator are float32 whatever the compute dtype. In float32 every path is
unchanged (the parity fixtures' values, bit for bit).

Parameter names equal the reference `state_dict()` (under ``decoder.estimator.`` in `flow.pt`,
spec §3). Sizes (spec §2): full dim 1024 / depth 22 / 16 heads x 64 / FF 2048 / chunk 50 frames;
tiny dim 64 / depth 2 / 4 heads x 16 / FF 128 / chunk 10 frames. Inference only: the reference's
dropout layers (rate 0.1, inactive in eval) are `nn.Identity` here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxflow.models.cosyvoice3.precision import attention_fp32_softmax

# Spec §6 "Time": 256-d sinusoidal features of 1000·t, frequencies exp(-k·ln(1e4)/127), k = 0..127.
TIME_FEATURES = 256
TIME_SCALE = 1000.0
TIME_MAX_PERIOD = 10000.0
# Spec §6 "RoPE": x-transformers RotaryEmbedding(dim_head), theta 1e4.
ROPE_THETA = 10000.0
# Spec §6 "Input": two grouped causal convs, kernel 31 (left pad 30), 16 groups, each + Mish.
CONV_POS_KERNEL = 31
CONV_POS_GROUPS = 16
# Spec §6 "Block": LayerNorm without affine, eps 1e-6 (attention, FF and output norms).
NORM_EPS = 1e-6


def timestep_features(t: Tensor, dim: int = TIME_FEATURES) -> Tensor:
    """Sinusoidal time features (spec §6 "Time").

    t: float [B] flow time. Returns [B, dim] = [sin(1000·t·f_k), cos(1000·t·f_k)], with
    f_k = exp(-k·ln(1e4)/(dim/2 - 1)), k = 0..dim/2-1, in t's dtype.
    """
    half = dim // 2
    step = math.log(TIME_MAX_PERIOD) / (half - 1)
    freqs = torch.exp(torch.arange(half, device=t.device).float() * -step)
    args = TIME_SCALE * t.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((args.sin(), args.cos()), dim=-1).to(t.dtype)


class TimestepEmbedding(nn.Module):
    """t [B] -> [B, dim]: sinusoidal features (256) -> Linear -> SiLU -> Linear.

    Weights: `time_mlp.0` [dim, 256], `time_mlp.2` [dim, dim].
    """

    def __init__(self, dim: int, freq_dim: int = TIME_FEATURES) -> None:
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: Tensor) -> Tensor:
        """t float32 [B] -> [B, dim] in the MLP's weight dtype (features built in float32)."""
        features = timestep_features(t.float(), self.freq_dim)
        dtype = self.time_mlp[0].weight.dtype
        assert isinstance(dtype, torch.dtype)
        out: Tensor = self.time_mlp(features.to(dtype))
        return out


class CausalConvPositionEmbedding(nn.Module):
    """Two causal grouped convs (k31, 16 groups, left zero pad 30 each), each followed by Mish.

    x: [B, T, dim] -> [B, T, dim]. No mask is applied (spec §6 "Input"): padded frames are
    convolved like any other, and frame i only sees frames <= i.
    """

    def __init__(self, dim: int, kernel_size: int = CONV_POS_KERNEL,
                 groups: int = CONV_POS_GROUPS) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)
        h = self.conv1(F.pad(h, (self.kernel_size - 1, 0)))
        h = self.conv2(F.pad(h, (self.kernel_size - 1, 0)))
        return h.transpose(1, 2)


class InputEmbedding(nn.Module):
    """[x, cond, mu, spks] (channels last, 80·4 = 320) -> `proj` -> + causal conv position term.

    x, cond, mu: [B, T, 80]; spks: [B, 80] broadcast over T. Returns [B, T, dim].
    """

    def __init__(self, mel_dim: int, mu_dim: int, spk_dim: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + mu_dim + spk_dim, dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(dim)

    def forward(self, x: Tensor, cond: Tensor, mu: Tensor, spks: Tensor) -> Tensor:
        spk = spks.unsqueeze(1).expand(-1, x.shape[1], -1)
        h: Tensor = self.proj(torch.cat((x, cond, mu, spk), dim=-1))
        return self.conv_pos_embed(h) + h


class RotaryEmbedding(nn.Module):
    """x-transformers-style rotary table (spec §6 "RoPE").

    `inv_freq` [dim_head/2] = 1 / theta^(2k/dim_head) is a persistent buffer (it is in the state
    dict). `freqs(T)` gives [1, T, dim_head] angles, positions 0..T-1 (frames from prompt frame 0),
    interleaved: [p·f0, p·f0, p·f1, p·f1, ...], fp32.
    """

    inv_freq: Tensor

    def __init__(self, dim_head: int, theta: float = ROPE_THETA) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim_head, 2).float() / dim_head))
        self.register_buffer("inv_freq", inv_freq)

    def freqs(self, seq_len: int, start: int = 0) -> Tensor:
        """Angles float32 [1, seq_len - start, dim_head] for absolute positions start..seq_len-1.

        `start` > 0 gives the rows [start, seq_len) of ``freqs(seq_len)``, value for value (the
        settled-frame cache rotates only its new frames, `flow_cache`).
        """
        pos = torch.arange(start, seq_len, device=self.inv_freq.device).to(self.inv_freq.dtype)
        angles = pos[None, :, None] * self.inv_freq[None, None, :]
        return torch.stack((angles, angles), dim=-1).flatten(-2)


def rotate_pairs(x: Tensor) -> Tensor:
    """Interleaved quarter turn: each pair (x_2i, x_2i+1) -> (-x_2i+1, x_2i), on the last dim."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def apply_rotary(x: Tensor, freqs: Tensor) -> Tensor:
    """Rotate the first `freqs.shape[-1]` channels of x [B, T, C] (the rest pass unchanged).

    Applied before the head split, so with C = heads·dim_head only head 0 is rotated (spec §6).
    Computed in fp32 and cast back to x's dtype.
    """
    rot = freqs.shape[-1]
    head, rest = x[..., :rot].float(), x[..., rot:]
    turned = head * freqs.cos() + rotate_pairs(head) * freqs.sin()
    return torch.cat((turned.to(x.dtype), rest), dim=-1)


class AdaLayerNormZero(nn.Module):
    """`linear(SiLU(t))` -> 6 x [B, dim]: shift, scale, gate (attention), then the same for FF."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * 6)

    def forward(self, t: Tensor) -> tuple[Tensor, ...]:
        return tuple(torch.chunk(self.linear(F.silu(t)), 6, dim=1))


class AdaLayerNormZeroFinal(nn.Module):
    """Output modulation: `linear(SiLU(t))` -> scale, then shift (this order, spec §6 "Output")."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, dim * 2)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        scale, shift = torch.chunk(self.linear(F.silu(t)), 2, dim=1)
        return modulate(x, shift, scale)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """LN(x)·(1 + scale) + shift; x [B, T, dim], shift, scale [B, dim]; returns x's dtype.

    LN without affine, eps 1e-6 (spec §6 "Block" 2). The norm and the modulation compute in
    float32 whatever x's dtype (spec §9.3: norms stay fp32); the result is cast back to x's
    dtype for the next linear layer. For float32 inputs the casts are no-ops.
    """
    normed = F.layer_norm(x.float(), (x.shape[-1],), eps=NORM_EPS)
    out = normed * (1 + scale.float()[:, None]) + shift.float()[:, None]
    return out.to(x.dtype)


class FeedForward(nn.Module):
    """Linear(dim, dim·mult) -> GELU (tanh) -> Linear(dim·mult, dim): `ff.ff.0.0`, `ff.ff.2`."""

    def __init__(self, dim: int, mult: int) -> None:
        super().__init__()
        inner = dim * mult
        self.ff = nn.Sequential(
            nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")),
            nn.Identity(),
            nn.Linear(inner, dim),
        )

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.ff(x)
        return out


class Attention(nn.Module):
    """Self-attention with biased q/k/v/out projections, RoPE on q and k before the head split.

    x: [B, T, dim]; mask: bool [B, 1, T, T] (query, key), True = may attend. Scale 1/sqrt(dim_head).
    The output is zeroed at frames whose key is invalid, read from the mask's last query row
    (spec §6 "Block" 3); that is the only place padding is zeroed.
    """

    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.heads = heads
        self.dim_head = dim_head
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Identity()])

    def project(self, x: Tensor, freqs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v [B, heads, T, dim_head] in x's dtype from x [B, T, dim]; q and k rotated by
        `freqs` [1, T, dim_head] (head 0 only, spec §6 "RoPE")."""
        batch = x.shape[0]
        q = apply_rotary(self.to_q(x), freqs)
        k = apply_rotary(self.to_k(x), freqs)
        v = self.to_v(x)
        q, k, v = (a.view(batch, -1, self.heads, self.dim_head).transpose(1, 2) for a in (q, k, v))
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Attention of q [B, heads, Tq, dim_head] over k, v [B, heads, Tk, dim_head] under the
        bool `mask` [B or 1, 1, Tq, Tk], then `to_out`: [B, Tq, dim]. No padding zeroing here.

        float32 runs SDPA; a lower dtype keeps the scores and softmax in float32
        (`attention_fp32_softmax`).
        """
        batch = q.shape[0]
        if q.dtype == torch.float32:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            out = attention_fp32_softmax(q, k, v, mask)
        out = out.transpose(1, 2).reshape(batch, -1, self.heads * self.dim_head)
        projected: Tensor = self.to_out[0](out)
        return projected

    def forward(self, x: Tensor, mask: Tensor, freqs: Tensor) -> Tensor:
        q, k, v = self.project(x, freqs)
        out = self.attend(q, k, v, mask)
        valid = mask[:, 0, -1].unsqueeze(-1)
        return out.masked_fill(~valid, 0.0)


class DiTBlock(nn.Module):
    """AdaLN-zero transformer block (spec §6 "Block"): x [B, T, dim], t [B, dim] -> [B, T, dim]."""

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: int) -> None:
        super().__init__()
        self.attn_norm = AdaLayerNormZero(dim)
        self.attn = Attention(dim, heads, dim_head)
        self.ff = FeedForward(dim, ff_mult)

    def forward(self, x: Tensor, t: Tensor, mask: Tensor, freqs: Tensor) -> Tensor:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attn_norm(t)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(x, shift_msa, scale_msa), mask, freqs)
        return x + gate_mlp.unsqueeze(1) * self.ff(modulate(x, shift_mlp, scale_mlp))


def attention_mask(mask: Tensor, streaming: bool | Tensor, chunk_size: int,
                   left_chunks: int = -1) -> Tensor:
    """Boolean attention mask [B, 1, T, T] (query i, key j) from a frame mask [B, 1, T] (spec §6).

    - Non-streaming: i attends j iff key j is valid (key padding).
    - Streaming: additionally j < (floor(i/C)+1)·C, C = `chunk_size` frames counted from frame 0;
      with `left_chunks` >= 0 also j >= (floor(i/C) - left_chunks)·C (CosyVoice3 uses -1: all
      left chunks).
    - `streaming` may be a bool tensor [B] (one flag per row, for a batch that mixes streamed
      and final solves, as the bucketed flow does): each row gets the mask its flag selects,
      identical to the mask of that row alone.
    - A query row with no allowed key becomes all True (the reference forces it, so attention
      stays finite; such frames are padding and their attention output is zeroed anyway).

    Built on the mask's device without host reads.
    """
    keys = mask.bool()  # [B, 1, T]
    frames = keys.shape[-1]
    per_row = isinstance(streaming, Tensor)
    if (per_row or streaming) and chunk_size > 0:
        pos = torch.arange(frames, device=keys.device)
        chunk = torch.div(pos, chunk_size, rounding_mode="floor")
        allowed = pos[None, :] < ((chunk + 1) * chunk_size)[:, None]
        if left_chunks >= 0:
            start = ((chunk - left_chunks) * chunk_size).clamp(min=0)
            allowed = allowed & (pos[None, :] >= start[:, None])
        if per_row:
            assert isinstance(streaming, Tensor)
            allowed = allowed.unsqueeze(0) | ~streaming.bool().view(-1, 1, 1)
            rows = keys & allowed  # [B, T, T]
        else:
            rows = keys & allowed.unsqueeze(0)  # [B, T, T]
    else:
        rows = keys  # [B, 1, T], the same for every query
    rows = rows | ~rows.any(dim=-1, keepdim=True)
    return rows.expand(-1, frames, -1).unsqueeze(1)


class DiT(nn.Module):
    """The DiT estimator (`cosyvoice/flow/DiT/dit.py::DiT`, spec §6 "DiT").

    `static_chunk_size` is in mel frames (full 50 = 2 x token hop 25; tiny 10). `out_channels` is
    kept for the reference signature; the output has `mel_dim` channels.
    """

    def __init__(self, *, dim: int, depth: int, heads: int, dim_head: int, ff_mult: int,
                 mel_dim: int = 80, mu_dim: int = 80, spk_dim: int = 80,
                 out_channels: int = 80, static_chunk_size: int = 50,
                 num_decoding_left_chunks: int = -1) -> None:
        super().__init__()
        self.time_embed = TimestepEmbedding(dim)
        self.input_embed = InputEmbedding(mel_dim, mu_dim, spk_dim, dim)
        self.rotary_embed = RotaryEmbedding(dim_head)
        self.transformer_blocks = nn.ModuleList(
            [DiTBlock(dim, heads, dim_head, ff_mult) for _ in range(depth)])
        self.norm_out = AdaLayerNormZeroFinal(dim)
        self.proj_out = nn.Linear(dim, mel_dim)
        self.out_channels = out_channels
        self.static_chunk_size = static_chunk_size
        self.num_decoding_left_chunks = num_decoding_left_chunks

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the estimator's matmuls and activations run in (its Linear weights')."""
        return self.proj_out.weight.dtype

    def set_compute_dtype(self, dtype: torch.dtype) -> DiT:
        """Cast every Linear and Conv1d (weight and bias) to `dtype`; returns self.

        float32 or bfloat16 (spec §9.3 ``estimator_dtype``). Call after loading the float32
        state dict (the checkpoint's own layout and dtype are loaded strictly first). The
        rotary ``inv_freq`` buffer stays float32 (RoPE computes in float32), and the
        LayerNorms have no parameters (no affine): they compute in float32 in any case.

        Raises:
            ValueError: a dtype other than float32 or bfloat16.
        """
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"estimator dtype must be float32 or bfloat16, got {dtype}")
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                module.to(dtype)
        return self

    def forward(self, x: Tensor, mask: Tensor, mu: Tensor, t: Tensor, spks: Tensor,
                cond: Tensor, streaming: bool | Tensor = False) -> Tensor:
        """Velocity float32 [B, 80, T]; x, mu, cond float32 [B, 80, T], mask [B, 1, T], t [B]
        or [], spks [B, 80].

        `streaming` selects the chunk-causal mask (`static_chunk_size` frames), else key padding;
        a bool tensor [B] selects it per row (`attention_mask`). The inputs are cast to
        `compute_dtype` here and the velocity back to float32 (see the module docstring).
        """
        batch, _, frames = x.shape
        if t.ndim == 0:
            t = t.repeat(batch)
        temb = self.time_embed(t)
        dtype = self.compute_dtype
        x, mu, cond, spks = (a.to(dtype) for a in (x, mu, cond, spks))
        h = self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks)
        freqs = self.rotary_embed.freqs(frames)
        attn_mask = attention_mask(mask, streaming, self.static_chunk_size,
                                   self.num_decoding_left_chunks)
        for block in self.transformer_blocks:
            h = block(h, temb, attn_mask, freqs)
        out: Tensor = self.proj_out(self.norm_out(h, temb))
        return out.transpose(1, 2).float()
