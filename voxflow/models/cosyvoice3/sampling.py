"""CosyVoice3 LM token selection: min-length masking, greedy, RAS sampling, the silent-token filter.

Spec: `../shared/specs/cosyvoice3.md` §5 (LM). Everything here works on one request's 1-D score
vector (the LM's log-softmax over the `S + 200` speech-table ids, float32) and is independent of
the network, so it is unit-tested on hand-made distributions (the reference fixtures cannot cover
sampling: it depends on RNG draws).

Randomness: every random choice takes an explicit per-request `torch.Generator` (seeded from the
request's seed); nothing here touches the global RNG, and a generator is never shared between
requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import torch

MinLenRule = Literal["mask_all_stop", "reference_sos_only"]
"""How ids are masked before min_len (§5 "Min-length quirk").

- ``mask_all_stop`` (serving default): every stop id (``>= S``) is -inf before min_len, so a
  segment always gets at least min_len tokens.
- ``reference_sos_only``: as the reference at the pinned commit, only id ``S`` (sos) is -inf; eos
  and the other stop ids stay reachable (the fixture ``zs.argmax_all`` stops after 2 tokens).
"""

MIN_LEN_RULES: tuple[MinLenRule, ...] = ("mask_all_stop", "reference_sos_only")

# §5 "Sampling (RAS)": the yaml's `ras_sampling` arguments.
RAS_TOP_P = 0.8
"""Nucleus mass: accept sorted tokens while the mass *before* a token is < 0.8 (§5)."""
RAS_TOP_K = 25
"""At most 25 accepted tokens in the nucleus (§5)."""
RAS_WIN_SIZE = 10
"""Repetition window: the last 10 emitted tokens (§5)."""
RAS_TAU_R = 0.1
"""Repetition ratio: resample when the id occurs >= win_size * tau_r (= 1) times (§5)."""

# §5 "Silent filter" (LM -> flow).
SILENT_TOKENS: frozenset[int] = frozenset({1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323})
"""Speech-token ids that are silence (§5); only meaningful for the full-size 6561-token vocab."""
MAX_SILENT_RUN = 5
"""Consecutive silent tokens passed on to the flow; later ones in the run are dropped (§5)."""


def mask_before_min_len(scores: torch.Tensor, speech_token_size: int, rule: MinLenRule) -> None:
    """Mask, in place, the ids a step below min_len may not choose (§5 "Min-length quirk").

    `scores`: float [V] (V = S + 200), log-probabilities; `speech_token_size` = S.
    """
    if rule == "mask_all_stop":
        scores[speech_token_size:] = float("-inf")
    elif rule == "reference_sos_only":
        scores[speech_token_size] = float("-inf")
    else:  # pragma: no cover - validated by settings
        raise ValueError(f"unknown min_len_rule {rule!r}; expected one of {MIN_LEN_RULES}")


class Sampler(Protocol):
    """Chooses the next id from `scores` (float [V], masked log-probs) and the tokens so far."""

    def __call__(self, scores: torch.Tensor, decoded: Sequence[int]) -> int: ...


class GreedySampler:
    """Argmax; with `limit` set, argmax over ids < limit only (the fixture's speech-only greedy).

    `zs.greedy.*` used ``argmax(logp[:S])`` (never a stop id); `zs.argmax_all` used plain argmax.
    Ties go to the lowest id (``torch.argmax``).
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit

    def __call__(self, scores: torch.Tensor, decoded: Sequence[int]) -> int:
        view = scores if self.limit is None else scores[: self.limit]
        return int(torch.argmax(view).item())


def nucleus_candidates(
    scores: torch.Tensor, top_p: float = RAS_TOP_P, top_k: int = RAS_TOP_K
) -> tuple[torch.Tensor, torch.Tensor]:
    """The RAS nucleus (§5 step 1): (ids int64 [n], probabilities float [n]), most likely first.

    Softmax of `scores` (float [V]), sorted descending with a stable sort (equal probabilities keep
    id order). A token is accepted while the mass of the tokens before it is < `top_p` and fewer
    than `top_k` are accepted, so the token that crosses `top_p` is in. The probabilities are not
    renormalised (multinomial does that). The running mass is accumulated in the scores' dtype
    in order, like the reference's sequential sum.
    """
    probs = torch.softmax(scores, dim=0)
    sorted_p, sorted_ids = torch.sort(probs, descending=True, stable=True)
    csum = torch.cumsum(sorted_p, dim=0)
    before = torch.cat([csum.new_zeros(1), csum[:-1]])
    ok = before < top_p
    # Acceptance stops at the first refusal (the mass before a token only grows, but -inf/NaN-free
    # inputs make `ok` a prefix anyway); count the accepted prefix and cap it at top_k.
    n = int(torch.cumprod(ok.to(torch.int64), dim=0).sum().item())
    n = max(1, min(n, top_k))
    return sorted_ids[:n], sorted_p[:n]


class RasSampler:
    """Repetition-aware sampling (VALL-E 2), as the spec describes it (§5 "Sampling (RAS)").

    1. Sample from the nucleus (`nucleus_candidates`), renormalised.
    2. If that id occurs >= `win_size * tau_r` times in the last `win_size` decoded tokens, set its
       score to -inf and resample from the softmax over all ids.

    `generator`: the request's own `torch.Generator` (never shared); `scores` float [V].
    Scores masked to -inf before the call (min length) stay excluded in both draws.
    """

    def __init__(
        self,
        generator: torch.Generator,
        top_p: float = RAS_TOP_P,
        top_k: int = RAS_TOP_K,
        win_size: int = RAS_WIN_SIZE,
        tau_r: float = RAS_TAU_R,
    ) -> None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if top_k < 1 or win_size < 1 or tau_r <= 0:
            raise ValueError("top_k and win_size must be >= 1 and tau_r > 0")
        self.generator = generator
        self.top_p = top_p
        self.top_k = top_k
        self.win_size = win_size
        self.tau_r = tau_r

    @classmethod
    def from_seed(
        cls,
        seed: int,
        device: torch.device | str = "cpu",
        top_p: float = RAS_TOP_P,
        top_k: int = RAS_TOP_K,
        win_size: int = RAS_WIN_SIZE,
        tau_r: float = RAS_TAU_R,
    ) -> RasSampler:
        """A sampler with a fresh generator seeded with `seed` (per request, per segment)."""
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        return cls(gen, top_p=top_p, top_k=top_k, win_size=win_size, tau_r=tau_r)

    def __call__(self, scores: torch.Tensor, decoded: Sequence[int]) -> int:
        ids, probs = nucleus_candidates(scores, self.top_p, self.top_k)
        pick = torch.multinomial(probs, 1, replacement=True, generator=self.generator)
        token = int(ids[pick].item())
        window = decoded[-self.win_size :] if self.win_size > 0 else []
        repeats = sum(1 for t in window if t == token)
        if repeats >= self.win_size * self.tau_r:
            rescored = scores.clone()
            rescored[token] = float("-inf")
            full = torch.softmax(rescored, dim=0)
            redraw = torch.multinomial(full, 1, replacement=True, generator=self.generator)
            token = int(redraw.item())
        return token


class SilentTokenFilter:
    """Drops long runs of silent tokens between the LM and the flow (§5 "Silent filter").

    The first `max_run` consecutive silent tokens pass; further consecutive silent tokens do not
    (the LM context keeps them); any non-silent token passes and resets the count. One instance
    per segment.
    """

    def __init__(
        self, silent: frozenset[int] = SILENT_TOKENS, max_run: int = MAX_SILENT_RUN
    ) -> None:
        self.silent = silent
        self.max_run = max_run
        self.run = 0

    def accept(self, token: int) -> bool:
        """Whether `token` goes on to the flow."""
        if token in self.silent:
            self.run += 1
            return self.run <= self.max_run
        self.run = 0
        return True

    def filter(self, tokens: Sequence[int]) -> list[int]:
        """`accept` over a sequence; the tokens that pass, in order."""
        return [t for t in tokens if self.accept(t)]
