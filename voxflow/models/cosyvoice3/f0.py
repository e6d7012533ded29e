"""HiFT F0 predictor (reference `CausalConvRNNF0Predictor`), run in float64 (spec §7).

mel [B, 80, T] (ln-magnitude, 50 fps) → f0 [B, T] in Hz, float64:

    condnet.0  k4, looks 3 frames right (final: 3 zero frames appended), ELU
    condnet.2, .4, .6, .8  k3, causal (2 zero frames on the left), ELU
    classifier  Linear(C, 1), then |·|

Not final (streaming), the last 3 input frames are lookahead only: T − 3 frames out.
The reference converts this module to float64 *in place* on its first call, so its weights are
float64 from then on; here the float32 parameters stay as they are and are cast to float64 per
call (or once, by `fold()`), which gives the same numbers without changing the state dict.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxflow.models.cosyvoice3.wnconv import WeightNormConv1d

F0_LOOKAHEAD = 3
"""Frames of mel that condnet.0 (kernel 4) reads to the right of each output frame (spec §7)."""

F0_DTYPE = torch.float64
"""The F0 predictor's compute dtype (spec §7, §13: its precision matters for causal inference)."""


class CausalF0Predictor(nn.Module):
    """State dict: `condnet.{0,2,4,6,8}` (weight-normed, [C,80,4] then [C,C,3]), `classifier` [1,C].

    `condnet` is a Sequential with the ELUs at the odd indices, so the conv indices match the
    reference's keys.
    """

    def __init__(self, in_channels: int = 80, cond_channels: int = 512) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            WeightNormConv1d(in_channels, cond_channels, F0_LOOKAHEAD + 1),
            nn.ELU(),
        ]
        for _ in range(4):
            layers += [WeightNormConv1d(cond_channels, cond_channels, 3, pad_left=2), nn.ELU()]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(cond_channels, 1)

    def convs(self) -> list[WeightNormConv1d]:
        return [m for m in self.condnet if isinstance(m, WeightNormConv1d)]

    def fold(self) -> None:
        """Fold the weight norm once, in float64 (see `WeightNormConv1d.fold`)."""
        for conv in self.convs():
            conv.fold(F0_DTYPE)

    def forward(self, mel: Tensor, finalize: bool = True) -> Tensor:
        """mel [B, 80, T] (any float dtype) → f0 [B, T] (final) or [B, T − 3] (not final), Hz, fp64.

        Not final needs T > 3 (the last 3 frames only feed condnet.0 as lookahead).
        """
        x = mel.to(F0_DTYPE)
        if finalize:
            x = F.pad(x, (0, F0_LOOKAHEAD))  # [B, 80, T + 3]: zero lookahead at the end
        elif x.shape[-1] <= F0_LOOKAHEAD:
            raise ValueError(f"a non-final F0 call needs more than {F0_LOOKAHEAD} mel frames")
        x = self.condnet(x)  # [B, C, T_out]
        w = self.classifier.weight.to(F0_DTYPE)  # [1, C]
        b = self.classifier.bias.to(F0_DTYPE)  # [1]
        f0 = F.linear(x.transpose(1, 2), w, b)  # [B, T_out, 1]
        return torch.abs(f0.squeeze(-1))  # [B, T_out]
