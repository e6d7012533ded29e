"""``bench compare``: the same bench against several servers, started in rotation, with verdicts.

For each start in `rotation` order the arm's server is started on a fresh port, health-polled,
described (`Adapter.info`, and for voxflow the settings it logs at start-up), benchmarked with
`run_sweep` (idle gate before each case) and stopped. Each arm's numbers are pooled over all its
starts and repeats; every metric is the median with its min-max range.

Verdict of arm X against the base (the first arm), per metric: ``within noise`` when the two
ranges overlap, else ``better`` or ``worse`` by the metric's direction. With one start per arm
the ranges are points and every difference gets a verdict: use ``--runs 3`` or more.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voxflow.bench.adapters import Target, make_adapter
from voxflow.bench.arms import Arm, ArmServer, free_port, rotation
from voxflow.bench.idle import GateResult
from voxflow.bench.machine import git_state
from voxflow.bench.metrics import (
    METRIC_BY_KEY,
    METRICS,
    Spread,
    merge_errors,
    summarize,
)
from voxflow.bench.openloop import OpenLoopPlan, OpenLoopRun, run_open_loop
from voxflow.bench.quality import synthesize_clips
from voxflow.bench.report import fmt_number, fmt_spread, group_levels, render_table
from voxflow.bench.runner import Case, CaseRun, LevelGuard, SweepPlan, http_client, run_sweep

COMPARE_KEYS = ("ttfa_p50", "audio_s_per_s", "rtf_p50", "stall_rate", "errors",
                "others_cpu_pct")
"""The rows of the comparison table per level (the JSON has every metric); the last one is not
a result but the load of other processes while the level ran, to judge the others by."""


@dataclass
class ArmStart:
    """One start of one arm: where it ran, what it said about itself, and its sweep."""

    arm: str
    slot: int
    command: str
    url: str
    ready_s: float
    info: dict[str, Any]
    runs: list[CaseRun] = field(default_factory=list)
    open_runs: list[OpenLoopRun] = field(default_factory=list)
    """The open-loop runs (``--request-rate``/``--find-capacity``) instead of `runs`."""

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "slot": self.slot, "command": self.command, "url": self.url,
                "ready_s": self.ready_s, "info": self.info,
                "gates": [g.to_dict() for r in self.runs for g in r.gates]
                + [g.to_dict() for r in self.open_runs for g in r.gates],
                "open_loop": [r.to_dict() for r in self.open_runs],
                "levels": {r.case: [s.to_dict() for s in r.levels] for r in self.runs},
                "discarded_levels": {r.case: [s.to_dict() for s in r.discarded]
                                     for r in self.runs if r.discarded}}


def logged_settings(log_path: Path) -> dict[str, Any] | None:
    """The settings JSON a voxflow server logs at start-up (``settings: {...}``), if any."""
    try:
        for line in log_path.read_text(errors="replace").splitlines():
            head, sep, tail = line.partition("settings: ")
            if sep and tail.startswith("{"):
                return json.loads(tail)
    except (OSError, ValueError):
        pass
    return None


async def run_compare(
    arms: list[Arm],
    target: Callable[[Arm, str], Target],
    cases: list[Case],
    plan: SweepPlan,
    runs: int,
    work_dir: Path,
    gate: Callable[[str], GateResult] | None = None,
    quality_case: Case | None = None,
    health_timeout_s: float = 180.0,
    say: Callable[[str], None] = lambda line: None,
    guard: LevelGuard | None = None,
    open_plan: OpenLoopPlan | None = None,
) -> list[ArmStart]:
    """Start, bench and stop every arm `runs` times in rotation; see the module docstring.

    Args:
        target: (arm, url) -> the `Target` to bench for that arm's server.
        quality_case: when given, each arm's first start also saves one clip per text of it
            under ``work_dir/quality/<arm>`` (see `voxflow.bench.quality`).
        guard: retake levels during which other processes were busy (see `run_sweep`).
        open_plan: run this open-loop plan (`voxflow.bench.openloop`) instead of the sweep.
    """
    by_name = {a.name: a for a in arms}
    starts: list[ArmStart] = []
    for slot, name in enumerate(rotation([a.name for a in arms], runs)):
        arm = by_name[name]
        port = free_port()
        log_path = work_dir / "logs" / f"{slot:02d}-{name}.log"
        with ArmServer(arm, port, log_path) as server:
            adapter = make_adapter(target(arm, server.url))
            say(f"[{slot + 1}/{runs * len(arms)}] starting {name}: {server.command}")
            async with http_client(1) as client:
                ready_s = await server.wait_ready(adapter, client, health_timeout_s)
                info = await adapter.info(client)
            settings = logged_settings(log_path)
            if settings is not None:
                info["settings"] = settings
            info["git"] = git_state(arm.cwd)
            start = ArmStart(name, slot, server.command, server.url, ready_s, info)
            say(f"{name} ready in {ready_s:.1f} s")
            if open_plan is None:
                start.runs = await run_sweep(adapter, cases, plan, gate, say=say, guard=guard)
            else:
                start.open_runs = await run_open_loop(adapter, cases, open_plan, gate, say)
            if quality_case is not None and not any(s.arm == name for s in starts):
                say(f"{name}: synthesizing {len(quality_case.texts)} quality clips")
                await synthesize_clips(adapter, quality_case, work_dir / "quality" / name, plan)
            starts.append(start)
    return starts


def verdict(base: Spread, other: Spread, lower_is_better: bool) -> str:
    """``better``/``worse`` for `other` against `base`, or ``within noise`` if ranges overlap."""
    if base.n == 0 or other.n == 0:
        return "n/a"
    if base.overlaps(other):
        return "within noise"
    other_lower = other.median < base.median
    return "better" if other_lower == lower_is_better else "worse"


def ratio(base: Spread, other: Spread) -> float:
    """other / base of the medians; NaN when undefined (0/0 or no data), inf for x/0."""
    if base.n == 0 or other.n == 0 or (base.median == 0 and other.median == 0):
        return float("nan")
    return other.median / base.median if base.median else math.inf


def versus(base: Spread, other: Spread, lower_is_better: bool) -> dict[str, Any]:
    """`other` against `base`: the `ratio` of the medians and the `verdict`."""
    return {"ratio": ratio(base, other), "verdict": verdict(base, other, lower_is_better)}


def comparison(starts: list[ArmStart], arms: list[str]) -> dict[str, Any]:
    """Per case, concurrency and metric: each arm's spread, and ratio and verdict vs the base."""
    # arm -> case -> concurrency -> stats of every start and repeat
    data = {arm: group_levels([r for s in starts if s.arm == arm for r in s.runs]) for arm in arms}
    base, others = arms[0], arms[1:]
    result: dict[str, Any] = {}
    for case, levels in data[base].items():
        rows = []
        for c in sorted(levels):
            pooled = {arm: data[arm].get(case, {}).get(c, []) for arm in arms}
            summaries = {arm: summarize(pooled[arm]) for arm in arms}
            row: dict[str, Any] = {"concurrency": c, "arms": {}, "errors_by_kind": {}}
            for arm in arms:
                row["arms"][arm] = {k: v.to_dict() for k, v in summaries[arm].items()}
                row["errors_by_kind"][arm] = merge_errors(pooled[arm])
            row["vs_base"] = {
                arm: {m.key: versus(summaries[base][m.key], summaries[arm][m.key],
                                    m.lower_is_better)
                      for m in METRICS if m.result}
                for arm in others
            }
            rows.append(row)
        result[case] = rows
    return result


def vs_header(level: str, arms: Sequence[str]) -> list[str]:
    """A comparison table's header: case, `level` (conc, rate), metric, each arm, and each
    other arm's ratio and verdict against the base (the first arm)."""
    base, others = arms[0], arms[1:]
    header = ["case", level, "metric", f"{base} (base)", *others]
    for arm in others:
        header += [f"{arm}/{base}", f"verdict {arm}" if len(others) > 1 else "verdict"]
    return header


def vs_cells(arms: Sequence[str], per_arm: dict[str, Any], vs: dict[str, Any], key: str,
             digits: int, absent: str = "n/a") -> list[str]:
    """Each arm's spread of `key` (``-`` without one), then each other arm's ratio and verdict
    against the base (`absent` for a metric without a verdict)."""
    cells = [fmt_spread(Spread(**spread), digits) if (spread := per_arm.get(arm, {}).get(key))
             else "-" for arm in arms]
    for arm in arms[1:]:
        v = vs.get(arm, {}).get(key, {"ratio": math.nan, "verdict": absent})
        cells += [fmt_number(v["ratio"], 2), v["verdict"]]
    return cells


def comparison_table(result: dict[str, Any], arms: list[str]) -> str:
    """The terminal table: one row per case, concurrency and metric of `COMPARE_KEYS`."""
    rows = [[case, str(row["concurrency"]), METRIC_BY_KEY[key].label,
             *vs_cells(arms, row["arms"], row["vs_base"], key, METRIC_BY_KEY[key].digits,
                       "(load)")]
            for case, levels in result.items() for row in levels for key in COMPARE_KEYS]
    return render_table(vs_header("conc", arms), rows)
