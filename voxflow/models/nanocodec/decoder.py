"""NanoCodec's causal HiFi-GAN decoder (NeMo `CausalHiFiGANDecoder`, spec §4).

latent [B, 32, T] float → audio [B, 1024·T] in [−1, 1] at 22,050 Hz (tiny: 96·T).

    pre_conv: causal Conv1d 32 → C₀, k7                               [B, 864, T]
    per stage i (rates 8, 8, 4, 2, 2; C_in 864 → 54):
        HalfSnake(C_in) → up_i: causal grouped ConvTranspose1d, k 2r, stride r
                                                                      [B, C_in/2, T·Πr]
        res_i: mean of 3 kernel branches × 3 dilated residual blocks   (same shape)
    HalfSnake(27) → post_conv: causal Conv1d 27 → 1, k3 → clamp ±1    [B, 1024·T]

Every op is causal and zero-initialised, so a stream started from zero state and fed chunks of
any size reproduces the one-shot decode (spec §6): `forward` with a ``state`` (the cache tensors
of config.cache_inventory, in that order; see stream.py) continues that stream.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from voxflow.models.nanocodec.config import DecoderConfig
from voxflow.models.nanocodec.fsq import frame_mask
from voxflow.models.nanocodec.layers import (
    CausalConv1d,
    CausalConvTranspose1d,
    HalfSnake,
    Snake,
    WeightNorm,
)
from voxflow.models.nanocodec.resblocks import HiFiGANResLayer, mask_time


class NanoCodecDecoder(nn.Module):
    """The decoder with NeMo's state-dict layout (387 tensors full size, 311 tiny, unfolded).

    Build on ``meta`` (``with torch.device("meta")``) and load with loader.load_decoder, which
    folds weight norm once. Each causal layer's ``slot`` indexes the stream state.
    """

    def __init__(self, config: DecoderConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or DecoderConfig()
        chans = c.stage_channels
        self.pre_conv = CausalConv1d(c.input_dim, chans[0], c.in_kernel_size, slot=0)
        self.activations = nn.ModuleList(HalfSnake(chans[i]) for i in range(len(chans) - 1))
        ups, res = [], []
        slot = 1
        for i, rate in enumerate(c.up_sample_rates):
            ups.append(CausalConvTranspose1d(chans[i], rate, slot=slot))
            layer = HiFiGANResLayer(chans[i + 1], c.resblock_kernel_sizes,
                                    c.resblock_dilation_sizes, slot=slot + 1)
            res.append(layer)
            slot += 1 + layer.num_slots
        self.up_sample_conv_layers = nn.ModuleList(ups)
        self.res_layers = nn.ModuleList(res)
        self.post_activation = HalfSnake(chans[-1])
        self.post_conv = CausalConv1d(chans[-1], 1, c.out_kernel_size, slot=slot)
        self.num_slots = slot + 1

    def fold_weight_norm(self) -> None:
        """Fold every conv's weight norm, and each Snake's 1/(α + 1e-9), in the parameters'
        dtype (once, at load, after any dtype or device move; spec §5)."""
        for module in self.modules():
            if isinstance(module, WeightNorm | Snake):
                module.fold()

    def prepack(self) -> None:
        """Reorder every causal conv's folded weight once for the CPU's oneDNN kernels (float32
        on the CPU only; elsewhere a no-op). After `fold_weight_norm` and any move."""
        for module in self.modules():
            if isinstance(module, CausalConv1d):
                module.prepack()

    @property
    def folded(self) -> bool:
        return all(m.folded for m in self.modules() if isinstance(m, WeightNorm))

    def forward(
        self,
        latent: Tensor,
        lengths: Tensor | None = None,
        state: list[Tensor] | None = None,
        taps: dict[str, Tensor] | None = None,
    ) -> Tensor:
        """latent [B, 32, T] → audio [B, spf·T], in the weights' dtype, clamped to [−1, 1].

        ``lengths`` [B] int (frames): every conv output past an item's length is zeroed, as NeMo
        does (one-shot only). ``state``: a stream's caches, updated in place (streaming; no
        lengths). ``taps``: if given, filled with the intermediates NeMo's fixtures name
        (``pre_conv``, ``act{i}``, ``up{i}``, ``res{i}``, ``post_act``, ``pre_clamp``).
        """
        if state is not None and lengths is not None:
            raise ValueError("a streamed chunk has no lengths (one stream per state)")
        tap = taps.__setitem__ if taps is not None else (lambda name, value: None)
        frames = latent.shape[-1]
        mask = None if lengths is None else frame_mask(lengths, frames)  # (B, 1, T)
        x = mask_time(self.pre_conv(latent, state), mask)  # (B, C0, T)
        tap("pre_conv", x)
        stages = zip(self.config.up_sample_rates, self.activations, self.up_sample_conv_layers,
                     self.res_layers, strict=True)
        for i, (rate, act, up, res) in enumerate(stages):
            x = act(x)
            tap(f"act{i}", x)
            frames *= rate
            if lengths is not None:
                lengths = lengths * rate
                mask = frame_mask(lengths, frames)  # (B, 1, T·Πr)
            x = mask_time(up(x, state), mask)  # (B, C_i/2, T·Πr)
            tap(f"up{i}", x)
            x = res(x, mask, state)
            tap(f"res{i}", x)
        x = self.post_activation(x)
        tap("post_act", x)
        x = mask_time(self.post_conv(x, state), mask)[:, 0]  # (B, 1, spf·T) -> (B, spf·T)
        tap("pre_clamp", x)
        return torch.clamp(x, -1.0, 1.0)
