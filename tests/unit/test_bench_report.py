"""Tables and pooled comparisons from synthetic level statistics."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

from voxflow.bench.compare import ArmStart, comparison, comparison_table, logged_settings
from voxflow.bench.metrics import LevelStats, Spread
from voxflow.bench.report import fmt_spread, run_table, runs_record
from voxflow.bench.runner import CaseRun
from voxflow.records import write_json

STATS = LevelStats(
    concurrency=1, requests=5, ok=5, errors=0, errors_by_kind={}, wall_s=2.0, audio_s=10.0,
    audio_s_per_s=5.0, requests_per_s=2.5, ttfa_p50=0.2, ttfa_p95=0.3, ttfa_p99=0.3,
    latency_p50=0.4, latency_p95=0.5, latency_p99=0.5, rtf_p50=0.2, rtf_p95=0.25, gap_p95=0.1,
    stall_rate=0.0, stalls=0, stall_s_mean=0.0,
)


def start(arm: str, slot: int, *stats: LevelStats) -> ArmStart:
    s = ArmStart(arm, slot, "cmd {port}", "http://127.0.0.1:1", 1.0, {})
    s.runs = [CaseRun("sentences", 0, levels=list(stats))]
    return s


def test_spread_cells():
    assert fmt_spread(Spread(0.2123, 0.2, 0.23, 3), 3) == "0.212 [0.200-0.230]"
    assert fmt_spread(Spread(0.2, 0.2, 0.2, 3), 3) == "0.200"
    assert fmt_spread(Spread(math.nan, math.nan, math.nan, 0), 3) == "-"


def test_run_table_has_one_row_per_case_and_level_with_ranges():
    runs = [CaseRun("line", r, levels=[replace(STATS, ttfa_p50=t),
                                       replace(STATS, concurrency=4, errors=1,
                                               errors_by_kind={"http_429": 1})])
            for r, t in enumerate([0.2, 0.3, 0.25])]
    table = run_table(runs).splitlines()
    assert table[0].split()[:4] == ["case", "conc", "ok/sent", "TTFA"]
    assert table[1].startswith("line") and "0.250 [0.200-0.300]" in table[1]
    assert "15/15" in table[1]
    assert table[2].split()[1] == "4" and table[2].endswith("http_429: 3")
    record = runs_record(runs)
    assert [lv["concurrency"] for lv in record["line"]] == [1, 4]
    assert record["line"][0]["summary"]["ttfa_p50"]["median"] == 0.25


def test_comparison_pools_every_start_and_gives_verdicts(tmp_path):
    starts = [
        start("base", 0, replace(STATS, ttfa_p50=1.0, audio_s_per_s=5.0)),
        start("head", 1, replace(STATS, ttfa_p50=0.5, audio_s_per_s=5.1)),
        start("head", 2, replace(STATS, ttfa_p50=0.6, audio_s_per_s=4.8)),
        start("base", 3, replace(STATS, ttfa_p50=1.1, audio_s_per_s=5.2)),
    ]
    result = comparison(starts, ["base", "head"])
    row = result["sentences"][0]
    assert row["arms"]["head"]["ttfa_p50"] == {"median": 0.55, "lo": 0.5, "hi": 0.6, "n": 2}
    assert row["vs_base"]["head"]["ttfa_p50"]["verdict"] == "better"
    assert row["vs_base"]["head"]["ttfa_p50"]["ratio"] == 0.55 / 1.05
    assert row["vs_base"]["head"]["audio_s_per_s"]["verdict"] == "within noise"
    table = comparison_table(result, ["base", "head"])
    assert table.splitlines()[0].split() == ["case", "conc", "metric", "base", "(base)", "head",
                                             "head/base", "verdict"]
    assert re.search(r"TTFA p50 \(s\)\s+1\.050 \[1\.000-1\.100\]\s+0\.550 \[0\.500-0\.600\]"
                     r"\s+0\.52\s+better", table)
    # The load during a level is shown beside the results, but gets no ratio or verdict.
    assert re.search(r"others' CPU %.*-\s+\(load\)$", table, re.MULTILINE)
    assert "others_cpu_pct" not in row["vs_base"]["head"]
    write_json(tmp_path / "c.json", {"comparison": result})  # NaN ratios become null
    assert json.loads((tmp_path / "c.json").read_text())["comparison"]["sentences"][0]


def test_settings_are_read_from_a_voxflow_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text('2026-01-01 INFO voxflow.cli: settings: {"server": {"port": 1}}\nother\n')
    assert logged_settings(log) == {"server": {"port": 1}}
    assert logged_settings(tmp_path / "missing.log") is None
