"""The NanoCodec decoder's layers (spec §4, §5, §6): weight-normed causal convs and HalfSnake.

Each layer keeps NeMo's state-dict names. A conv's parameters live in a child ``conv``
(`WeightNorm`): ``bias``, ``parametrizations.weight.original0`` (g) and ``.original1`` (v)
as stored, or ``weight`` and ``bias`` once folded (`WeightNorm.fold`, W = g·v/‖v‖, the norm over
every dim but 0, which is C_out for a conv and **C_in** for a transposed conv).

Every conv is causal. Called with ``state=None`` it zero-pads on the left (the one-shot decode);
called with a stream's state (a list of cache tensors indexed by the layer's ``slot``, see
config.cache_inventory) it continues that stream exactly, updating its cache in place with
`copy_` after the last read of the old value, on the cache's own device (no host copy).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SNAKE_EPS = 1e-9  # snake(x) = x + sin²(αx) / (α + 1e-9)
LEAKY_SLOPE = 0.01  # torch.nn.LeakyReLU's default, NeMo's HalfSnake


class _Parametrization(nn.Module):
    """``parametrizations.weight``: g (``original0``) and v (``original1``)."""

    def __init__(self, g_shape: tuple[int, ...], v_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.original0 = nn.Parameter(torch.empty(g_shape), requires_grad=False)
        self.original1 = nn.Parameter(torch.empty(v_shape), requires_grad=False)


class _Parametrizations(nn.Module):
    """The ``parametrizations`` container: only ``weight``, as in NeMo's state dict."""

    def __init__(self, g_shape: tuple[int, ...], v_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.weight = _Parametrization(g_shape, v_shape)


class WeightNorm(nn.Module):
    """A conv's parameters: bias [C_out] and g [D0, 1, 1], v [D0, D1, k] until folded, then
    ``weight`` [D0, D1, k] (g and v dropped, so the state dict and parameter count are the
    folded ones: 31,564,085 full size)."""

    def __init__(self, v_shape: tuple[int, int, int], out_channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.empty(out_channels), requires_grad=False)
        self.parametrizations = _Parametrizations((v_shape[0], 1, 1), v_shape)
        self.weight: nn.Parameter | None = None

    @property
    def folded(self) -> bool:
        return self.weight is not None

    def folded_weight(self) -> Tensor:
        """W [D0, D1, k]: the folded parameter, or g·v/‖v‖ computed now (NeMo's per-call path)."""
        if self.weight is not None:
            return self.weight
        p = self.parametrizations.weight
        return weight_norm_fold(p.original0, p.original1)

    @torch.no_grad()
    def fold(self) -> None:
        """Replace g and v by W in their dtype and device (once, at load). Idempotent."""
        if self.weight is not None:
            return
        weight = self.folded_weight()
        del self.parametrizations
        self.weight = nn.Parameter(weight, requires_grad=False)


def weight_norm_fold(g: Tensor, v: Tensor) -> Tensor:
    """W = v · (g / ‖v‖), the norm over every dim but 0 (torch's ``_weight_norm``, dim 0).

    g [D0, 1, 1], v [D0, D1, k], one dtype; returns [D0, D1, k] in it. Signs of g are kept.
    """
    return v * (g / v.norm(2, dim=(1, 2), keepdim=True))


def prepack_cpu_weight(weight: Tensor, dilation: int, columns: int) -> Tensor | None:
    """``weight`` [C_out, C_in, k] reordered once into oneDNN's blocked layout for
    `packed_conv1d`, or None where that path does not apply (not float32 on the CPU, or a torch
    without the oneDNN ops). Why: on the CPU, a plain-weight conv pays a layout cost on every
    call, which a streamed decode pays once per chunk (measured, one thread, 432x432 k11:
    2.7 ms plain vs 0.8 ms packed on 8 columns; 20.3 vs 19.3 ms on 512). ``columns`` is only a
    size hint for the layout choice; any width works afterwards."""
    ops = getattr(torch.ops, "mkldnn", None)
    if (weight.device.type != "cpu" or weight.dtype != torch.float32 or ops is None
            or not torch.backends.mkldnn.is_available()
            or not hasattr(ops, "_reorder_convolution_weight")):
        return None
    c_out, c_in, _ = weight.shape
    packed: Tensor = ops._reorder_convolution_weight(
        weight.unsqueeze(2), [0, 0], [1, 1], [1, dilation], 1, [1, c_in, 1, columns]
    )  # (C_out, C_in, 1, k) in a blocked layout
    return packed


def packed_conv1d(x: Tensor, packed: Tensor, bias: Tensor, dilation: int) -> Tensor:
    """A valid (unpadded) conv of x [B, C_in, T] with a `prepack_cpu_weight` weight →
    [B, C_out, T − (k−1)·dilation], float32 on the CPU."""
    out: Tensor = torch.ops.mkldnn._convolution_pointwise(
        x.unsqueeze(2), packed, bias, [0, 0], [1, 1], [1, dilation], 1, "none", [], ""
    )  # (B, C_out, 1, T')
    return out.squeeze(2)


class CausalConv1d(nn.Module):
    """Causal Conv1d with weight norm, [B, C_in, T] → [B, C_out, T] (NeMo `CausalConv1dNorm`).

    Left zero padding of (k−1)·d columns; with a stream's state, the cache ``state[slot]``
    [B, C_in, (k−1)·d] holds the last input columns of the stream instead (spec §6.1).
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
        *, slot: int,
    ) -> None:
        super().__init__()
        if kernel_size < 2:
            raise ValueError("a causal conv needs a kernel of at least 2 (it keeps a cache)")
        self.dilation = dilation
        self.context = (kernel_size - 1) * dilation
        self.slot = slot
        self.conv = WeightNorm((out_channels, in_channels, kernel_size), out_channels)
        self.packed: Tensor | None = None  # set by `prepack` (CPU float32 only)

    def prepack(self, columns: int = 64) -> None:
        """Reorder the folded weight for the CPU's oneDNN conv once (no-op elsewhere, or before
        folding). Call it after the last move of the module; `.to()` drops it."""
        weight = self.conv.weight
        self.packed = None if weight is None else prepack_cpu_weight(
            weight.detach(), self.dilation, columns + self.context)

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        self.packed = None  # a moved or cast module would keep a stale packed copy
        return super()._apply(fn, recurse)

    def forward(self, x: Tensor, state: list[Tensor] | None = None) -> Tensor:
        if state is None:
            padded = F.pad(x, (self.context, 0))  # (B, C_in, P + T)
        else:
            cache = state[self.slot]  # (B, C_in, P)
            padded = torch.cat([cache, x], dim=-1)  # (B, C_in, P + T), a fresh tensor
            cache.copy_(padded[:, :, padded.shape[-1] - self.context:])
        if self.packed is not None and padded.dtype == torch.float32:
            return packed_conv1d(padded, self.packed, self.conv.bias, self.dilation)
        return F.conv1d(padded, self.conv.folded_weight(), self.conv.bias, dilation=self.dilation)


class CausalConvTranspose1d(nn.Module):
    """Causal grouped ConvTranspose1d with weight norm, [B, C_in, T] → [B, C_in/2, T·s]
    (NeMo `CausalConvTranspose1dNorm`, groups = C_out, kernel 2s, stride s).

    Output channel j sums inputs 2j and 2j+1. One-shot: the raw T·s + s columns, last s dropped.
    Streaming (spec §6.2): the cache ``state[slot]`` [B, C_out, s] is the un-biased overhang of
    the previous chunk, added to this chunk's first s raw columns.
    """

    def __init__(self, in_channels: int, rate: int, *, slot: int) -> None:
        super().__init__()
        self.rate = rate
        self.groups = in_channels // 2
        self.overhang = rate  # k − s with k = 2s
        self.slot = slot
        self.conv = WeightNorm((in_channels, 1, 2 * rate), in_channels // 2)

    def forward(self, x: Tensor, state: list[Tensor] | None = None) -> Tensor:
        weight, bias = self.conv.folded_weight(), self.conv.bias
        n = x.shape[-1] * self.rate
        if state is None:
            out = F.conv_transpose1d(x, weight, bias, stride=self.rate, groups=self.groups)
            return out[:, :, :n]  # (B, C_out, T·s)
        raw = F.conv_transpose1d(x, weight, None, stride=self.rate, groups=self.groups)
        tail = state[self.slot]  # (B, C_out, s)
        raw[:, :, : self.overhang] += tail  # overhang s <= T·s: it never reaches the new tail
        tail.copy_(raw[:, :, n:])
        return raw[:, :, :n] + bias[:, None]


class Snake(nn.Module):
    """x + sin²(αx) / (α + 1e-9), α per channel (``alpha`` [1, C, 1]); x [B, C, T]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(1, channels, 1), requires_grad=False)
        # 1 / (α + 1e-9), set by `fold`; a non-persistent buffer so it moves with the module
        self.inv_alpha: Tensor | None
        self.register_buffer("inv_alpha", None, persistent=False)

    @torch.no_grad()
    def fold(self) -> None:
        """Compute 1 / (α + 1e-9) once (at load, in α's dtype): the same values NeMo computes
        per call, without a per-call scalar op."""
        self.inv_alpha = (self.alpha + SNAKE_EPS).reciprocal()

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha
        inv = self.inv_alpha if self.inv_alpha is not None else (alpha + SNAKE_EPS).reciprocal()
        return x + inv * torch.sin(alpha * x).pow(2)


class _HalfSnakeInner(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.snake_channels = channels // 2
        self.snake_act = Snake(self.snake_channels)


class HalfSnake(nn.Module):
    """NeMo `CodecActivation("half_snake")`, [B, C, T] → a fresh [B, C, T]: Snake on channels
    [0, C//2), LeakyReLU 0.01 on the rest (27 → 13 + 14). Key: ``activation.snake_act.alpha``.

    The result is always a new tensor (`torch.cat`): spec §4, a fused half-snake that wrote into
    a recycled input buffer made the prior engine non-reproducible.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.activation = _HalfSnakeInner(channels)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation.snake_channels
        snake = self.activation.snake_act(x[:, :h])  # (B, C//2, T)
        leaky = F.leaky_relu(x[:, h:], LEAKY_SLOPE)  # (B, C − C//2, T)
        return torch.cat([snake, leaky], dim=1)
