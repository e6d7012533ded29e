"""Runs a `bistream.BistreamSchedule` on the CosyVoice3 LM: one forward per scheduled call.

Spec: `../shared/specs/cosyvoice3-instruct-bistream.md` §4-§5. Each call's positions are embedded
from their tables (speech ids from `speech_embedding`, text ids from the Qwen2 table) and fed
after the request's KV cache with a causal mask inside the chunk (`CosyVoice3LM.forward`); the
decision is the forced fill, or the sampler's choice from ``log_softmax(logits)`` with the call's
mask (`mask_scores`). The sampler's window is the reference's `out` (fills included, §4 item 4).
While the schedule waits for text nothing runs: the cache is held, no compute is spent.

Shapes: D hidden, V = S + 200 scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from voxflow.models.cosyvoice3.bistream import TABLE_TEXT, BistreamSchedule, Call, MaskKind
from voxflow.models.cosyvoice3.lm import CosyVoice3LM, KVCache
from voxflow.models.cosyvoice3.sampling import Sampler


def mask_scores(scores: torch.Tensor, kind: MaskKind, speech_token_size: int) -> None:
    """Set, in place, the ids a call's decision may not choose to −inf (scores: float [V]).

    ``sos``: id S only (the reference's mixed phase, `ignore_eos`); ``none``: nothing (the
    reference's final phase); ``speech_or_fill`` / ``speech_or_eos``: every id ≥ S except fill
    (S+3) / eos (S+1) (the corrected phases, addendum §5 Q5).
    """
    s = speech_token_size
    if kind == "sos":
        scores[s] = float("-inf")
    elif kind in ("speech_or_fill", "speech_or_eos"):
        keep = s + 3 if kind == "speech_or_fill" else s + 1
        kept = scores[keep].clone()
        scores[s:] = float("-inf")
        scores[keep] = kept
    elif kind != "none":  # pragma: no cover - MaskKind is closed
        raise ValueError(f"unknown mask {kind!r}")


def embed_call(lm: CosyVoice3LM, call: Call) -> torch.Tensor:
    """The call's positions embedded from their tables, in order: [1, n, D]."""
    device = lm.speech_embedding.weight.device
    ids = torch.tensor([f.id for f in call.feed], dtype=torch.int64, device=device)
    text = torch.tensor([f.table == TABLE_TEXT for f in call.feed], device=device)
    rows = torch.empty(len(call.feed), lm.cfg.hidden_size, device=device,
                       dtype=lm.speech_embedding.weight.dtype)
    if bool(text.any()):
        rows[text] = lm.embed_text(ids[text])
    if not bool(text.all()):
        rows[~text] = lm.embed_speech(ids[~text])
    return rows[None]


@dataclass
class BistreamStep:
    """One call: what it fed, its raw logits [V], the id decided, and the token yielded (a
    speech id), or None (fill, eos, end)."""

    call: Call
    logits: torch.Tensor
    decided: int
    token: int | None


class BistreamDecoder:
    """The LM side of one bistream request: its schedule, KV cache and sampler."""

    def __init__(self, lm: CosyVoice3LM, schedule: BistreamSchedule, sampler: Sampler) -> None:
        self.lm, self.schedule, self.sampler = lm, schedule, sampler
        self.cache = KVCache()
        self.last_logits: torch.Tensor | None = None  # [V] of the latest call (kept on errors)

    @torch.inference_mode()
    def step(self) -> BistreamStep | None:
        """Run the next call alone, or None when the schedule waits for text or is done.

        Raises:
            BistreamError: the decision is an id the phase forbids (the reference's error).
        """
        call = self.schedule.next_call()
        if call is None:
            return None
        logits = self.lm(embed_call(self.lm, call), self.cache)[0][0]
        return self.finish(call, logits)

    def finish(self, call: Call, logits: torch.Tensor) -> BistreamStep:
        """Decide `call`'s id from its logits [V] (run alone by `step`, or as one row of a
        batched forward, `lm_batch.forward_rows`, that already grew `cache`) and record it.

        Raises:
            BistreamError: the decision is an id the phase forbids (the reference's error).
        """
        self.last_logits = logits
        if call.forced_fill:
            decided = self.schedule.fill
        else:
            scores = torch.log_softmax(logits.float(), dim=-1)
            mask_scores(scores, call.mask, self.lm.speech_token_size)
            decided = self.sampler(scores, self.schedule.out)
        token = self.schedule.record(decided)
        return BistreamStep(call, logits, decided, token)
