"""Terminal tables and the JSON record of `bench run`.

Every cell over several repeats is the median with its min-max range: ``0.212 [0.205-0.230]``
(just the value when there is one sample or no spread). NaN (no successful request) prints as
``-``. The JSON record holds every repeat's full `LevelStats`, their summaries, the gates passed
with every load sample, and the machine and server records.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from voxflow.bench.metrics import LevelStats, Spread, merge_errors, summarize
from voxflow.bench.runner import CaseRun

RUN_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("ttfa_p50", "TTFA p50", 3), ("ttfa_p95", "p95", 3), ("ttfa_p99", "p99", 3),
    ("latency_p50", "latency p50", 3), ("latency_p95", "p95", 3), ("latency_p99", "p99", 3),
    ("rtf_p50", "RTF p50", 3), ("audio_s_per_s", "audio-s/s", 2),
    ("requests_per_s", "req/s", 2), ("stall_rate", "stall rate", 2),
)
"""(LevelStats field, column header, decimals) of the `bench run` table, after case/conc/ok."""


def fmt_number(value: float | None, digits: int) -> str:
    """`value` with `digits` decimals; ``-`` for NaN or None (NaN read back from JSON)."""
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def fmt_spread(s: Spread, digits: int) -> str:
    """``median`` or ``median [lo-hi]`` (see the module docstring)."""
    if s.n == 0:
        return "-"
    cell = fmt_number(s.median, digits)
    if s.n > 1 and fmt_number(s.lo, digits) != fmt_number(s.hi, digits):
        cell += f" [{fmt_number(s.lo, digits)}-{fmt_number(s.hi, digits)}]"
    return cell


def render_table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned text columns separated by two spaces."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [header, *rows])


def group_levels(runs: list[CaseRun]) -> dict[str, dict[int, list[LevelStats]]]:
    """case -> concurrency -> that level's stats from every repeat (in run order)."""
    grouped: dict[str, dict[int, list[LevelStats]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for stats in run.levels:
            grouped[run.case][stats.concurrency].append(stats)
    return {case: dict(levels) for case, levels in grouped.items()}


def spread_table(key_header: str, grouped: dict[str, dict[Any, list[Any]]],
                 columns: tuple[tuple[str, str, int], ...], key_cell: Callable[[Any], str],
                 sent: str) -> str:
    """One row per case and key (concurrency or rate): ok/`sent` summed over the repeats, each
    column's spread (`columns`: stats field, header, decimals), and the errors by kind."""
    header = ["case", key_header, "ok/sent", *[title for _, title, _ in columns], "errors"]
    rows = []
    for case, by_key in grouped.items():
        for key, stats in by_key.items():
            summary = summarize(stats, [field for field, _, _ in columns])
            ok, total = sum(s.ok for s in stats), sum(getattr(s, sent) for s in stats)
            errors = merge_errors(stats)
            rows.append([case, key_cell(key), f"{ok}/{total}",
                         *[fmt_spread(summary[field], d) for field, _, d in columns],
                         ", ".join(f"{k}: {v}" for k, v in errors.items()) or "0"])
    return render_table(header, rows)


def run_table(runs: list[CaseRun]) -> str:
    """The `bench run` table: one row per case and concurrency, times in seconds."""
    return spread_table("conc", group_levels(runs), RUN_COLUMNS, str, "requests")


def runs_record(runs: list[CaseRun]) -> dict[str, Any]:
    """Every repeat's stats and the per-level summaries, by case and concurrency."""
    return {
        case: [{"concurrency": c,
                "repeats": [s.to_dict() for s in stats],
                "summary": {k: v.to_dict() for k, v in summarize(stats).items()},
                "errors_by_kind": merge_errors(stats)}
               for c, stats in levels.items()]
        for case, levels in group_levels(runs).items()
    }


def gates_record(runs: list[CaseRun]) -> list[dict[str, Any]]:
    return [g.to_dict() for r in runs for g in r.gates]


