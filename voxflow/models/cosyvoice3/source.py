"""HiFT source excitation (reference `SourceModuleHnNSF` with causal `SineGen2`), spec §7.

f0 [B, T] (Hz per mel frame, float32) → s [B, 1, 480·T] in (−1, 1), float32, 24 kHz:

1. per harmonic h = 1…9: rad = frac(h·f0 / 24000) per frame (cycles per sample);
2. phase = cumsum over frames · 2π · 480, held for the frame's 480 samples; sine = 0.1·sin(phase);
3. uv = f0 > 10 Hz; noise = (0.003·uv + (0.1/3)·(1 − uv)) · sine_waves[:, :480·T];
4. s = tanh(l_linear(sine·uv + noise)).

`sine_waves` is the reference's fixed uniform [0, 1) buffer [1, N, 9] (spec §8). It is not part of
the state dict: set it with `set_sine_waves` (tiny fixtures: `buf.sine_waves_prefix`, 48,000
samples; full size: the replayed 7.2M-sample buffer). A call needing more samples than it holds
raises `ValueError`. The reference's `rand_ini` (initial phases) and `m_source.uv` (noise branch)
do not affect the output and are not modelled (spec §7, fixtures README §2).

The phase reaches ~1e4 rad, so float32 rounding shows at ~1e-5 in s; the operations and their
order follow the reference so that the float32 result matches it closely.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

SAMPLES_PER_FRAME = 480
"""24 kHz samples per 50 fps mel frame: prod(upsample_rates) · iSTFT hop = 8·5·3·4 (spec §2)."""


class SourceModule(nn.Module):
    """The generator's `m_source`. State dict: `l_linear.weight` [1, 9], `l_linear.bias` [1].

    Buffer (non-persistent): `sine_waves` [1, N, harmonics + 1] float32, uniform [0, 1).
    """

    sine_waves: Tensor

    def __init__(
        self,
        sampling_rate: int = 24000,
        samples_per_frame: int = SAMPLES_PER_FRAME,
        nb_harmonics: int = 8,
        sine_amp: float = 0.1,
        noise_std: float = 0.003,
        voiced_threshold: float = 10.0,
    ) -> None:
        super().__init__()
        self.sampling_rate = sampling_rate
        self.samples_per_frame = samples_per_frame
        self.dim = nb_harmonics + 1
        self.sine_amp = sine_amp
        self.noise_std = noise_std
        self.voiced_threshold = voiced_threshold
        self.l_linear = nn.Linear(self.dim, 1)
        self.register_buffer("sine_waves", torch.zeros(1, 0, self.dim), persistent=False)

    def set_sine_waves(self, sine_waves: Tensor) -> None:
        """Install the fixed noise buffer [1, N, harmonics + 1] (cast to float32, kept on this
        module's device); N samples cap the source at N / 480 frames."""
        if sine_waves.dim() != 3 or sine_waves.shape[0] != 1 or sine_waves.shape[2] != self.dim:
            raise ValueError(
                f"sine_waves must be [1, N, {self.dim}], got {list(sine_waves.shape)}"
            )
        device = self.l_linear.weight.device
        self.sine_waves = sine_waves.to(device=device, dtype=torch.float32)

    def forward(self, f0: Tensor) -> Tensor:
        """f0 [B, T] Hz float32 → s [B, 1, 480·T] float32."""
        return self.window(f0, 0)

    def window(self, f0: Tensor, start: int) -> Tensor:
        """The source of frames [start, T) only: f0 [B, T] Hz float32 (every frame from 0: the
        phase is a cumulative sum over all of them) → s [B, 1, 480·(T − start)] float32, equal
        bit for bit to ``forward(f0)[:, :, 480·start:]`` (the same cumulative sum, sliced after;
        the noise read from sample 480·start). The frame-rate phase sum is the only work done
        for frames before `start`: a streamed HiFT window (`HiFTStream`) costs its own length.

        Raises:
            ValueError: `start` outside [0, T], or more samples than `sine_waves` holds.
        """
        b, t = f0.shape
        if not 0 <= start <= t:
            raise ValueError(f"window start {start} is outside [0, {t}] frames")
        n = t * self.samples_per_frame
        if n > self.sine_waves.shape[1]:
            raise ValueError(
                f"the source needs {n} samples of sine_waves but only "
                f"{self.sine_waves.shape[1]} are set ({t} frames asked)"
            )
        harmonics = torch.arange(1, self.dim + 1, dtype=f0.dtype, device=f0.device)
        fn = f0.unsqueeze(-1) * harmonics  # [B, T, 9] Hz
        rad = (fn / self.sampling_rate) % 1  # [B, T, 9] cycles per sample, one value per frame
        phase = torch.cumsum(rad, dim=1)[:, start:] * 2 * math.pi  # [B, T − start, 9]
        phase = phase * self.samples_per_frame  # rad at each frame's first sample
        phase = phase.repeat_interleave(self.samples_per_frame, dim=1)  # [B, L, 9]
        sines = torch.sin(phase) * self.sine_amp

        f0_up = f0[:, start:].repeat_interleave(self.samples_per_frame, dim=1).unsqueeze(-1)
        uv = (f0_up > self.voiced_threshold).to(torch.float32)  # [B, L, 1]
        noise_amp = uv * self.noise_std + (1 - uv) * self.sine_amp / 3
        noise = noise_amp * self.sine_waves[:, start * self.samples_per_frame : n]  # [B, L, 9]
        excitation = sines * uv + noise
        s = torch.tanh(self.l_linear(excitation))  # [B, L, 1]
        return s.transpose(1, 2)  # [B, 1, L]
