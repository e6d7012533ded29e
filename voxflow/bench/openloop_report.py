"""Terminal tables and JSON of open-loop runs (``bench run --request-rate/--find-capacity``).

Cells over several repeats are medians with their min-max range, as in `voxflow.bench.report`.
The rate table has one row per case and fixed rate; the capacity table one row per case, and
the probe table one row per probe of every search (probes differ between repeats, so they are
listed, not pooled).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from voxflow.bench.metrics import Spread, merge_errors, spread, summarize
from voxflow.bench.openloop import OpenLoopRun, RateStats
from voxflow.bench.report import fmt_number, fmt_spread, render_table, spread_table

RATE_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("goodput", "goodput", 3), ("ttfa_p50", "TTFA p50", 3), ("ttfa_p90", "p90", 3),
    ("ttfa_p99", "p99", 3), ("latency_p50", "latency p50", 3), ("stall_rate", "stall rate", 2),
    ("audio_s_per_s", "audio-s/s", 2), ("achieved_rate", "sent/s", 2),
    ("send_lag_p99", "send lag p99", 3), ("drain_s", "drain", 2),
)
"""(RateStats field, column header, decimals) after case, rate and ok/sent."""

RATE_NUMBERS: tuple[str, ...] = (
    "sent", "ok", "good", "goodput", "errors", "achieved_rate", "ttfa_p50", "ttfa_p90",
    "ttfa_p99", "latency_p50", "latency_p99", "stall_rate", "audio_s", "audio_s_mean",
    "audio_s_per_s", "send_lag_p99", "drain_s",
)
"""The `RateStats` numbers summarized over repeats (and over arm starts in a comparison)."""


def group_rates(runs: list[OpenLoopRun]) -> dict[str, dict[float, list[RateStats]]]:
    """case -> fixed rate -> that rate's stats from every repeat (in run order)."""
    grouped: dict[str, dict[float, list[RateStats]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for stats in run.rates:
            grouped[run.case][stats.rate].append(stats)
    return {case: dict(rates) for case, rates in grouped.items()}


def capacities(runs: list[OpenLoopRun]) -> dict[str, dict[str, Spread]]:
    """case -> {"rate": Spread of req/s, "audio_s_per_s": Spread} over the runs with a search."""
    by_case: dict[str, list[OpenLoopRun]] = defaultdict(list)
    for run in runs:
        if run.capacity is not None:
            by_case[run.case].append(run)
    return {case: {"rate": spread([r.capacity.rate for r in rs if r.capacity]),
                   "audio_s_per_s": spread([r.capacity.audio_s_per_s for r in rs
                                            if r.capacity])}
            for case, rs in by_case.items()}


def rate_table(runs: list[OpenLoopRun]) -> str:
    """One row per case and fixed rate (requests/s), times in seconds."""
    return spread_table("rate", group_rates(runs), RATE_COLUMNS, lambda rate: f"{rate:g}", "sent")


def capacity_table(runs: list[OpenLoopRun]) -> str:
    """Capacity per case, then every probe of every search."""
    caps = capacities(runs)
    header = ["case", "capacity req/s", "capacity audio-s/s", "searches", "bracketed"]
    rows = []
    for case, cap in caps.items():
        searches = [r.capacity for r in runs if r.case == case and r.capacity]
        rows.append([case, fmt_spread(cap["rate"], 3), fmt_spread(cap["audio_s_per_s"], 2),
                     str(len(searches)), f"{sum(c.bracketed for c in searches)}/{len(searches)}"])
    probe_header = ["case", "repeat", "probe", "rate", "ok/sent", "goodput", "TTFA p99",
                    "stall rate", "audio-s/s", "pass"]
    probe_rows = []
    for run in runs:
        if run.capacity is None:
            continue
        search = run.capacity
        for n, p in enumerate(search.probes):
            probe_rows.append([run.case, str(run.repeat + 1), str(n + 1), f"{p.rate:.4g}",
                               f"{p.ok}/{p.sent}", fmt_number(p.goodput, 3),
                               fmt_number(p.ttfa_p99, 3), fmt_number(p.stall_rate, 2),
                               fmt_number(p.audio_s_per_s, 2), "yes" if search.passed(p) else "no"])
    return render_table(header, rows) + "\n\n" + render_table(probe_header, probe_rows)


def open_loop_tables(runs: list[OpenLoopRun]) -> str:
    """The printed report: the rate table and/or the capacity table."""
    parts = []
    if any(r.rates for r in runs):
        parts.append(rate_table(runs))
    if any(r.capacity for r in runs):
        parts.append(capacity_table(runs))
    return "\n\n".join(parts)


def open_loop_record(runs: list[OpenLoopRun]) -> dict[str, Any]:
    """Every run's stats and probes, the per-rate summaries and the capacity per case."""
    return {
        "runs": [r.to_dict() for r in runs],
        "rates": {case: [{"rate": rate, "summary": {k: v.to_dict() for k, v in
                                                    summarize(stats, RATE_NUMBERS).items()},
                          "errors_by_kind": merge_errors(stats)}
                         for rate, stats in rates.items()]
                  for case, rates in group_rates(runs).items()},
        "capacity": {case: {k: v.to_dict() for k, v in cap.items()}
                     for case, cap in capacities(runs).items()},
    }
