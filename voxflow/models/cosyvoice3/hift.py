"""Causal HiFT vocoder (reference `CausalHiFTGenerator`, `cosyvoice/hifigan/generator.py`), spec §7.

mel [B, 80, T] float32 (ln-magnitude, 50 fps) → speech [B, 480·T] float32 in [−0.99, 0.99], 24 kHz.

    f0 = |F0 predictor(mel)|                  [B, T] Hz, computed in float64 (f0.py)
    s  = NSF source(f0)                       [B, 1, 480·T] (source.py)
    S  = STFT(s): n_fft 16, hop 4, Hann       [B, 18, 120·T + 1] (9 real, then 9 imaginary)
    x  = conv_pre(mel), k5, 4 frames lookahead          [B, C, T]
    3 stages i (×8, ×5, ×3 nearest + causal conv):      [B, C/2^(i+1), 8T | 40T | 120T(+1)]
         x += source_resblocks.i(source_downs.i(S)); x = mean of resblocks.{3i, 3i+1, 3i+2}(x)
    conv_post (k7) → magnitude exp(ch 0–8) ≤ 100, phase sin(ch 9–17) → iSTFT → clamp ±0.99

Every conv is causal (left zero padding (k−1)·d) except conv_pre (4 frames of lookahead) and the
F0 predictor's first conv (3 frames). Streaming (`finalize=False`, the whole accumulated mel of T
frames) therefore holds back 8 frames: it emits samples [0, 480·(T−8)), a prefix of the final
output (spec §7 "Streaming"). `HiFTStream` gets the same samples from a window of the mel, at a
cost that does not grow with the stream. C is `base_channels`: 512 full size, 32 tiny.

State dict: the reference's 328 keys (spec §3), in its order; weight-normed convs store g and v
(`*.parametrizations.weight.original{0,1}`), see wnconv.py. The fixed noise buffer `sine_waves`
is not in it: set it with `set_sine_waves` (spec §8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxflow.models.cosyvoice3.f0 import F0_LOOKAHEAD, CausalF0Predictor
from voxflow.models.cosyvoice3.source import SourceModule
from voxflow.models.cosyvoice3.wnconv import WeightNormConv1d

SNAKE_EPS = 1e-9
"""Added to Snake's α before dividing (spec §7: snake(x) = x + sin²(αx)/(α + 1e-9))."""

MAGNITUDE_MAX = 100.0
"""iSTFT magnitudes are clipped at this value (spec §7: mag = min(exp(·), 100))."""

POST_LRELU_SLOPE = 0.01
"""Slope of the leaky ReLU before `conv_post` (torch's default; the stages use 0.1), spec §7."""


@dataclass(frozen=True)
class HiFTConfig:
    """Constructor arguments of the reference `CausalHiFTGenerator` (spec §2, `tiny_configs.json`).

    Defaults are the full-size model; `tiny()` is the fixture model. Frequencies in Hz, kernel
    sizes and hops in samples of the signal each layer runs on.
    """

    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    n_fft: int = 16
    hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    conv_pre_look_right: int = 4
    f0_cond_channels: int = 512

    def __post_init__(self) -> None:
        if self.sampling_rate == 22050:
            raise ValueError("the 22.05 kHz HiFT (reference SineGen, not SineGen2) is not built")
        stages = len(self.upsample_rates)
        if not (
            len(self.upsample_kernel_sizes) == len(self.source_resblock_kernel_sizes)
            == len(self.source_resblock_dilation_sizes) == stages
        ):
            raise ValueError("upsample rates, their kernels and the source resblocks must pair up")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError("resblock kernel sizes and dilation sizes must pair up")

    @classmethod
    def tiny(cls) -> HiFTConfig:
        """The fixture model (spec §2: base / F0 cond channels 32 / 32)."""
        return cls(base_channels=32, f0_cond_channels=32)

    @classmethod
    def from_reference_args(cls, args: dict[str, Any], f0_args: dict[str, Any]) -> HiFTConfig:
        """From the reference's keyword arguments (`tiny_configs.json` `hift.args`, and
        `hift.f0_predictor.args`); unknown keys raise `TypeError`."""
        a = dict(args)
        istft = a.pop("istft_params", {"n_fft": 16, "hop_len": 4})
        tuples = ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes",
                  "source_resblock_kernel_sizes")
        for key in tuples:
            if key in a:
                a[key] = tuple(a[key])
        for key in ("resblock_dilation_sizes", "source_resblock_dilation_sizes"):
            if key in a:
                a[key] = tuple(tuple(d) for d in a[key])
        if f0_args.get("in_channels", a.get("in_channels", 80)) != a.get("in_channels", 80):
            raise ValueError("the F0 predictor and the generator must take the same mel bins")
        if f0_args.get("num_class", 1) != 1:
            raise ValueError("the F0 predictor has one output class")
        return cls(
            **a,
            n_fft=istft["n_fft"],
            hop_len=istft["hop_len"],
            f0_cond_channels=f0_args.get("cond_channels", 512),
        )

    @property
    def stft_frames_per_frame(self) -> int:
        """STFT frames per mel frame: prod(upsample_rates) = 120."""
        return math.prod(self.upsample_rates)

    @property
    def samples_per_frame(self) -> int:
        """Output samples per mel frame: 120 · hop_len = 480 (24 kHz / 50 fps)."""
        return self.stft_frames_per_frame * self.hop_len

    @property
    def holdback_frames(self) -> int:
        """Mel frames a streaming call holds back: 3 (F0) + 4 (conv_pre) + 1 (trim) = 8."""
        return F0_LOOKAHEAD + self.conv_pre_look_right + 1


class Snake(nn.Module):
    """snake(x) = x + sin²(αx) / (α + 1e-9), α per channel ([C], `alpha`); x [B, C, T]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha[None, :, None]  # [1, C, 1]
        return x + (1.0 / (alpha + SNAKE_EPS)) * torch.sin(x * alpha).pow(2)


class ResBlock(nn.Module):
    """Causal HiFi-GAN residual block, [B, C, T] → [B, C, T].

    For each dilation d: x += conv2(snake(conv1_d(snake(x)))), conv1 dilated by d, conv2 not.
    """

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        k = kernel_size
        self.convs1 = nn.ModuleList(
            WeightNormConv1d(channels, channels, k, dilation=d, pad_left=d * (k - 1))
            for d in dilations
        )
        self.convs2 = nn.ModuleList(
            WeightNormConv1d(channels, channels, k, pad_left=k - 1) for _ in dilations
        )
        self.activations1 = nn.ModuleList(Snake(channels) for _ in dilations)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in dilations)

    def forward(self, x: Tensor) -> Tensor:
        for conv1, conv2, act1, act2 in zip(
            self.convs1, self.convs2, self.activations1, self.activations2, strict=True
        ):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class CausalHiFTGenerator(nn.Module):
    """The vocoder; see the module docstring for the data flow and `inference` for the API.

    Submodules in the reference's state-dict order: `m_source`, `conv_pre`, `ups`,
    `source_downs`, `source_resblocks`, `resblocks`, `conv_post`, `f0_predictor`.
    """

    def __init__(self, config: HiFTConfig | None = None) -> None:
        super().__init__()
        c = self.config = config or HiFTConfig()
        self.m_source = SourceModule(
            sampling_rate=c.sampling_rate,
            samples_per_frame=c.samples_per_frame,
            nb_harmonics=c.nb_harmonics,
            sine_amp=c.nsf_alpha,
            noise_std=c.nsf_sigma,
            voiced_threshold=c.nsf_voiced_threshold,
        )
        look = c.conv_pre_look_right
        self.conv_pre = WeightNormConv1d(c.in_channels, c.base_channels, look + 1, pad_right=look)
        chans = [c.base_channels // 2**i for i in range(len(c.upsample_rates) + 1)]
        self.ups = nn.ModuleList(
            WeightNormConv1d(chans[i], chans[i + 1], k, pad_left=k - 1)
            for i, k in enumerate(c.upsample_kernel_sizes)
        )
        # Stage i meets the source STFT downsampled by the product of the later stages' rates.
        down_rates = [math.prod(c.upsample_rates[i + 1:]) for i in range(len(c.upsample_rates))]
        n_spec = c.n_fft + 2  # 9 real + 9 imaginary bins
        self.source_downs = nn.ModuleList(
            nn.Conv1d(n_spec, chans[i + 1], 2 * u if u > 1 else 1, stride=u)
            for i, u in enumerate(down_rates)
        )
        self.down_rates = down_rates
        self.source_resblocks = nn.ModuleList(
            ResBlock(chans[i + 1], k, d)
            for i, (k, d) in enumerate(
                zip(c.source_resblock_kernel_sizes, c.source_resblock_dilation_sizes, strict=True)
            )
        )
        self.resblocks = nn.ModuleList(
            ResBlock(chans[i + 1], k, d)
            for i in range(len(c.upsample_rates))
            for k, d in zip(c.resblock_kernel_sizes, c.resblock_dilation_sizes, strict=True)
        )
        self.conv_post = WeightNormConv1d(chans[-1], n_spec, 7, pad_left=6)
        self.f0_predictor = CausalF0Predictor(c.in_channels, c.f0_cond_channels)

    # -- set-up ---------------------------------------------------------------------------

    def set_sine_waves(self, sine_waves: Tensor) -> None:
        """Install the fixed source-noise buffer [1, N, 9] (spec §8); see `SourceModule`."""
        self.m_source.set_sine_waves(sine_waves)

    def fold_weight_norm(self) -> None:
        """Fold every weight norm once (float32; the F0 predictor's in float64). Call it after
        loading weights and after `.to(device)`; without it the weights are folded per call."""
        for module in self.modules():
            if isinstance(module, WeightNormConv1d):
                module.fold(torch.float32)
        self.f0_predictor.fold()

    # -- signal helpers -------------------------------------------------------------------

    def _window(self, device: torch.device) -> Tensor:
        # Periodic Hann in float64, then cast (as scipy's get_window("hann", fftbins=True)).
        n = self.config.n_fft
        return torch.hann_window(n, periodic=True, dtype=torch.float64).to(device, torch.float32)

    def _stft(self, s: Tensor) -> Tensor:
        """s [B, L] → [B, 18, L / 4 + 1]: real bins 0–8 then imaginary; centred, reflect pad."""
        c = self.config
        spec = torch.stft(
            s, c.n_fft, c.hop_len, c.n_fft, window=self._window(s.device),
            center=True, pad_mode="reflect", return_complex=True,
        )  # [B, 9, N] complex
        return torch.cat([spec.real, spec.imag], dim=1)

    def _istft(self, magnitude: Tensor, phase: Tensor) -> Tensor:
        """magnitude, phase [B, 9, N] → wave [B, 4·(N − 1)] (centred, Hann)."""
        c = self.config
        magnitude = torch.clamp(magnitude, max=MAGNITUDE_MAX)
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        return torch.istft(spec, c.n_fft, c.hop_len, c.n_fft, window=self._window(spec.device))

    # -- the network ----------------------------------------------------------------------

    def decode(self, mel: Tensor, s: Tensor, finalize: bool = True) -> Tensor:
        """mel [B, 80, T'], source s [B, 1, 480·T''] → speech [B, samples] float32.

        Final: T' = T'' = T, 480·T samples. Not final (mel and s already without the F0's 3
        lookahead frames): T' = T'' = T − 3; conv_pre uses the last 4 mel frames as lookahead
        only (T − 7 frames out), the source STFT is cut to match, and the iSTFT's last 480
        samples are dropped: 480·(T − 8) samples.
        """
        c = self.config
        spec = self._stft(s.squeeze(1))  # [B, 18, 120·T'' + 1]
        if finalize:
            x = self.conv_pre(mel)  # [B, C, T']
        else:
            x = self.conv_pre(mel, pad_right=0)  # [B, C, T' − 4]
            spec = spec[:, :, : spec.shape[-1] - c.stft_frames_per_frame * c.conv_pre_look_right]
        n_kernels = len(c.resblock_kernel_sizes)
        for i, (rate, up) in enumerate(zip(c.upsample_rates, self.ups, strict=True)):
            x = F.leaky_relu(x, c.lrelu_slope)
            x = up(x.repeat_interleave(rate, dim=-1))  # [B, C/2^(i+1), frames · rate]
            if i == len(self.ups) - 1:
                x = torch.cat([x[:, :, 1:2], x], dim=-1)  # reflect-pad 1 left: 120·T + 1 frames
            x = x + self.source_resblocks[i](self._source_down(i, spec))
            xs = self.resblocks[i * n_kernels](x)
            for j in range(1, n_kernels):
                xs = xs + self.resblocks[i * n_kernels + j](x)
            x = xs / n_kernels
        x = self.conv_post(F.leaky_relu(x, POST_LRELU_SLOPE))  # [B, 18, 120·T + 1]
        n_bins = c.n_fft // 2 + 1
        speech = self._istft(torch.exp(x[:, :n_bins]), torch.sin(x[:, n_bins:]))
        if not finalize:
            speech = speech[:, : speech.shape[-1] - c.samples_per_frame]
        return torch.clamp(speech, -c.audio_limit, c.audio_limit)

    def _source_down(self, i: int, spec: Tensor) -> Tensor:
        """Source STFT [B, 18, N] → stage i's rate: kernel 2u, stride u, u − 1 zero frames left."""
        u = self.down_rates[i]
        if u > 1:
            spec = F.pad(spec, (u - 1, 0))
        down: nn.Module = self.source_downs[i]
        return down(spec)

    def forward(self, mel: Tensor, finalize: bool = True) -> tuple[Tensor, Tensor]:
        """See `inference` (this one keeps autograd if enabled)."""
        if mel.dim() != 3 or mel.shape[1] != self.config.in_channels:
            bins = self.config.in_channels
            raise ValueError(f"mel must be [B, {bins}, T], got {list(mel.shape)}")
        frames = mel.shape[-1]
        least = 1 if finalize else self.config.holdback_frames
        if frames < least:
            raise ValueError(f"a {'final' if finalize else 'streaming'} HiFT call needs "
                             f"at least {least} mel frames, got {frames}")
        mel = mel.to(torch.float32)
        f0 = self.f0_predictor(mel, finalize=finalize).to(torch.float32)  # [B, T or T − 3] Hz
        s = self.m_source(f0)  # [B, 1, 480 · f0 frames]
        if not finalize:
            mel = mel[:, :, : frames - F0_LOOKAHEAD]
        return self.decode(mel, s, finalize=finalize), s

    @torch.inference_mode()
    def inference(self, mel: Tensor, finalize: bool = True) -> tuple[Tensor, Tensor]:
        """mel [B, 80, T] → (speech [B, n] float32 in ±0.99, source s [B, 1, m] float32), 24 kHz.

        Final: n = m = 480·T. Streaming (`finalize=False`, T ≥ 8 accumulated frames, the whole
        mel so far, not a window): m = 480·(T − 3) and n = 480·(T − 8), a prefix of what the final
        call on a longer mel gives (spec §7). Needs `set_sine_waves` with at least m samples.
        """
        return self.forward(mel, finalize=finalize)

    def emitted_samples(self, frames: int, finalize: bool) -> int:
        """Samples a call on `frames` accumulated mel frames returns: 480·T or 480·(T − 8)."""
        held = 0 if finalize else self.config.holdback_frames
        return self.config.samples_per_frame * max(frames - held, 0)


F0_CONTEXT_FRAMES = 8
"""Mel frames left of an F0 frame that reach it: condnet.{2,4,6,8}, four k3 convs with 2 frames
of left padding each (spec §7; condnet.0 looks only right). An F0 predictor run on a window
gives exact F0 from its 9th frame on."""

DECODER_CONTEXT_FRAMES = 32
"""Mel frames a streamed HiFT window reaches back before the first sample it emits.

The decoder's left receptive field, summed over stages at each stage's rate (positions per mel
frame 8, 40, 120): the causal upsample convs (k 16, 11, 7) and the resblocks (k 11, dilations
1/3/5 then 1: 12·(k − 1) = 120 positions) reach 135/8 + 130/40 + 126/120 ≈ 21.2 frames, the
source branch (source_downs k 2u stride u, source resblocks k ≤ 11) less, conv_post (k7) and the
iSTFT (n_fft 16) a few samples. 32 frames leave a margin over that; a window so started gives
the whole-mel output up to float rounding (tests/unit/test_cosyvoice3_hift.py)."""


class HiFTStream:
    """One request's streamed vocoding: the accumulated mel, its settled F0 and the samples
    already emitted (spec §7 "Streaming", §9.7 items 3-4).

    The reference reruns HiFT on the whole accumulated mel at every push, so a long stream costs
    O(F²). Here each push runs HiFT on a window instead: the F0 predictor on the new frames plus
    `F0_CONTEXT_FRAMES` (F0 of earlier frames is kept: it never changes once its 3 lookahead
    frames exist), the source on the window with the phase summed over every frame
    (`SourceModule.window`), and the decoder from `DECODER_CONTEXT_FRAMES` before the first new
    sample. The pieces equal the reference's (whole-mel) pieces up to float rounding, and
    concatenated they are the final call's output on the whole mel.
    """

    def __init__(self, hift: CausalHiFTGenerator) -> None:
        self.hift = hift
        self.mel: Tensor | None = None  # [B, 80, F] accumulated
        self.f0: Tensor | None = None  # [B, settled F0 frames] Hz float32
        self.speech_offset = 0  # samples emitted so far
        self.window_frames = 0  # mel frames the last push vocoded
        self.finished = False

    def push(self, mel: Tensor, finalize: bool) -> Tensor:
        """Append mel [B, 80, f] and return the new samples [B, n] (n may be 0): a streamed push
        emits up to 480·(F − 8) samples in all (F accumulated frames), the final one up to
        480·F.

        Raises:
            RuntimeError: the stream is already finalized.
        """
        if self.finished:
            raise RuntimeError("this HiFT stream is already finalized")
        self.mel = mel if self.mel is None else torch.cat([self.mel, mel], dim=-1)
        frames = self.mel.shape[-1]
        c = self.hift.config
        if not finalize and frames < c.holdback_frames:
            return self.mel.new_zeros(self.mel.shape[0], 0)
        with torch.inference_mode():
            f0 = self._settle_f0(finalize)
            spf = c.samples_per_frame
            start = max(0, self.speech_offset // spf - DECODER_CONTEXT_FRAMES)
            source = self.hift.m_source.window(f0, start)  # [B, 1, 480·(F0 frames − start)]
            end = frames if finalize else frames - F0_LOOKAHEAD
            window = self.mel[:, :, start:end].to(torch.float32)
            speech = self.hift.decode(window, source, finalize=finalize)
        self.window_frames = window.shape[-1] + (0 if finalize else F0_LOOKAHEAD)
        piece = speech[:, self.speech_offset - start * spf :]
        self.speech_offset = start * spf + speech.shape[-1]
        self.finished = finalize
        return piece

    def _settle_f0(self, finalize: bool) -> Tensor:
        """F0 [B, F − 3] (streamed) or [B, F] (final) Hz float32: the frames settled before,
        then the predictor's on a window that reaches `F0_CONTEXT_FRAMES` back."""
        assert self.mel is not None
        settled = 0 if self.f0 is None else self.f0.shape[1]
        first = max(0, settled - F0_CONTEXT_FRAMES)
        new = self.hift.f0_predictor(self.mel[:, :, first:].to(torch.float32),
                                     finalize=finalize).to(torch.float32)
        new = new[:, settled - first :]
        self.f0 = new if self.f0 is None else torch.cat([self.f0, new], dim=1)
        return self.f0
