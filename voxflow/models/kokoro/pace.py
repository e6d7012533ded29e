"""How long a Kokoro run takes now, by its length and by how many runs share the cores.

A run's time grows with its tokens plus a fixed part (the graph renders ~0.9 s of padding
silence and runs its text encoder whatever the length): on one 2-thread session alone, 10, 40,
80, 160 and 480 tokens took 0.44, 1.12, 1.76, 4.51 and 11.3 s on a 2-core AMD EPYC host,
about 0.023 s x (tokens + `FIXED_TOKENS`); two runs at once each took about twice that
(0.78-0.89, 2.33, 3.28-3.43, 7.69-7.76, 20.4-20.6 s). So the pace is kept per number of runs
in progress (across families: a Piper run shares the cores too), as an exponentially weighted
mean of seconds per token (fixed part included) over recent runs at that number, and the
prediction follows the load and the host.
"""

from __future__ import annotations

import threading

FIXED_TOKENS = 13
"""A run's fixed part in tokens (the fit of the timings above: t ~ a x (tokens + 13))."""

DEFAULT_SECONDS_PER_TOKEN = 0.023
"""Seconds per token alone before any run is timed (the 2-core host above, 2 threads)."""

MAX_LEVEL = 4
"""Runs in progress past this share one pace."""


class RunPace:
    """Exponentially weighted mean of seconds per token, per number of runs in progress
    (thread-safe).

    Args:
        weight: weight of each new observation (0 < weight <= 1).
        start: seconds per token alone before the first observation; a level not yet
            observed starts at `start` x level (runs share the cores evenly).
    Raises:
        ValueError: `weight` outside (0, 1] or `start` not positive.
    """

    def __init__(self, weight: float = 0.3, start: float = DEFAULT_SECONDS_PER_TOKEN) -> None:
        if not 0 < weight <= 1:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        if start <= 0:
            raise ValueError(f"start must be positive, got {start}")
        self._weight = weight
        self._per_token = {level: start * level for level in range(1, MAX_LEVEL + 1)}
        self._lock = threading.Lock()

    @staticmethod
    def _level(runs: int) -> int:
        return min(max(runs, 1), MAX_LEVEL)

    def seconds_per_token(self, runs: int) -> float:
        """The mean seconds per token (fixed part included) with `runs` runs in progress."""
        return self._per_token[self._level(runs)]

    def observe(self, tokens: int, seconds: float, runs: int) -> None:
        """Record a run of `tokens` tokens that took `seconds` and started with `runs` runs in
        progress (itself included)."""
        if tokens <= 0 or seconds <= 0:
            return
        level = self._level(runs)
        with self._lock:
            mean = self._per_token[level]
            self._per_token[level] = mean + self._weight * (
                seconds / (tokens + FIXED_TOKENS) - mean)

    def seconds(self, tokens: int, runs: int) -> float:
        """Predicted seconds of a run of `tokens` tokens with `runs` runs in progress."""
        return (tokens + FIXED_TOKENS) * self.seconds_per_token(runs)

    def tokens_within(self, seconds: float, runs: int) -> int:
        """The most tokens a run with `runs` runs in progress is predicted to finish within
        `seconds` (0 when not even the fixed part fits)."""
        return max(int(seconds / self.seconds_per_token(runs)) - FIXED_TOKENS, 0)
