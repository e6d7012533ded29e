"""FSQ decode: codec token ids → decoder latent, no weights (spec §3).

Tokens are (B, 8, T) int64, codebook-major. Id n of any group has digits
d_k = (n // [1, 8, 56, 336]_k) mod [8, 7, 6, 6]_k and value (d_k − h_k) / h_k, h = [4, 3, 3, 3];
group g fills latent dims 4g..4g+3. One 2016×4 table serves every group. Frames at or past a
length are 0. NeMo never range-checks ids (2016 decodes as 0); here an id outside 0..2015 is a
`CodeError`, so MagpieTTS specials (2016..2023) can never reach the codec.
"""

from __future__ import annotations

import torch
from torch import Tensor

LEVELS = (8, 7, 6, 6)
BASES = (1, 8, 56, 336)  # mixed radix: cumulative products of LEVELS
NUM_GROUPS = 8
DIMS_PER_GROUP = len(LEVELS)
NUM_CODES = 2016  # prod(LEVELS): valid ids 0..2015


class CodeError(ValueError):
    """Codec tokens of the wrong dtype, shape or range (spec §9)."""


def codebook(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> Tensor:
    """The (2016, 4) table of every id's vector, computed as (digit − half) / half in ``dtype``
    (exactly NeMo's `FiniteScalarQuantizer.codes` in float32)."""
    ids = torch.arange(NUM_CODES, device=device)[:, None]  # (2016, 1)
    bases = torch.tensor(BASES, device=device)
    levels = torch.tensor(LEVELS, device=device)
    digits = (ids // bases) % levels  # (2016, 4)
    half = (levels // 2).to(dtype)
    return (digits.to(dtype) - half) / half


def check_tokens(tokens: Tensor, lengths: Tensor | None = None) -> None:
    """Refuse tokens that are not (B, 8, T) integers in 0..2015 (lengths: (B,) in 0..T).

    Reads the values, so call it where the tokens arrive (the stage boundary, usually on the
    host), not inside a per-chunk device step. Raises `CodeError` naming the problem.
    """
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise CodeError(f"codec tokens must be integers, got {tokens.dtype}")
    if tokens.dim() != 3 or tokens.shape[1] != NUM_GROUPS:
        raise CodeError(f"codec tokens must be (B, {NUM_GROUPS}, T), got {list(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= NUM_CODES):
        raise CodeError(f"codec token ids must be in 0..{NUM_CODES - 1}, got "
                        f"{int(tokens.min())}..{int(tokens.max())}")
    if lengths is not None:
        if lengths.shape != (tokens.shape[0],):
            raise CodeError(f"lengths must be ({tokens.shape[0]},), got {list(lengths.shape)}")
        if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > tokens.shape[2]):
            raise CodeError(f"lengths must be in 0..{tokens.shape[2]}")


def frame_mask(lengths: Tensor, frames: int) -> Tensor:
    """(B, 1, frames) bool: True where the frame index is below the item's length."""
    steps = torch.arange(frames, device=lengths.device)
    return (steps[None, :] < lengths[:, None])[:, None, :]


def fsq_decode(
    tokens: Tensor,
    lengths: Tensor | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    table: Tensor | None = None,
) -> Tensor:
    """tokens (B, 8, T) int → latent (B, 32, T) in ``dtype``; frames ≥ lengths[b] are 0.

    ``table`` is a precomputed `codebook` (same dtype and device) to skip rebuilding it. Checks
    the tokens first (`check_tokens`; raises `CodeError`).
    """
    check_tokens(tokens, lengths)
    if table is None:
        table = codebook(dtype, tokens.device)
    latent = lookup(table, tokens)
    if lengths is not None:
        frames = tokens.shape[-1]
        latent = torch.where(frame_mask(lengths.to(tokens.device), frames), latent, 0.0)
    return latent


def lookup(table: Tensor, tokens: Tensor) -> Tensor:
    """tokens (B, 8, T) int64 already checked (`check_tokens`), on ``table``'s device → latent
    (B, 32, T) in ``table``'s dtype, group g in dims 4g..4g+3. Reads no value on the host, so it
    can run inside a per-chunk device step or a captured graph. An id outside 0..2015 raises an
    IndexError on the CPU and is undefined on CUDA: check first."""
    batch, groups, frames = tokens.shape
    vectors = table[tokens]  # (B, 8, T, 4)
    return vectors.permute(0, 1, 3, 2).reshape(batch, groups * DIMS_PER_GROUP, frames)
