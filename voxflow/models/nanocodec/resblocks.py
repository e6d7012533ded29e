"""HiFi-GAN residual layer of one decoder stage (NeMo `HiFiGANResLayer`, spec §4 step 2.3).

Three branches (kernels 3, 7, 11) run on the same input and are averaged (÷3). Each branch
chains three `ResidualBlock`s with dilations 1, 3, 5:
y = x + skip_conv(HalfSnake_b(input_conv(HalfSnake_a(x)))), input_conv dilated, skip_conv not.
With lengths, every conv output is zeroed past its item's length (NeMo `mask_sequence_tensor`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from voxflow.models.nanocodec.layers import CausalConv1d, HalfSnake


def mask_time(x: Tensor, mask: Tensor | None) -> Tensor:
    """x [B, C, T] with columns where ``mask`` [B, 1, T] is False set to exactly 0."""
    return x if mask is None else torch.where(mask, x, 0.0)


class ResidualBlock(nn.Module):
    """One dilation slot: [B, C, T] → [B, C, T]; its two convs own slots ``slot``, ``slot + 1``."""

    def __init__(self, channels: int, kernel_size: int, dilation: int, *, slot: int) -> None:
        super().__init__()
        self.input_activation = HalfSnake(channels)
        self.input_conv = CausalConv1d(channels, channels, kernel_size, dilation, slot=slot)
        self.skip_activation = HalfSnake(channels)
        self.skip_conv = CausalConv1d(channels, channels, kernel_size, slot=slot + 1)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, state: list[Tensor] | None = None
    ) -> Tensor:
        h = mask_time(self.input_conv(self.input_activation(x), state), mask)
        res = mask_time(self.skip_conv(self.skip_activation(h), state), mask)
        return x + res


class HiFiGANResBlock(nn.Module):
    """One branch (one kernel size): the dilation slots chained, [B, C, T] → [B, C, T]."""

    def __init__(
        self, channels: int, kernel_size: int, dilations: tuple[int, ...], *, slot: int
    ) -> None:
        super().__init__()
        self.res_blocks = nn.ModuleList(
            ResidualBlock(channels, kernel_size, d, slot=slot + 2 * m)
            for m, d in enumerate(dilations)
        )

    def forward(
        self, x: Tensor, mask: Tensor | None = None, state: list[Tensor] | None = None
    ) -> Tensor:
        for block in self.res_blocks:
            x = block(x, mask, state)
        return x


class HiFiGANResLayer(nn.Module):
    """A stage's residual layer: the mean of its kernel branches, [B, C, T] → [B, C, T].

    Uses 2 · len(kernels) · len(dilations) consecutive cache slots from ``slot`` (18).
    """

    def __init__(
        self, channels: int, kernels: tuple[int, ...], dilations: tuple[int, ...], *, slot: int
    ) -> None:
        super().__init__()
        per_branch = 2 * len(dilations)
        self.num_slots = per_branch * len(kernels)
        self.res_blocks = nn.ModuleList(
            HiFiGANResBlock(channels, k, dilations, slot=slot + per_branch * j)
            for j, k in enumerate(kernels)
        )

    def forward(
        self, x: Tensor, mask: Tensor | None = None, state: list[Tensor] | None = None
    ) -> Tensor:
        total = self.res_blocks[0](x, mask, state)
        for branch in self.res_blocks[1:]:
            total = total + branch(x, mask, state)
        return total / len(self.res_blocks)
