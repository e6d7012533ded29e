"""``bench compare --request-rate/--find-capacity``: open-loop numbers per arm, with verdicts.

Each arm's open-loop runs are pooled over all its starts (and repeats), as the closed-loop
comparison pools levels: a capacity is the median of the arm's searches with their min-max
range, and each fixed rate's numbers the median and range over its runs. Verdicts against the
base arm are those of `voxflow.bench.compare.verdict`: ``within noise`` when the ranges overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from voxflow.bench.compare import versus, vs_cells, vs_header
from voxflow.bench.metrics import merge_errors, summarize
from voxflow.bench.openloop import OpenLoopRun
from voxflow.bench.openloop_report import RATE_NUMBERS, capacities, group_rates
from voxflow.bench.report import render_table

RATE_METRICS: tuple[tuple[str, str, bool, int], ...] = (
    ("goodput", "goodput", False, 3), ("ttfa_p50", "TTFA p50 (s)", True, 3),
    ("ttfa_p99", "TTFA p99 (s)", True, 3), ("stall_rate", "stall rate", True, 2),
    ("audio_s_per_s", "audio-s/s", False, 2), ("errors", "errors", True, 0),
)
"""(RateStats number, label, lower is better, decimals) compared per fixed rate."""

CAPACITY_METRICS: tuple[tuple[str, str, int], ...] = (
    ("rate", "capacity req/s", 3), ("audio_s_per_s", "capacity audio-s/s", 2),
)
"""(Capacity number, label, decimals); higher is better for both."""


def open_comparison(runs_by_arm: dict[str, list[OpenLoopRun]],
                    arms: Sequence[str]) -> dict[str, Any]:
    """case -> {"capacity": ..., "rates": [...]}: each arm's spreads, ratio and verdict vs base."""
    base, others = arms[0], arms[1:]
    caps = {arm: capacities(runs_by_arm.get(arm, [])) for arm in arms}
    rates = {arm: group_rates(runs_by_arm.get(arm, [])) for arm in arms}
    result: dict[str, Any] = {}
    for case in dict.fromkeys([*rates[base], *caps[base]]):
        entry: dict[str, Any] = {"rates": []}
        if case in caps[base]:
            spreads = {arm: caps[arm].get(case, {}) for arm in arms}
            entry["capacity"] = {
                "arms": {arm: {k: v.to_dict() for k, v in s.items()}
                         for arm, s in spreads.items()},
                "vs_base": {arm: {key: versus(spreads[base][key], spreads[arm][key], False)
                                  for key, _, _ in CAPACITY_METRICS}
                            for arm in others if spreads[arm]},
            }
        for rate in rates[base].get(case, {}):
            summaries = {arm: summarize(rates[arm].get(case, {}).get(rate, []), RATE_NUMBERS)
                         for arm in arms}
            entry["rates"].append({
                "rate": rate,
                "arms": {arm: {k: v.to_dict() for k, v in summaries[arm].items()}
                         for arm in arms},
                "errors_by_kind": {arm: merge_errors(rates[arm].get(case, {}).get(rate, []))
                                   for arm in arms},
                "vs_base": {arm: {key: versus(summaries[base][key], summaries[arm][key], lower)
                                  for key, _, lower, _ in RATE_METRICS}
                            for arm in others},
            })
        result[case] = entry
    return result


def open_comparison_table(result: dict[str, Any], arms: Sequence[str]) -> str:
    """One row per case and capacity number, then per case, fixed rate and metric."""
    rows = []
    for case, entry in result.items():
        if "capacity" in entry:
            cap = entry["capacity"]
            rows += [[case, "search", label,
                      *vs_cells(arms, cap["arms"], cap["vs_base"], key, digits)]
                     for key, label, digits in CAPACITY_METRICS]
        rows += [[case, f"{row['rate']:g}", label,
                  *vs_cells(arms, row["arms"], row["vs_base"], key, digits)]
                 for row in entry["rates"] for key, label, _, digits in RATE_METRICS]
    return render_table(vs_header("rate", arms), rows)
