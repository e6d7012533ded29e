"""CosyVoice3 LM (`cosyvoice/llm/llm.py::CosyVoice3LM`) on a plain-PyTorch Qwen2 backbone.

Spec: `../shared/specs/cosyvoice3.md` §5 (LM), §3 (state-dict layout), §2 (sizes), §11 (length cap).
No `transformers` dependency: the Qwen2 decoder is written out here with HF's numerics
(rotate-half RoPE computed in float32, RMSNorm in float32, SDPA attention, GQA by repeating kv
heads).

Module tree (so that ``state_dict()`` keys equal the reference's, 29 tensors tiny / 293 full)::

    CosyVoice3LM
      llm: Qwen2Encoder
        model: Qwen2ForCausalLM
          model: Qwen2Model (embed_tokens, layers.{i}.{self_attn,mlp,*_layernorm}, norm)
          lm_head (tied to embed_tokens; in the state dict, unused)
      llm_decoder: Linear(D, S + 200, bias=False)
      speech_embedding: Embedding(S + 200, D)

Shapes: B batch, T positions, D hidden, H query heads, Hk kv heads, Dh head dim, V = S + 200.
Everything runs in the weights' dtype (float32 for parity); ids are int64.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from voxflow.models.cosyvoice3.sampling import MinLenRule, Sampler, mask_before_min_len

QWEN2_VOCAB_SIZE = 151936
"""Qwen2 text vocabulary (rows of `embed_tokens`), full and tiny alike (§2; assumed, §13)."""
ROPE_THETA = 1.0e6
"""Qwen2 RoPE base θ (§2, §5)."""
RMS_NORM_EPS = 1.0e-6
"""Qwen2 RMSNorm epsilon (§2)."""
NUM_SPECIAL_SPEECH_IDS = 200
"""Rows of `speech_embedding`/`llm_decoder` beyond the S speech tokens; ids >= S stop (§2, §5)."""
ENDOFPROMPT_ID = 151646
"""`<|endofprompt|>`, hard-coded by the reference front end (§4)."""
MIN_TOKEN_TEXT_RATIO = 2
"""min_len = 2 · (TTS-text ids), prompt text excluded (§5 "Decode")."""
MAX_TOKEN_TEXT_RATIO = 20
"""max_len = 20 · (TTS-text ids) (§5 "Decode")."""
MAX_TOTAL_SPEECH_TOKENS = 7500
"""Prompt + generated speech tokens fit the 15,000-frame flow noise at 2 frames/token (§11, §8)."""


@dataclass(frozen=True)
class Qwen2Config:
    """The Qwen2 backbone's sizes (§2 table; tiny values from `tiny_configs.json`)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int = QWEN2_VOCAB_SIZE
    rope_theta: float = ROPE_THETA
    rms_norm_eps: float = RMS_NORM_EPS

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class CosyVoice3LMConfig:
    """`CosyVoice3LM` sizes: the backbone plus S = `speech_token_size` (§2, §5)."""

    qwen2: Qwen2Config
    speech_token_size: int

    @property
    def hidden_size(self) -> int:
        return self.qwen2.hidden_size

    @property
    def speech_vocab(self) -> int:
        """Rows of `speech_embedding` and outputs of `llm_decoder`: S + 200."""
        return self.speech_token_size + NUM_SPECIAL_SPEECH_IDS

    @property
    def sos(self) -> int:
        return self.speech_token_size

    @property
    def eos(self) -> int:
        return self.speech_token_size + 1

    @property
    def task_id(self) -> int:
        return self.speech_token_size + 2

    @property
    def fill(self) -> int:
        return self.speech_token_size + 3


TINY_LM_CONFIG = CosyVoice3LMConfig(
    qwen2=Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    speech_token_size=81,
)
"""The fixtures' tiny LM (`tiny_configs.json` → lm; §2 "tiny")."""

FULL_LM_CONFIG = CosyVoice3LMConfig(
    qwen2=Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
    speech_token_size=6561,
)
"""Fun-CosyVoice3-0.5B-2512's LM (§2 "full"): 293 tensors, 506,148,480 parameters."""


class RMSNorm(nn.Module):
    """Qwen2 RMSNorm: x / sqrt(mean(x²) + eps) in float32, cast back, times `weight` [D]."""

    def __init__(self, size: int, eps: float = RMS_NORM_EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


ROPE_BUFFERS = ("llm.model.model.rotary_emb.inv_freq",)
"""The LM's buffers that no checkpoint holds (see `CosyVoice3LM.materialize_buffers`)."""


class RotaryEmbedding(nn.Module):
    """HF rotate-half RoPE tables: cos/sin [T, Dh] for integer positions, computed in float32.

    inv_freq[k] = 1 / θ^(2k/Dh), k < Dh/2 (non-persistent: not in the state dict); the angle table
    is [freqs, freqs] (halves, not interleaved).
    """

    inv_freq: torch.Tensor

    def __init__(self, head_dim: int, theta: float = ROPE_THETA) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self._inv_freq(None), persistent=False)

    def _inv_freq(self, device: torch.device | str | None) -> torch.Tensor:
        steps = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device)
        return 1.0 / (self.theta ** (steps.to(torch.float32) / self.head_dim))

    def materialize(self, device: torch.device | str) -> None:
        """Recompute `inv_freq` on `device`: a model built on ``meta`` and loaded with
        ``assign=True`` gets its weights from the checkpoint, but this buffer is not in it."""
        self.inv_freq = self._inv_freq(device)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq.to(torch.float32)[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, Dh] rotated by cos/sin [T, Dh]: x·cos + rotate_half(x)·sin."""
    return x * cos + _rotate_half(x) * sin


@dataclass
class KVCache:
    """Per-layer keys and values, each [B, Hk, T_past, Dh] (after RoPE); grows by concatenation.

    One cache per request (or per batch of equally long requests). `length` is T_past, which is
    also the position of the next token.
    """

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return 0 if not self.keys else int(self.keys[0].shape[2])

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this call's k, v [B, Hk, T, Dh] for `layer`; all keys/values so far."""
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=2)
        return self.keys[layer], self.values[layer]


class Qwen2Attention(nn.Module):
    """GQA self-attention: q/k/v projections with bias, o_proj without (§5), scale 1/√Dh."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        d, dh = cfg.hidden_size, cfg.head_dim
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = dh
        self.q_proj = nn.Linear(d, self.num_heads * dh, bias=True)
        self.k_proj = nn.Linear(d, self.num_kv_heads * dh, bias=True)
        self.v_proj = nn.Linear(d, self.num_kv_heads * dh, bias=True)
        self.o_proj = nn.Linear(self.num_heads * dh, d, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        layer: int,
        cache: KVCache | None,
        past: int,
    ) -> torch.Tensor:
        """x [B, T, D] at positions past…past+T−1 → [B, T, D]; causal over cache + x.

        `past` = positions already in `cache` (0 without one); this call's k, v are appended.
        """
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        rep = self.num_heads // self.num_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if t == 1:
            out = F.scaled_dot_product_attention(q, k, v)
        elif past == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            kpos = torch.arange(past + t, device=x.device)
            qpos = torch.arange(past, past + t, device=x.device)
            mask = kpos[None, :] <= qpos[:, None]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)
        return self.o_proj(out)


class Qwen2MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) · up(x)), no biases."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: Qwen2Config, index: int) -> None:
        super().__init__()
        self.index = index
        self.self_attn = Qwen2Attention(cfg)
        self.mlp = Qwen2MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None,
        past: int,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, self.index, cache, past)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Model(nn.Module):
    """Qwen2 decoder stack on `inputs_embeds`; returns the final-RMSNorm hidden states."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            [Qwen2DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)

    def forward(self, inputs_embeds: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """inputs_embeds [B, T, D] (placed after the cache's positions) → hidden [B, T, D]."""
        past = 0 if cache is None else cache.length
        t = inputs_embeds.shape[1]
        positions = torch.arange(past, past + t, device=inputs_embeds.device)
        cos, sin = self.rotary_emb(positions, inputs_embeds.dtype)
        h = inputs_embeds
        for layer in self.layers:
            h = layer(h, cos, sin, cache, past)
        return self.norm(h)


class Qwen2ForCausalLM(nn.Module):
    """Holds `model` and the tied `lm_head` (kept only for the state-dict layout; never run)."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.model = Qwen2Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight


class Qwen2Encoder(nn.Module):
    """The reference wrapper (`cosyvoice/llm/llm.py::Qwen2Encoder`): adds the `model.` level."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.model = Qwen2ForCausalLM(cfg)

    def forward(self, inputs_embeds: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.model.model(inputs_embeds, cache)


class CosyVoice3LM(nn.Module):
    """Text ids + prompt → speech tokens [0, S) (§5). Weights load with the reference's keys.

    Build at full size without memory on ``torch.device("meta")``; load real or fixture weights
    with ``load_state_dict(strict=True)`` (both `embed_tokens` and the tied `lm_head` keys are
    expected, as the reference saves them).
    """

    def __init__(self, cfg: CosyVoice3LMConfig = FULL_LM_CONFIG) -> None:
        super().__init__()
        self.cfg = cfg
        self.llm = Qwen2Encoder(cfg.qwen2)
        self.llm_decoder = nn.Linear(cfg.hidden_size, cfg.speech_vocab, bias=False)
        self.speech_embedding = nn.Embedding(cfg.speech_vocab, cfg.hidden_size)


    def materialize_buffers(self, device: torch.device | str) -> None:
        """Make the non-persistent buffers real on `device` (the RoPE table): call after a
        ``meta``-built model was loaded with ``assign=True`` (`loader.load_strict` with
        ``set_later=ROPE_BUFFERS``)."""
        for module in self.modules():
            if isinstance(module, RotaryEmbedding):
                module.materialize(device)

    @property
    def speech_token_size(self) -> int:
        return self.cfg.speech_token_size

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor:
        """Qwen2 text embeddings: int ids [N] → [N, D]."""
        return self.llm.model.model.embed_tokens(ids.to(torch.int64))

    def embed_speech(self, ids: torch.Tensor) -> torch.Tensor:
        """Speech-table embeddings (tokens and specials): int ids [N] → [N, D]."""
        return self.speech_embedding(ids.to(torch.int64))

    def prefill_embeds(
        self,
        text_ids: torch.Tensor,
        prompt_text_ids: torch.Tensor | None = None,
        prompt_speech_tokens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The prefill sequence (§5 "Prefill"), [L, D] with L = N_prompt_text + N_text + 2 + P.

        ``E_speech[sos] ‖ E_text(prompt_text ‖ text) ‖ E_speech[task_id] ‖ E_speech(prompt)``.
        Zero-shot passes the prompt text (with 151646) and prompt tokens [P] (< S); cross-lingual
        passes neither (its `text_ids` start with the system prompt). Ids are 1-D int tensors.
        """
        device = self.speech_embedding.weight.device
        ids = text_ids.reshape(-1)
        if prompt_text_ids is not None:
            ids = torch.cat([prompt_text_ids.reshape(-1).to(ids.device), ids])
        specials = torch.tensor([self.cfg.sos, self.cfg.task_id], device=device)
        sos, task = self.embed_speech(specials).unbind(0)
        parts = [sos[None], self.embed_text(ids.to(device)), task[None]]
        if prompt_speech_tokens is not None and prompt_speech_tokens.numel() > 0:
            parts.append(self.embed_speech(prompt_speech_tokens.reshape(-1).to(device)))
        return torch.cat(parts, dim=0)

    def forward(
        self, inputs_embeds: torch.Tensor, cache: KVCache | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs_embeds [B, T, D] → (logits [B, V] of the last position, its hidden [B, D]).

        The hidden state is the final-RMSNorm output (the `llm_decoder` input); logits are raw
        `llm_decoder` outputs (take `log_softmax` for sampling). With `cache`, T new positions are
        appended to it (prefill: T = L; decode: T = 1).
        """
        hidden = self.llm(inputs_embeds, cache)[:, -1]
        return self.llm_decoder(hidden), hidden


def length_limits(
    n_text: int,
    prompt_speech_len: int = 0,
    min_ratio: int = MIN_TOKEN_TEXT_RATIO,
    max_ratio: int = MAX_TOKEN_TEXT_RATIO,
) -> tuple[int, int]:
    """(min_len, max_len) for n_text TTS-text ids (§5; prompt text excluded).

    max_len is also capped at 7500 − P (§11) so prompt + speech fit the flow noise; min_len never
    exceeds max_len.
    """
    max_len = min(int(n_text * max_ratio), MAX_TOTAL_SPEECH_TOKENS - prompt_speech_len)
    max_len = max(0, max_len)
    return min(int(n_text * min_ratio), max_len), max_len


@dataclass
class StepOutput:
    """One decode step: the chosen id (a stop id ends the segment and is not emitted), the raw
    logits [V] and log-probs [V] it was chosen from (before masking), and the hidden state [D]."""

    token: int
    logits: torch.Tensor
    logp: torch.Tensor
    hidden: torch.Tensor
    stop: bool


class LMDecoder:
    """One segment's decode loop (§5 "Decode"): prefill, then one token per `step()`.

    Step i (0-based, i = tokens emitted so far) samples from ``log_softmax(llm_decoder(h))`` after
    the min-length mask (`min_len_rule`) when i < min_len; a stop id (>= S) ends the segment
    without being emitted; after max_len emitted tokens the segment ends. The next input is
    ``E_speech[token]``. The LM keeps every token in its context (the silent filter sits after it).

    `lm_input`: the prefill [L, D] from `CosyVoice3LM.prefill_embeds`. `sampler`: e.g.
    `RasSampler` with the request's own generator, or `GreedySampler` for parity.
    """

    def __init__(
        self,
        lm: CosyVoice3LM,
        lm_input: torch.Tensor,
        min_len: int,
        max_len: int,
        sampler: Sampler,
        min_len_rule: MinLenRule = "mask_all_stop",
    ) -> None:
        self.lm = lm
        self.min_len = min_len
        self.max_len = max_len
        self.sampler = sampler
        self.min_len_rule: MinLenRule = min_len_rule
        self.cache = KVCache()
        self.tokens: list[int] = []
        self.done = max_len <= 0
        self._next_input: torch.Tensor = lm_input.reshape(1, -1, lm.cfg.hidden_size)

    @torch.inference_mode()
    def step(self) -> StepOutput | None:
        """Run one forward (the prefill on the first call) and choose one id; None once done."""
        if self.done:
            return None
        logits, hidden = self.lm(self._next_input, self.cache)
        logits, hidden = logits[0], hidden[0]
        logp = torch.log_softmax(logits, dim=-1)
        scores = logp.clone()
        if len(self.tokens) < self.min_len:
            mask_before_min_len(scores, self.lm.speech_token_size, self.min_len_rule)
        token = self.sampler(scores, self.tokens)
        stop = token >= self.lm.speech_token_size
        if stop:
            self.done = True
        else:
            self.tokens.append(token)
            if len(self.tokens) >= self.max_len:
                self.done = True
            ids = torch.tensor([token], device=logits.device)
            self._next_input = self.lm.embed_speech(ids).reshape(1, 1, -1)
        return StepOutput(token=token, logits=logits, logp=logp, hidden=hidden, stop=stop)

    def __iter__(self) -> Iterator[int]:
        """The emitted tokens, one per step, until a stop id or max_len."""
        while (out := self.step()) is not None:
            if not out.stop:
                yield out.token


def generate(
    lm: CosyVoice3LM,
    text_ids: torch.Tensor,
    sampler: Sampler,
    prompt_text_ids: torch.Tensor | None = None,
    prompt_speech_tokens: torch.Tensor | None = None,
    min_len_rule: MinLenRule = "mask_all_stop",
) -> list[int]:
    """All speech tokens for one segment (zero-shot with prompts, cross-lingual without)."""
    with torch.inference_mode():
        lm_input = lm.prefill_embeds(text_ids, prompt_text_ids, prompt_speech_tokens)
    p = 0 if prompt_speech_tokens is None else int(prompt_speech_tokens.numel())
    min_len, max_len = length_limits(int(text_ids.numel()), p)
    return list(LMDecoder(lm, lm_input, min_len, max_len, sampler, min_len_rule))


__all__ = [
    "CosyVoice3LM",
    "CosyVoice3LMConfig",
    "FULL_LM_CONFIG",
    "KVCache",
    "LMDecoder",
    "Qwen2Config",
    "StepOutput",
    "TINY_LM_CONFIG",
    "generate",
    "length_limits",
]
