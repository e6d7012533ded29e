"""Weight-normalised causal 1-D convolution, with the reference's state-dict layout (spec §3, §7).

The reference wraps its convs with `torch.nn.utils.parametrizations.weight_norm`, so a conv's
state dict holds `bias`, `parametrizations.weight.original0` (g, [out, 1, 1]) and
`parametrizations.weight.original1` (v, [out, in, k]), in that order. `WeightNormConv1d` stores
exactly those tensors as plain parameters (no parametrisation machinery) and builds the weight
W = g · v / ‖v‖ (norm over dims 1, 2) when asked, or once after `fold()` (spec §3: "fold once
at load").

Causality is explicit padding in time: `pad_left` / `pad_right` zero frames, then an unpadded
convolution (the reference's `CausalConv1d`, `CausalConv1dUpsample`, `CausalConv1dDownSample`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def weight_norm_fold(g: Tensor, v: Tensor) -> Tensor:
    """W = v · (g / ‖v‖), the norm over every dim but 0 (torch's `_weight_norm`, dim 0).

    g: [out, 1, 1], v: [out, in, k]; same dtype; returns [out, in, k] in that dtype.
    """
    return v * (g / v.norm(2, dim=(1, 2), keepdim=True))


class _WeightNormParams(nn.Module):
    """`parametrizations.weight`: g (`original0`, [out, 1, 1]) and v (`original1`, [out, in, k])."""

    def __init__(self, out_channels: int, in_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.original0 = nn.Parameter(torch.empty(out_channels, 1, 1))
        self.original1 = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size))


class _Parametrizations(nn.Module):
    """The `parametrizations` container: only `weight`, as in the reference's state dict."""

    def __init__(self, out_channels: int, in_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.weight = _WeightNormParams(out_channels, in_channels, kernel_size)


class WeightNormConv1d(nn.Module):
    """Conv1d with weight norm and bias; input [B, in, T] → output [B, out, T_out].

    T_out = T + pad_left + pad_right − dilation·(k−1), zero padding only (stride 1).
    Causal (reference `causal_type='left'`): pad_left = dilation·(k−1). Lookahead ('right'):
    pad_right = k−1, or 0 when the caller passes the lookahead frames itself (streaming).
    The weight is computed in the input's dtype from g and v cast to it (the F0 predictor runs
    the whole path in float64, spec §7).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        dilation: int = 1,
        pad_left: int = 0,
        pad_right: int = 0,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.dilation = dilation
        self.pad_left = pad_left
        self.pad_right = pad_right
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.parametrizations = _Parametrizations(out_channels, in_channels, kernel_size)
        self.folded: Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default conv init for v and the bias; g = ‖v‖ (as `weight_norm` sets it)."""
        p = self.parametrizations.weight
        nn.init.kaiming_uniform_(p.original1, a=math.sqrt(5))
        fan_in = p.original1.shape[1] * p.original1.shape[2]
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        nn.init.uniform_(self.bias, -bound, bound)
        with torch.no_grad():
            p.original0.copy_(p.original1.norm(2, dim=(1, 2), keepdim=True))
        self.folded = None

    def weight(self, dtype: torch.dtype) -> Tensor:
        """W [out, in, k] in `dtype`: the folded copy if `fold(dtype)` ran, else computed now."""
        if self.folded is not None and self.folded.dtype == dtype:
            return self.folded
        p = self.parametrizations.weight
        return weight_norm_fold(p.original0.to(dtype), p.original1.to(dtype))

    @torch.no_grad()
    def fold(self, dtype: torch.dtype = torch.float32) -> None:
        """Compute W once in `dtype` and reuse it until `unfold()`, a state-dict load or a move.

        Call it after `.to(device)`: moving the module drops the folded copy.
        """
        p = self.parametrizations.weight
        self.folded = weight_norm_fold(p.original0.to(dtype), p.original1.to(dtype))

    def unfold(self) -> None:
        self.folded = None

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        # `.to()` / `.cuda()` move g and v; a folded copy would be stale, so drop it.
        self.folded = None
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self.folded = None
        super()._load_from_state_dict(*args, **kwargs)

    def forward(self, x: Tensor, pad_right: int | None = None) -> Tensor:
        """x [B, in, T] → [B, out, T_out]; zero padding as configured, in x's dtype.

        `pad_right` overrides the configured right padding for this call (a streaming call that
        brings its own lookahead frames passes 0).
        """
        right = self.pad_right if pad_right is None else pad_right
        if self.pad_left or right:
            x = F.pad(x, (self.pad_left, right))
        w = self.weight(x.dtype)
        return F.conv1d(x, w, self.bias.to(x.dtype), dilation=self.dilation)
