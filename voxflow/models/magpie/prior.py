"""The inference attention prior (NeMo ``get_cross_attention_scores``,
``get_most_attended_text_timestep`` and ``construct_inference_prior``; spec §7.5 as corrected
by §7.0 items 4 and 6).

After each decoder step, `alignment_scores` averages the cross-attention probabilities of the
last query row over heads and then over the chosen layers. `PriorTracker.advance` moves each
item's attended text position forward inside a look-ahead window, and `PriorTracker.prior`
builds the next step's prior: ε everywhere, 1 near the attended position, ε again up to any
position attended `SINK_RESET_COUNT` times; unconditional (CFG) rows stay at ε.
"""

from __future__ import annotations

import torch
from torch import Tensor

from voxflow.models.magpie.config import (
    SHORT_TEXT,
    SINK_ADVANCE_COUNT,
    SINK_RESET_COUNT,
    TEXT_END_MARGIN,
)


def alignment_scores(xattn_probs: list[Tensor], layers: tuple[int, ...] | None) -> Tensor:
    """Per-layer probabilities (R, H, Tq, Tm) → (R, Tm): the last query row, mean over heads,
    then mean over ``layers`` (all layers when None), in NeMo's order of operations."""
    chosen = range(len(xattn_probs)) if layers is None else layers
    per_layer = [xattn_probs[i][:, :, -1:].mean(dim=1) for i in chosen]
    return torch.stack(per_layer, dim=1).mean(dim=1)[:, -1, :]


class PriorTracker:
    """Alignment state of B items: the last attended text position (starting at 1) and how
    often each position was attended.

    ``text_lens``: each item's text length (tokens + EOS); ``window``: the look-ahead W
    (``attention_prior_lookahead_window``); ``epsilon``: the prior floor ε.
    """

    def __init__(self, text_lens: list[int], window: int, epsilon: float) -> None:
        self.text_lens = text_lens
        self.window = window
        self.epsilon = epsilon
        self.last = [1] * len(text_lens)
        self.counts: list[dict[int, int]] = [{} for _ in text_lens]

    def advance(self, scores: Tensor) -> list[int]:
        """scores (≥B, Tm) from `alignment_scores` (rows past B ignored) → the attended
        position per item, counted. The window is [last, min(last + W, len − 3)), ``last``
        first moved on by one if attended `SINK_ADVANCE_COUNT` times; an empty window means
        the text ended (len − 1)."""
        attended = []
        for b, text_len in enumerate(self.text_lens):
            last = self.last[b]
            if self.counts[b].get(last, 0) >= SINK_ADVANCE_COUNT:
                last += 1
            end = min(last + self.window, text_len - TEXT_END_MARGIN)
            window = scores[b, last:end]
            pos = text_len - 1 if window.numel() == 0 else int(window.argmax()) + last
            self.counts[b][pos] = self.counts[b].get(pos, 0) + 1
            self.last[b] = pos
            attended.append(pos)
        return attended

    def prior(self, attended: list[int], rows: int, width: int) -> Tensor:
        """The next step's prior (rows, 1, width) float32: rows ≥ B (CFG rows past B stay ε).
        Texts of ≤ `SHORT_TEXT` tokens get 1 everywhere; else 1 at max(1, a − 1), a and
        min(a + j, len − 1) for j = 1..W."""
        prior = torch.zeros(rows, 1, width) + self.epsilon
        for b, text_len in enumerate(self.text_lens):
            a = attended[b]
            if text_len <= SHORT_TEXT:
                prior[b, 0, :] = 1.0
            else:
                prior[b, 0, max(1, a - 1)] = 1.0
                prior[b, 0, a] = 1.0
                for j in range(1, self.window + 1):
                    prior[b, 0, min(a + j, text_len - 1)] = 1.0
            for pos, count in self.counts[b].items():
                if count >= SINK_RESET_COUNT:
                    prior[b, 0, : pos + 1] = self.epsilon
        return prior
