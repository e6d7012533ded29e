"""The MagpieTTS decode loop (NeMo ``MagpieTTSModel.infer_batch`` with the autoregressive local
transformer; the rules of the fixtures' README "The decode rules as NeMo runs them", spec §7.4
and §7.0 items 4-10).

Per decoder step (S codec frames):
1. the decoder sees [baked context; embedded frame history] (all of it without a KV cache, as
   NeMo; only the newest stacked position with one), with CFG as rows [cond; uncond] — the
   unconditional row has zeroed text memory masked to position 0 and a zeroed context with an
   all-ones mask;
2. ``final_proj`` at the last position, CFG-combined, gives the argmax codes used only to
   detect EOS; the LT samples the codes that are kept and fed back;
3. EOS is forbidden while step·S < ``min_generated_frames``; an item ends at the first frame
   whose codes hold EOS (either path), keeping the frames before it;
4. the loop stops when every item has ended and at least 4 steps ran, or after
   ``max_decoder_steps // S`` steps; an item without EOS reports ``max_decoder_steps`` frames;
5. with the attention prior, the cross-attention of the step sets the next step's prior
   (`voxflow.models.magpie.prior`).

With ``kv_cache`` the decoder keeps self-attention K/V (and the memory's cross K/V) between
steps, so earlier positions keep the prior they were computed under (spec §7.5: accepted
drift); without the prior both paths compute the same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from voxflow.models.magpie.config import MIN_DECODER_STEPS, InferenceConfig
from voxflow.models.magpie.local_transformer import sample_codes
from voxflow.models.magpie.model import MagpieModel
from voxflow.models.magpie.prior import PriorTracker, alignment_scores
from voxflow.models.magpie.sampling import (
    Chooser,
    argmax_codes,
    cfg_combine,
    end_frame,
    parallel_codes,
)
from voxflow.models.magpie.transformer import KVCache


@dataclass(frozen=True)
class DecodeOptions:
    """Per-request choices. ``params`` None: the model config's `InferenceConfig`.
    ``greedy``: argmax everywhere (byte-identical reruns); else top-k / temperature sampling
    from a generator seeded with ``seed``. ``use_local_transformer`` False: each slot chosen
    from the ``final_proj`` logits independently (NeMo's parallel sampling, spec §7.4 item 3).
    ``trace`` keeps per-step tensors in the result."""

    params: InferenceConfig | None = None
    use_cfg: bool = True
    use_local_transformer: bool = True
    greedy: bool = True
    seed: int = 0
    kv_cache: bool = True
    trace: bool = False


@dataclass
class StepTrace:
    """One step's tensors (B items, R = 2B rows with CFG): ``lt_codes`` (the kept codes: from
    the LT, or the parallel choice without it) and ``argmax_codes`` (B, C, S) int64,
    ``hidden_last`` (R, D), ``logits`` (B, C·S·V) CFG-combined ``final_proj``
    logits at the last position (before any masking), ``prior`` (R, 1, Tm) used or None."""

    lt_codes: Tensor
    argmax_codes: Tensor
    hidden_last: Tensor
    logits: Tensor
    prior: Tensor | None


@dataclass
class DecodeResult:
    """``codes`` (B, C, T) int64, T = the largest length actually produced (ids may include
    specials past an item's length); ``lengths`` (B,) int64 as NeMo reports them (EOS frame
    index, or ``max_decoder_steps`` without EOS — which exceeds T when that cap is not a
    multiple of S); ``ended`` whether each item met EOS; ``steps`` decoder steps run."""

    codes: Tensor
    lengths: Tensor
    ended: list[bool]
    steps: int
    trace: list[StepTrace] = field(default_factory=list)

    def item_codes(self, item: int) -> Tensor:
        """The frames of ``item`` to hand to the codec: (C, n) int64, n = min(length, T),
        audio ids only (every frame before an item's first EOS frame; spec §7.4 item 6)."""
        n = min(int(self.lengths[item]), self.codes.shape[-1])
        return self.codes[item, :, :n]


class DecodeSession:
    """The state of one decode of B texts, stepped by `step` (`generate` loops it; the
    family's acoustic stage steps one segment's session per engine step): text memory
    (B or 2B rows with CFG), baked context rows, the code history (B, C, S·(1 + n)) int64
    starting with a BOS stack, the decoder's `KVCache` (None without ``kv_cache``), the
    prior tracker and the code chooser (its generator seeded with ``opts.seed``).
    Raises `ValueError` for text ids or speakers out of range."""

    def __init__(self, model: MagpieModel, text: Tensor, text_lens: Tensor, speakers: Tensor,
                 opts: DecodeOptions) -> None:
        cfg = model.config
        self.model, self.opts = model, opts
        self.params = opts.params or cfg.inference
        self.batch = text.shape[0]
        memory, memory_mask = model.encode_text(text, text_lens)
        context, context_mask = model.speaker_context(speakers)
        if opts.use_cfg:
            dummy_mask = torch.zeros_like(memory_mask)
            dummy_mask[:, 0] = True
            memory = torch.cat([memory, torch.zeros_like(memory)])
            memory_mask = torch.cat([memory_mask, dummy_mask])
            context = torch.cat([context, torch.zeros_like(context)])
            context_mask = torch.cat([context_mask, torch.ones_like(context_mask)])
        self.memory, self.memory_mask = memory, memory_mask
        self.context, self.context_mask = context, context_mask
        self.rows = memory.shape[0]
        self.history = torch.full((self.batch, cfg.num_codebooks, cfg.frame_stacking),
                                  cfg.audio_bos, dtype=torch.long, device=text.device)
        self.cache: KVCache | None = model.decoder.new_cache() if opts.kv_cache else None
        self.tracker = PriorTracker([int(n) for n in text_lens],
                                    self.params.attention_prior_lookahead_window,
                                    self.params.attention_prior_epsilon)
        self.prior: Tensor | None = None
        generator = None
        if not opts.greedy:
            generator = torch.Generator(device=text.device).manual_seed(opts.seed)
        self.chooser = Chooser(opts.greedy, self.params.topk, self.params.temperature, generator)

    def decoder_input(self, step: int) -> tuple[Tensor, Tensor]:
        """The rows the decoder sees this step: everything, or only the newest with a cache."""
        s = self.model.config.frame_stacking
        if self.cache is not None and step > 0:
            audio = self.model.embed_audio(self.history[:, :, -s:])
            audio = torch.cat([audio] * (self.rows // self.batch))
            return audio, torch.ones(self.rows, 1, dtype=torch.bool, device=audio.device)
        audio = self.model.embed_audio(self.history)
        audio = torch.cat([audio] * (self.rows // self.batch))
        inputs = torch.cat([self.context, audio], dim=1)
        mask = torch.cat([self.context_mask,
                          torch.ones(audio.shape[:2], dtype=torch.bool, device=audio.device)], 1)
        return inputs, mask

    def layer_priors(self) -> list[Tensor | None] | None:
        if self.prior is None:
            return None
        n = self.model.config.decoder.n_layers
        layers = self.params.apply_prior_to_layers
        prior = self.prior.to(self.memory.device)
        return [prior if layers is None or i in layers else None for i in range(n)]

    def step(self, step: int) -> StepTrace:
        """Run decoder step ``step``; returns what it computed (codes appended to history)."""
        cfg, params = self.model.config, self.params
        inputs, mask = self.decoder_input(step)
        prior_used = self.prior
        out = self.model.decode(inputs, mask, self.memory, self.memory_mask,
                                self.layer_priors(), self.cache)
        hidden = out.output[:, -1, :]
        logits = self.model.logits(hidden)
        b = self.batch
        if self.opts.use_cfg:
            logits = cfg_combine(logits[:b], logits[b:], params.cfg_scale)
        if params.apply_attention_prior and step >= params.start_prior_after_n_audio_steps:
            scores = alignment_scores(out.xattn_probs, params.estimate_alignment_from_layers)
            attended = self.tracker.advance(scores)
            self.prior = self.tracker.prior(attended, self.rows, self.memory.shape[1])
        forbid = step * cfg.frame_stacking < params.min_generated_frames
        if self.opts.use_local_transformer:
            codes = sample_codes(self.model, hidden, use_cfg=self.opts.use_cfg,
                                 cfg_scale=params.cfg_scale, forbid_eos=forbid,
                                 chooser=self.chooser).codes
        else:
            codes = parallel_codes(logits, cfg.num_codebooks, cfg.frame_stacking,
                                   cfg.codebook_size, forbid, self.chooser)
        argmax = argmax_codes(logits, cfg.num_codebooks, cfg.frame_stacking,
                              cfg.codebook_size, forbid)
        self.history = torch.cat([self.history, codes], dim=-1)
        return StepTrace(lt_codes=codes, argmax_codes=argmax, hidden_last=hidden,
                         logits=logits, prior=prior_used)


@torch.no_grad()
def generate(model: MagpieModel, text: Tensor, text_lens: Tensor, speakers: Tensor,
             options: DecodeOptions | None = None) -> DecodeResult:
    """Decode codec frames for B texts: text (B, T) int64 ids (tokens + EOS), text_lens (B,),
    speakers (B,) baked speaker indices → `DecodeResult`.

    Raises `ValueError` for ids or speakers out of range, a frame cap below one decoder step
    (``max_decoder_steps`` < S), or when the decoder's positions (context + steps) would pass
    ``max_length_causal_mask``.
    """
    opts = options or DecodeOptions()
    cfg = model.config
    s = cfg.frame_stacking
    cap = (opts.params or cfg.inference).max_decoder_steps
    if cap < s:
        raise ValueError(f"max_decoder_steps {cap} is below one decoder step ({s} frames)")
    session = DecodeSession(model, text, text_lens, speakers, opts)
    params = session.params
    ends: dict[int, int] = {}
    produced: list[Tensor] = []
    traces: list[StepTrace] = []
    for step in range(params.max_decoder_steps // s):
        record = session.step(step)
        for item in range(session.batch):
            if item in ends:
                continue
            frame = end_frame(record.lt_codes[item], record.argmax_codes[item], cfg.audio_eos,
                              params.eos_detection_method)
            if frame is not None:
                ends[item] = step * s + frame
        produced.append(record.lt_codes)
        if opts.trace:
            traces.append(record)
        if len(ends) == session.batch and len(produced) >= MIN_DECODER_STEPS:
            break
    lengths = torch.tensor([ends.get(i, params.max_decoder_steps) for i in range(session.batch)],
                           dtype=torch.long)
    codes = torch.cat(produced, dim=-1)[:, :, : int(lengths.max())]
    return DecodeResult(codes=codes, lengths=lengths,
                        ended=[i in ends for i in range(session.batch)], steps=len(produced),
                        trace=traces)

