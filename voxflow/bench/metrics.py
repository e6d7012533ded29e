"""Per-level statistics over measured requests, and median-with-range across repeats.

A level is one concurrency setting run once: `level_stats` turns its timelines into the numbers
the report prints. `spread` summarizes one number over repeats (or server starts) as the median
with its min-max range, which is what comparisons and verdicts use.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from voxflow.bench.timeline import Timeline, percentile


@dataclass(frozen=True)
class Metric:
    """A number the report shows: its key in `LevelStats`, label, and which way is better."""

    key: str
    label: str
    lower_is_better: bool
    digits: int = 3
    result: bool = True
    """False for a condition of the measurement (the machine's load), which gets no verdict."""


METRICS: tuple[Metric, ...] = (
    Metric("ttfa_p50", "TTFA p50 (s)", True),
    Metric("ttfa_p95", "TTFA p95 (s)", True),
    Metric("latency_p50", "latency p50 (s)", True),
    Metric("audio_s_per_s", "audio-s/s", False, 2),
    Metric("requests_per_s", "requests/s", False, 2),
    Metric("rtf_p50", "RTF p50", True),
    Metric("stall_rate", "stall rate", True, 2),
    Metric("errors", "errors", True, 0),
    Metric("others_cpu_pct", "others' CPU %", True, 0, result=False),
)
"""Every metric that comparisons summarize, in table order."""

METRIC_BY_KEY = {m.key: m for m in METRICS}


@dataclass(frozen=True)
class LevelStats:
    """One concurrency level, one repeat. Times in seconds; rates per wall second.

    `wall_s` runs from the first measured request's send to the last one's end; `audio_s_per_s`
    is the decoded audio seconds of successful requests over that wall time. `stall_rate` is the
    share of successful requests that stalled at least once; `stall_s_mean` the mean seconds a
    successful request stalled in all. Percentiles cover successful requests only; `errors`
    counts the failed ones and `errors_by_kind` says why.
    """

    concurrency: int
    requests: int
    ok: int
    errors: int
    errors_by_kind: dict[str, int]
    wall_s: float
    audio_s: float
    audio_s_per_s: float
    requests_per_s: float
    ttfa_p50: float
    ttfa_p95: float
    ttfa_p99: float
    latency_p50: float
    latency_p95: float
    latency_p99: float
    rtf_p50: float
    rtf_p95: float
    gap_p95: float
    stall_rate: float
    stalls: int
    stall_s_mean: float
    others_cpu_pct: float = float("nan")
    """Mean CPU percent of all cores used by processes other than the harness and the servers
    it started, while this level ran (NaN when not measured)."""

    def to_dict(self) -> dict:
        return asdict(self)


def level_stats(concurrency: int, timelines: list[Timeline],
                others_cpu_pct: float = float("nan")) -> LevelStats:
    """Statistics of one level's measured requests (all of them finished).

    Raises:
        ValueError: no timelines, or one that has not finished.
    """
    if not timelines:
        raise ValueError("a level needs at least one measured request")
    if any(t.done is None for t in timelines):
        raise ValueError("every measured request must have finished")
    good = [t for t in timelines if t.ok]
    wall = max(t.done or 0.0 for t in timelines) - min(t.sent for t in timelines)
    audio = sum(t.audio_s for t in good)
    stalls = [t.stalls() for t in good]
    gaps = [g for t in good for g in t.gaps()]
    ttfa = [t.ttfa for t in good]
    latency = [t.latency for t in good]
    rtf = [t.rtf for t in good]
    kinds = Counter(t.error or "no_audio" for t in timelines if not t.ok)
    return LevelStats(
        concurrency=concurrency,
        requests=len(timelines),
        ok=len(good),
        errors=len(timelines) - len(good),
        errors_by_kind=dict(sorted(kinds.items())),
        wall_s=wall,
        audio_s=audio,
        audio_s_per_s=audio / wall if wall > 0 else float("nan"),
        requests_per_s=len(good) / wall if wall > 0 else float("nan"),
        ttfa_p50=percentile(ttfa, 50),
        ttfa_p95=percentile(ttfa, 95),
        ttfa_p99=percentile(ttfa, 99),
        latency_p50=percentile(latency, 50),
        latency_p95=percentile(latency, 95),
        latency_p99=percentile(latency, 99),
        rtf_p50=percentile(rtf, 50),
        rtf_p95=percentile(rtf, 95),
        gap_p95=percentile(gaps, 95) if gaps else 0.0,
        stall_rate=sum(s.count > 0 for s in stalls) / len(good) if good else float("nan"),
        stalls=sum(s.count for s in stalls),
        stall_s_mean=float(np.mean([s.seconds for s in stalls])) if good else float("nan"),
        others_cpu_pct=others_cpu_pct,
    )


@dataclass(frozen=True)
class Spread:
    """A number over repeats: the median and its min-max range (NaN values are left out)."""

    median: float
    lo: float
    hi: float
    n: int

    def overlaps(self, other: Spread) -> bool:
        """Whether the two [lo, hi] ranges share a point."""
        return self.lo <= other.hi and other.lo <= self.hi

    def to_dict(self) -> dict:
        return asdict(self)


def spread(values: list[float]) -> Spread:
    """Median and range of `values`, ignoring NaN; all NaN (or none) gives NaN with n = 0."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        nan = float("nan")
        return Spread(nan, nan, nan, 0)
    return Spread(float(np.median(finite)), min(finite), max(finite), len(finite))


NUMBER_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(LevelStats) if f.type in ("int", "float") and f.name != "concurrency"
)
"""The `LevelStats` fields that are single numbers (all but concurrency and errors_by_kind)."""


def summarize(stats: Sequence[Any], keys: Sequence[str] = NUMBER_FIELDS) -> dict[str, Spread]:
    """`spread` of each number `keys` names (default: every number of `LevelStats`) over
    several runs of the same level, or of the same open-loop rate (`RateStats`)."""
    return {key: spread([float(getattr(s, key)) for s in stats]) for key in keys}


def merge_errors(stats: Sequence[Any]) -> dict[str, int]:
    """Errors by kind (`errors_by_kind`) summed over several runs of the same level or rate."""
    total: Counter[str] = Counter()
    for s in stats:
        total.update(s.errors_by_kind)
    return dict(sorted(total.items()))
