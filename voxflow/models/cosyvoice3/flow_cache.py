"""A per-segment cache of the DiT's settled frames for streamed flow calls (spec §9.7 end:
"a DiT KV cache per (step, CFG row, layer) for settled chunks"; §6 "Streaming property").

Why: a streamed chunk call (spec §9.7 item 3.1) reruns the 10-step Euler solve with CFG over the
whole token prefix, so a long segment costs O(N²) in frames. Every op of the estimator is
per-frame, left-causal (the two k31 position convs) or chunk-causal (attention: query i sees key
j iff j < (⌊i/C⌋+1)·C, C = `static_chunk_size`, all left chunks), and x₀ is a fixed noise
prefix, so frames in whole chunks of an earlier streamed call repeat exactly in the next one.
This module keeps, per Euler step and per CFG row, what later frames read from those settled
frames (the rotated keys and the values of every layer, and the last kernel-1 = 30 frames entering
each position conv) and solves only the new frames [settled, T).

How a caller uses it, one segment at a time:

1. Per segment (one voice, one prompt), create ``cache = SettledFlowCache(flow.decoder.estimator)``.
2. For every streamed, non-final chunk call (spec §9.7 item 3.1) build the conditioning as
   today, ``c = flow.conditioning(token, prompt_token, prompt_feat, embedding, finalize=False)``
   (the whole prefix: prompt plus all tokens so far, the last 3 as lookahead context), note
   ``start = cache.settled``, then ``mel = solve_streamed_chunk(flow.decoder, c, cache)``:
   ``mel`` [1, 80, T - start] holds the absolute frames [start, T) of the solve, equal (float
   rounding) to ``flow.decoder(c.mu, c.mask, c.spks, c.cond, streaming=True)[:, :, start:]``.
   Frame 0 is prompt frame 0, so the first call (start 0) includes the 2P prompt frames the
   caller drops, as `CausalMaskedDiffWithDiT.inference` does; later calls start past them.
   A caller wanting the frames from 2·(P + offset) slices ``mel[:, :, 2·(P+offset) - start:]``
   (with the §9.7 schedule, start = 2·(P + offset) after the first call).
3. The final call (spec §9.7 item 4) uses **full attention**, so every frame may change: it
   still recomputes the whole prefix with the ordinary `flow.inference`/``flow.decoder``; drop
   the cache then. The offline path (item 5) never uses it.

Only frames in whole chunks settle: after a call of T frames, ``cache.settled`` becomes
⌊T/C⌋·C. With the §9.7 schedule (P + offset chunk-aligned, hops whole chunks) T is always
chunk-aligned, so every frame settles; a call ending mid-chunk still returns correct frames, and
the tail is recomputed by the next call (its frames would otherwise see later keys).

Preconditions (not checked on the device, to keep host reads out of the hot path): batch 1; the
mask all ones (streamed calls have no padding); every call of a segment extends the same prefix
(same prompt, same speaker, the old tokens unchanged: the conditioning of settled frames is not
reread); ``num_decoding_left_chunks`` = -1 (checked at construction).

Memory: per settled frame the cache holds
``2 (K, V) · depth · n_timesteps · 2 (CFG rows) · heads · dim_head · itemsize`` bytes
(`SettledFlowCache.bytes_per_frame`): full size (22 layers, 16 × 64, 10 steps) 3,604,480 B ≈
3.44 MiB a frame in float32 (172 MiB per second of 50 fps audio, 14.1 GiB at the 4,200-frame
top bucket) and half that in bfloat16; tiny (2 layers, 4 × 16) 20,480 B a frame in float32.
Plus a constant ``2 (convs) · n_timesteps · 2 · dim · 30 · itemsize`` for the conv history
(full float32 4.9 MB). Storage grows by doubling (rounded up to whole chunks), so up to twice
the settled frames may be allocated; pass ``reserve_frames`` to allocate once.

Device notes: the buffers live on the conditioning's device in the estimator's compute dtype
(float32 or bfloat16, `DiT.set_compute_dtype`); they are allocated on the first call. The solve
reads nothing back to the host: frame counts come from shapes and Python ints, the chunk mask
and t-schedule are built on the device, new keys/values are written in place into the buffers.
Shapes change every call (T grows), so it is not graph-captured (spec §10 captures fixed
buckets); the per-call work is O(new · T) attention plus O(new) everything else instead of
O(T²) + O(T).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from voxflow.models.cosyvoice3.dit import DiT, DiTBlock, modulate
from voxflow.models.cosyvoice3.flow import (
    N_TIMESTEPS,
    CausalConditionalCFM,
    FlowConditioning,
    cosine_t_span,
)

CFG_ROWS = 2
"""Rows the Euler solve stacks per step: 0 conditional (mu, spks, cond), 1 unconditional."""


def _blocks(estimator: DiT) -> list[DiTBlock]:
    """The estimator's transformer blocks, typed."""
    blocks = list(estimator.transformer_blocks)
    assert all(isinstance(b, DiTBlock) for b in blocks)
    return cast(list[DiTBlock], blocks)


class SettledFlowCache:
    """Per-segment state of the settled frames of streamed flow calls (spec §9.7 end).

    Holds, for the DiT `estimator` it was made for:

    - ``keys``, ``values``: [depth, n_timesteps, 2, heads, capacity, dim_head] in the estimator's
      compute dtype: per layer, Euler step and CFG row (0 cond, 1 uncond), the rotated keys
      (RoPE at absolute positions, head 0 only, spec §6) and the values of frames [0, settled);
      slots past `settled` are scratch.
    - ``conv1_history``, ``conv2_history``: [n_timesteps, 2, dim, kernel-1 = 30]: the last 30
      frames that entered conv1 and conv2 of `CausalConvPositionEmbedding` before frame
      `settled` (zeros before any frame: the convs' left zero pad), channels first.
    - ``settled``: frames in the cache (int, a multiple of `chunk` frames).
    - ``prompt_frames``: the 2P of the segment's first call (-1 before it).

    Buffers are None until the first `solve_streamed_chunk` call allocates them on the
    conditioning's device.

    Raises:
        ValueError: ``static_chunk_size`` <= 0 (no streaming mask), ``num_decoding_left_chunks``
            >= 0 (a limited left context is not cached here), ``n_timesteps`` < 1 or
            ``reserve_frames`` < 0.
    """

    def __init__(self, estimator: DiT, n_timesteps: int = N_TIMESTEPS,
                 reserve_frames: int = 0) -> None:
        if estimator.static_chunk_size <= 0:
            raise ValueError(f"static_chunk_size must be > 0 for streaming, got "
                             f"{estimator.static_chunk_size}")
        if estimator.num_decoding_left_chunks >= 0:
            raise ValueError("only num_decoding_left_chunks = -1 (all left chunks, spec §6) is "
                             f"cached, got {estimator.num_decoding_left_chunks}")
        if n_timesteps < 1:
            raise ValueError(f"n_timesteps must be >= 1, got {n_timesteps}")
        if reserve_frames < 0:
            raise ValueError(f"reserve_frames must be >= 0, got {reserve_frames}")
        self.estimator = estimator
        self.n_timesteps = n_timesteps
        self.reserve_frames = reserve_frames
        self.chunk = estimator.static_chunk_size
        self.settled = 0
        self.prompt_frames = -1
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.conv1_history: Tensor | None = None
        self.conv2_history: Tensor | None = None

    @staticmethod
    def bytes_per_frame(estimator: DiT, n_timesteps: int = N_TIMESTEPS,
                        dtype: torch.dtype | None = None) -> int:
        """Bytes the keys and values take per settled frame:
        2 · depth · n_timesteps · 2 · heads · dim_head · itemsize (`dtype`, default the
        estimator's compute dtype)."""
        attn = _blocks(estimator)[0].attn
        itemsize = torch.empty((), dtype=dtype or estimator.compute_dtype).element_size()
        depth = len(estimator.transformer_blocks)
        return 2 * depth * n_timesteps * CFG_ROWS * attn.heads * attn.dim_head * itemsize

    @property
    def capacity(self) -> int:
        """Frames the key/value buffers can hold now (0 before the first call)."""
        return 0 if self.keys is None else self.keys.shape[4]

    @property
    def nbytes(self) -> int:
        """Bytes allocated by the buffers (keys, values, conv histories)."""
        bufs = (self.keys, self.values, self.conv1_history, self.conv2_history)
        return sum(b.numel() * b.element_size() for b in bufs if b is not None)

    def reset(self) -> None:
        """Forget every settled frame (keeps the buffers for reuse by a new segment)."""
        self.settled = 0
        self.prompt_frames = -1
        if self.conv1_history is not None and self.conv2_history is not None:
            with torch.inference_mode():  # the buffers are inference tensors
                self.conv1_history.zero_()
                self.conv2_history.zero_()

    def _allocate(self, frames: int, device: torch.device) -> None:
        """Make room for `frames` frames on `device`, keeping frames [0, settled).

        The first call allocates max(frames, reserve_frames); a later growth doubles the
        capacity (at least `frames`), rounded up to whole chunks.
        """
        est = self.estimator
        dtype = est.compute_dtype
        if self.keys is None or self.values is None:
            attn = _blocks(est)[0].attn
            dim = est.proj_out.in_features
            history = est.input_embed.conv_pos_embed.kernel_size - 1
            self.conv1_history = torch.zeros(self.n_timesteps, CFG_ROWS, dim, history,
                                             device=device, dtype=dtype)
            self.conv2_history = torch.zeros_like(self.conv1_history)
            cap = self._round(max(frames, self.reserve_frames))
            shape = (len(est.transformer_blocks), self.n_timesteps, CFG_ROWS, attn.heads, cap,
                     attn.dim_head)
            self.keys = torch.empty(shape, device=device, dtype=dtype)
            self.values = torch.empty(shape, device=device, dtype=dtype)
            return
        if self.keys.device != device:
            raise ValueError(f"the cache lives on {self.keys.device}, the conditioning on {device}")
        if self.keys.dtype != dtype:
            raise ValueError(f"the cache holds {self.keys.dtype} but the estimator now computes "
                             f"in {dtype}; make a new cache after set_compute_dtype")
        if frames <= self.capacity:
            return
        cap = self._round(max(frames, 2 * self.capacity))
        grown = []
        for old in (self.keys, self.values):
            new = torch.empty((*old.shape[:4], cap, old.shape[5]), device=device, dtype=dtype)
            new[:, :, :, :, :self.settled] = old[:, :, :, :, :self.settled]
            grown.append(new)
        self.keys, self.values = grown

    def _round(self, frames: int) -> int:
        return -(-max(frames, 1) // self.chunk) * self.chunk


def _chunk_mask(start: int, end: int, chunk: int, device: torch.device) -> Tensor:
    """bool [1, 1, end-start, end]: query i in [start, end) may attend key j in [0, end) iff
    j < (⌊i/chunk⌋+1)·chunk (spec §6 "Masks", all left chunks, every key valid). Each row has
    a True (its own frame)."""
    query = torch.arange(start, end, device=device)
    key = torch.arange(end, device=device)
    limit = (torch.div(query, chunk, rounding_mode="floor") + 1) * chunk
    return (key[None, :] < limit[:, None])[None, None]


@torch.inference_mode()
def solve_streamed_chunk(decoder: CausalConditionalCFM, c: FlowConditioning,
                         cache: SettledFlowCache) -> Tensor:
    """The streamed (chunk-causal, not final) solve of `c`, computing only frames
    [cache.settled, T) and settling the whole chunks among them (spec §9.7 end).

    Args:
        decoder: the flow's `CausalConditionalCFM` (its ``estimator`` must be the cache's DiT;
            its fixed noise gives x₀ = rand_noise[:, :, settled:T], spec §6 "Euler + CFG").
        c: the call's `FlowConditioning` for the whole prefix, as
            ``CausalMaskedDiffWithDiT.conditioning(..., finalize=False)`` gives it: mu, cond
            float32 [1, 80, T], mask [1, 1, T] (ones), spks [1, 80]; T in 50 fps mel frames from
            prompt frame 0.
        cache: the segment's `SettledFlowCache`; updated in place (keys, values and conv
            history of the new whole-chunk frames appended, ``settled`` = ⌊T/C⌋·C).

    Returns:
        float32 [1, 80, T - settled_before]: the solved mel (ln-magnitude) of absolute frames
        [settled_before, T), prompt frames included when settled_before < 2P; equal within
        float rounding to ``decoder(c.mu, c.mask, c.spks, c.cond, streaming=True)[:, :,
        settled_before:]``. Empty [1, 80, 0] when T == settled_before.

    Raises:
        ValueError: batch ≠ 1, T < cache.settled, a prompt length different from the segment's
            first call, an estimator other than the cache's, a device or compute dtype other
            than the cache's, or T past the fixed noise (300 s, spec §8).
    """
    est = decoder.estimator
    if est is not cache.estimator:
        raise ValueError("the cache was made for another estimator")
    mu = c.mu
    batch, mel_bins, frames = mu.shape
    if batch != 1:
        raise ValueError(f"the settled-frame cache solves batch 1, got {batch}")
    start = cache.settled
    if frames < start:
        raise ValueError(f"the conditioning has {frames} frames, fewer than the {start} "
                         "settled ones: not the same segment")
    if cache.prompt_frames >= 0 and c.prompt_frames != cache.prompt_frames:
        raise ValueError(f"prompt of {c.prompt_frames} frames, the segment's has "
                         f"{cache.prompt_frames}")
    x = decoder.noise(frames, mu.device, mu.dtype)[:, :, start:]
    if frames == start:
        return x.float().clone()
    cache._allocate(frames, mu.device)
    cache.prompt_frames = c.prompt_frames
    keys, values = cache.keys, cache.values
    hist1, hist2 = cache.conv1_history, cache.conv2_history
    assert keys is not None and values is not None and hist1 is not None and hist2 is not None
    settle = frames // cache.chunk * cache.chunk  # whole chunks settle (>= start)

    dtype = est.compute_dtype
    new = frames - start
    # Rows: 0 conditional, 1 unconditional (zeros), as CausalConditionalCFM.solve_euler stacks them.
    mu_rows = torch.cat((mu[:, :, start:], torch.zeros_like(mu[:, :, start:]))).to(dtype)
    cond_rows = torch.cat((c.cond[:, :, start:], torch.zeros_like(c.cond[:, :, start:])))
    cond_rows = cond_rows.to(dtype)
    spk_rows = torch.cat((c.spks, torch.zeros_like(c.spks))).to(dtype)
    spk_rows = spk_rows.unsqueeze(1).expand(-1, new, -1)
    mu_in, cond_in = mu_rows.transpose(1, 2), cond_rows.transpose(1, 2)
    freqs = est.rotary_embed.freqs(frames, start)
    mask = _chunk_mask(start, frames, cache.chunk, mu.device)
    conv = est.input_embed.conv_pos_embed
    blocks = _blocks(est)
    kept = hist1.shape[-1]

    # The Euler loop of CausalConditionalCFM.solve_euler, t accumulated the same way.
    rate = decoder.inference_cfg_rate
    t_span = cosine_t_span(cache.n_timesteps, dtype=mu.dtype, device=mu.device)
    t = t_span[0].unsqueeze(0)
    dt = t_span[1] - t_span[0]
    next1: list[Tensor] = []
    next2: list[Tensor] = []
    for step in range(cache.n_timesteps):
        temb = est.time_embed(t.expand(CFG_ROWS))
        x_in = torch.cat((x, x)).to(dtype).transpose(1, 2)  # [2, new, 80]
        h = est.input_embed.proj(torch.cat((x_in, cond_in, mu_in, spk_rows), dim=-1))
        # Causal k31 convs: the 30 settled frames before `start` replace the left zero pad.
        in1 = torch.cat((hist1[step], h.transpose(1, 2)), dim=2)  # [2, dim, 30 + new]
        mid = conv.conv1(in1)
        in2 = torch.cat((hist2[step], mid), dim=2)
        h = conv.conv2(in2).transpose(1, 2) + h
        for layer, block in enumerate(blocks):
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = block.attn_norm(temb)
            q, k, v = block.attn.project(modulate(h, shift_msa, scale_msa), freqs)
            keys[layer, step, :, :, start:frames] = k
            values[layer, step, :, :, start:frames] = v
            attn = block.attn.attend(q, keys[layer, step, :, :, :frames],
                                     values[layer, step, :, :, :frames], mask)
            h = h + gate_msa.unsqueeze(1) * attn
            h = h + gate_mlp.unsqueeze(1) * block.ff(modulate(h, shift_mlp, scale_mlp))
        v_pair = est.proj_out(est.norm_out(h, temb)).transpose(1, 2).float()
        # Conv inputs up to the settle point: their last 30 frames are the next call's history
        # (written after the loop, so a failed call leaves the cache as it was).
        cut = kept + settle - start
        next1.append(in1[:, :, cut - kept:cut])
        next2.append(in2[:, :, cut - kept:cut])
        v_cond, v_uncond = v_pair[:1], v_pair[1:]
        x = x + dt * ((1.0 + rate) * v_cond - rate * v_uncond)
        t = t + dt
        if step + 1 < cache.n_timesteps:
            dt = t_span[step + 2] - t
    torch.stack(next1, out=hist1)
    torch.stack(next2, out=hist2)
    cache.settled = settle
    assert x.shape == (1, mel_bins, new)
    return x.float()
