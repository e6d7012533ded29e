"""CosyVoice3's flow: speech tokens -> 80-bin mel (spec §6; reference `cosyvoice/flow/flow.py::
CausalMaskedDiffWithDiT` and `cosyvoice/flow/flow_matching.py::CausalConditionalCFM`).

Units: tokens at 25 Hz, mel frames at 50 fps (`token_mel_ratio` 2), mel is ln-magnitude float32,
channels-first [B, 80, T] unless stated. P = prompt tokens, N = target tokens; the prompt mel has
2P frames.

Parameter names equal the reference `flow.pt` state dict (spec §3): 330 tensors / 332,257,088
parameters at full size, 50 / 226,976 for the tiny fixture config. The fixed noise buffer
`rand_noise` (spec §8) is not in the state dict: it is drawn here (seed 0, then randn(1, 80, 15000))
or passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from voxflow.models.cosyvoice3.dit import DiT
from voxflow.models.cosyvoice3.noise import flow_rand_noise
from voxflow.models.cosyvoice3.precision import cudnn_off

# Spec §8: noise seed, and the buffer's frames (15000 = 300 s at 50 fps, the prompt+speech cap).
NOISE_FRAMES = 15000
MEL_BINS = 80
# Spec §6 "Euler + CFG": 10 steps, cosine t-schedule, guidance rate 0.7.
N_TIMESTEPS = 10
CFG_RATE = 0.7
# Spec §6 "Conditioning" 3: leaky_relu slope after the lookahead conv (torch's default 0.01).
PRE_LOOKAHEAD_SLOPE = 0.01

# A step observer: (step index 0..9, t fed [1], x entering the step [B, 80, T],
# raw estimator output [2B, 80, T]: rows 0..B-1 conditional, B..2B-1 unconditional).
StepHook = Callable[[int, Tensor, Tensor, Tensor], None]


@dataclass(frozen=True)
class FlowConfig:
    """Constructor sizes (spec §2; `tiny_configs.json` for the tiny values). Defaults: full size."""

    vocab_size: int = 6561
    input_size: int = 80
    output_size: int = 80
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    pre_lookahead_channels: int = 1024
    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: int = 2
    static_chunk_size: int = 50  # mel frames = 2 x token hop 25
    num_decoding_left_chunks: int = -1
    inference_cfg_rate: float = CFG_RATE

    @classmethod
    def tiny(cls) -> FlowConfig:
        """The tiny random-weight fixture config (`tiny_configs.json` "flow")."""
        return cls(vocab_size=81, pre_lookahead_channels=32, dim=64, depth=2, heads=4,
                   dim_head=16, static_chunk_size=10)


def fixed_noise(frames: int = NOISE_FRAMES) -> Tensor:
    """The flow's fixed noise (spec §8): seed 0, then randn(1, 80, 15000), CPU, float32, its
    sha256 checked (`voxflow.models.cosyvoice3.noise.flow_rand_noise`, a private generator: the
    global RNG is left alone). `frames` < 15000 gives a prefix of the same buffer."""
    with torch.device("cpu"):  # a real CPU buffer even while the model is built on meta
        return flow_rand_noise()[:, :, :frames].contiguous()


def cosine_t_span(n_timesteps: int = N_TIMESTEPS, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> Tensor:
    """t grid [n+1] = 1 - cos(pi/2 · linspace(0, 1, n+1)) (spec §6 "Euler + CFG")."""
    grid = torch.linspace(0, 1, n_timesteps + 1, device=device, dtype=dtype)
    return 1 - torch.cos(grid * 0.5 * math.pi)


class PreLookaheadLayer(nn.Module):
    """Token-rate lookahead (spec §6 "Conditioning" 3; `upsample_encoder.py::PreLookaheadLayer`).

    inputs [B, L, 80] (embedded tokens) -> [B, L, 80]: conv1 (k = lookahead+1 = 4) over inputs
    right-padded by 3 frames (`context`, the 3 lookahead tokens [B, 3, 80], when not final; zeros
    otherwise) -> leaky_relu 0.01 -> conv2 (k3, left zero pad 2) -> + inputs.
    """

    def __init__(self, in_channels: int, channels: int, pre_lookahead_len: int) -> None:
        super().__init__()
        self.pre_lookahead_len = pre_lookahead_len
        self.conv1 = nn.Conv1d(in_channels, channels, kernel_size=pre_lookahead_len + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, kernel_size=3)

    def forward(self, inputs: Tensor, context: Tensor | None = None) -> Tensor:
        h = inputs.transpose(1, 2)
        if context is None or context.shape[1] == 0:
            h = F.pad(h, (0, self.pre_lookahead_len))
        else:
            if context.shape[1] != self.pre_lookahead_len:
                raise ValueError(f"context must hold {self.pre_lookahead_len} tokens, "
                                 f"got {context.shape[1]}")
            h = torch.cat((h, context.transpose(1, 2)), dim=2)
        with cudnn_off(h):  # spec §10: cuDNN's float32 plan for these convs is slow
            h = F.leaky_relu(self.conv1(h), PRE_LOOKAHEAD_SLOPE)
            h = self.conv2(F.pad(h, (self.conv2.kernel_size[0] - 1, 0)))
        return h.transpose(1, 2) + inputs


class CausalConditionalCFM(nn.Module):
    """The 10-step Euler solve with classifier-free guidance around the DiT `estimator` (spec §6).

    Holds the fixed noise as a plain attribute (not a buffer, not in the state dict; spec §3):
    x0 = rand_noise[:, :, :T], indexed from prompt frame 0, the same for every row.
    """

    def __init__(self, estimator: DiT, inference_cfg_rate: float = CFG_RATE,
                 noise: Tensor | None = None) -> None:
        super().__init__()
        self.estimator = estimator
        self.inference_cfg_rate = inference_cfg_rate
        self.rand_noise: Tensor = fixed_noise() if noise is None else noise
        self._noise_on: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def noise(self, frames: int, device: torch.device, dtype: torch.dtype) -> Tensor:
        """x0 [1, 80, frames] on `device` (copied there once, then cached)."""
        if frames > self.rand_noise.shape[2]:
            raise ValueError(f"{frames} frames exceed the fixed noise ({self.rand_noise.shape[2]}"
                             " frames, 300 s; spec §8)")
        key = (device, dtype)
        if key not in self._noise_on:
            self._noise_on[key] = self.rand_noise.to(device=device, dtype=dtype)
        return self._noise_on[key][:, :, :frames]

    def forward(self, mu: Tensor, mask: Tensor, spks: Tensor, cond: Tensor,
                n_timesteps: int = N_TIMESTEPS, streaming: bool | Tensor = False,
                on_step: StepHook | None = None) -> Tensor:
        """Mel [B, 80, T], prompt frames included.

        mu, cond: [B, 80, T]; mask: [B, 1, T]; spks: [B, 80]; x0 = the fixed noise's first T frames.
        """
        x0 = self.noise(mu.shape[2], mu.device, mu.dtype).expand(mu.shape[0], -1, -1)
        t_span = cosine_t_span(n_timesteps, dtype=mu.dtype, device=mu.device)
        return self.solve_euler(x0, t_span, mu, mask, spks, cond, streaming, on_step)

    def solve_euler(self, x: Tensor, t_span: Tensor, mu: Tensor, mask: Tensor, spks: Tensor,
                    cond: Tensor, streaming: bool | Tensor = False,
                    on_step: StepHook | None = None) -> Tensor:
        """Euler steps over `t_span` [n+1] with CFG as twin rows (spec §6 "Euler + CFG").

        Each step runs the estimator once on 2B rows sharing x, mask and t: rows 0..B-1 get
        (mu, spks, cond), rows B..2B-1 get zeros; v = (1 + r)·v_cond - r·v_uncond, r = 0.7;
        x <- x + dt·v. t accumulates (t <- t + dt; the next dt = t_span[k+1] - t), as the
        reference does. `streaming`: a bool, or a bool tensor [B] of per-row flags (the
        bucketed solve mixes streamed and final rows). Returns x after the last step, float32
        [B, 80, T].

        x, dt and the CFG combination stay in the inputs' dtype (float32) whatever the
        estimator's compute dtype (spec §9.3 ``estimator_dtype``): a bfloat16 estimator takes
        float32 inputs and returns a float32 velocity, so only the velocity carries bfloat16
        rounding, never the accumulated state.
        """
        rate = self.inference_cfg_rate
        batch = x.shape[0]
        t = t_span[0].unsqueeze(0)
        dt = t_span[1] - t_span[0]
        mask_in = torch.cat((mask, mask), dim=0)
        mu_in = torch.cat((mu, torch.zeros_like(mu)), dim=0)
        spks_in = torch.cat((spks, torch.zeros_like(spks)), dim=0)
        cond_in = torch.cat((cond, torch.zeros_like(cond)), dim=0)
        if isinstance(streaming, Tensor):
            streaming = torch.cat((streaming, streaming), dim=0)
        steps = t_span.shape[0] - 1
        for step in range(steps):
            x_in = torch.cat((x, x), dim=0)
            t_in = t.expand(2 * batch)
            v_pair = self.estimator(x_in, mask_in, mu_in, t_in, spks_in, cond_in,
                                    streaming=streaming)
            if on_step is not None:
                on_step(step, t, x, v_pair)
            v_cond, v_uncond = v_pair[:batch], v_pair[batch:]
            x = x + dt * ((1.0 + rate) * v_cond - rate * v_uncond)
            t = t + dt
            if step + 1 < steps:
                dt = t_span[step + 2] - t
        return x.float()


@dataclass
class FlowConditioning:
    """What the solve needs for one request (spec §6 "Conditioning"), batch 1.

    mu, cond: [1, 80, T]; mask: [1, 1, T] ones; spks: [1, 80]; prompt_frames = 2P (mel frames the
    output drops). T = 2·(P + N), or 2·(P + N - 3) when not final.
    """

    mu: Tensor
    mask: Tensor
    spks: Tensor
    cond: Tensor
    prompt_frames: int


class CausalMaskedDiffWithDiT(nn.Module):
    """The CosyVoice3 flow (spec §6): token embedding, speaker projection, pre-lookahead layer,
    conditioning and the CFM solve (`decoder`, whose `estimator` is the DiT)."""

    def __init__(self, config: FlowConfig | None = None, noise: Tensor | None = None) -> None:
        super().__init__()
        cfg = config or FlowConfig()
        self.config = cfg
        self.token_mel_ratio = cfg.token_mel_ratio
        self.pre_lookahead_len = cfg.pre_lookahead_len
        self.output_size = cfg.output_size
        self.input_embedding = nn.Embedding(cfg.vocab_size, cfg.input_size)
        self.spk_embed_affine_layer = nn.Linear(cfg.spk_embed_dim, cfg.output_size)
        self.pre_lookahead_layer = PreLookaheadLayer(cfg.input_size, cfg.pre_lookahead_channels,
                                                     cfg.pre_lookahead_len)
        estimator = DiT(dim=cfg.dim, depth=cfg.depth, heads=cfg.heads, dim_head=cfg.dim_head,
                        ff_mult=cfg.ff_mult, mel_dim=cfg.output_size, mu_dim=cfg.input_size,
                        spk_dim=cfg.output_size, out_channels=cfg.output_size,
                        static_chunk_size=cfg.static_chunk_size,
                        num_decoding_left_chunks=cfg.num_decoding_left_chunks)
        self.decoder = CausalConditionalCFM(estimator, cfg.inference_cfg_rate, noise)

    def speaker(self, embedding: Tensor) -> Tensor:
        """spks [B, 80] = spk_embed_affine_layer(L2-normalise(embedding [B, 192]))."""
        out: Tensor = self.spk_embed_affine_layer(F.normalize(embedding, dim=1))
        return out

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """[B, L] token ids (int) -> [B, L, 80]; ids clamped at 0 (padding -1 reads row 0)."""
        out: Tensor = self.input_embedding(torch.clamp(tokens.long(), min=0))
        return out

    def lookahead(self, token_emb: Tensor, finalize: bool) -> Tensor:
        """Pre-lookahead over [B, L, 80]: final -> [B, L, 80] (zero right pad); not final ->
        [B, L-3, 80], the last 3 tokens only serve as context."""
        if finalize:
            out: Tensor = self.pre_lookahead_layer(token_emb)
            return out
        n = self.pre_lookahead_len
        out = self.pre_lookahead_layer(token_emb[:, :-n], context=token_emb[:, -n:])
        return out

    def conditioning(self, token: Tensor, prompt_token: Tensor, prompt_feat: Tensor,
                     embedding: Tensor, finalize: bool) -> FlowConditioning:
        """Solve inputs for token [1, N], prompt_token [1, P] (int), prompt_feat [1, 2P, 80]
        (channels last, as the frontend gives it) and embedding [1, 192] (raw)."""
        spks = self.speaker(embedding)
        all_token = torch.cat((prompt_token, token), dim=1)
        h = self.lookahead(self.embed_tokens(all_token), finalize)
        mu = h.repeat_interleave(self.token_mel_ratio, dim=1).transpose(1, 2).contiguous()
        frames = mu.shape[2]
        prompt_frames = prompt_feat.shape[1]
        cond = torch.zeros(1, frames, self.output_size, device=mu.device, dtype=mu.dtype)
        cond[:, :prompt_frames] = prompt_feat
        mask = torch.ones(1, 1, frames, device=mu.device, dtype=mu.dtype)
        return FlowConditioning(mu, mask, spks, cond.transpose(1, 2), prompt_frames)

    @torch.inference_mode()
    def inference(self, token: Tensor, prompt_token: Tensor, prompt_feat: Tensor,
                  embedding: Tensor, streaming: bool, finalize: bool,
                  n_timesteps: int = N_TIMESTEPS) -> Tensor:
        """Mel float32 [1, 80, 2N] (final) or [1, 80, 2(N-3)] (not final), prompt frames removed.

        `streaming` selects the chunk attention mask (spec §6 "Masks"); the reference's final
        streamed call passes no flag, i.e. full attention (spec §9.7).
        """
        c = self.conditioning(token, prompt_token, prompt_feat, embedding, finalize)
        feat = self.decoder(c.mu, c.mask, c.spks, c.cond, n_timesteps=n_timesteps,
                            streaming=streaming)
        return feat[:, :, c.prompt_frames:].float()
