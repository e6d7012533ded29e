"""`benchmarks/gpu/run.py` (issue 37): the GPU run's steps in a dry run, and its summary.

The dry run of the NanoCodec step runs the same script the GPU runs, on the CPU with the tiny
decoder; the JSON holds every figure the GPU run reports (streamed vs one-shot per chunk, TTFA,
copies and syncs per chunk, replay vs eager) and the summary reads it. The whole rehearsal,
every step in a venv holding only the GPU machine's packages, is `make gpu-rehearsal`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

from summary import solve_rows, summary_rows, table  # noqa: E402


def test_dry_run_of_the_codec_step_writes_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "benchmarks/gpu/run.py", "--dry-run", "--only",
                           "nanocodec", "--out-dir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.json", "logs.tar.gz",
                                                          "summary.txt"]
    record = json.loads((tmp_path / "gpu.json").read_text())
    assert record["facts"]["dry_run"] is True and list(record["steps"]) == ["nanocodec"]
    step = record["steps"]["nanocodec"]
    assert step["status"] == "ok" and step["limit_s"] == 75
    doc = step["part"]
    assert doc["decoder"] == "tiny"
    # one stream and 2 streams per step at every chunk; no graph modes on a CPU
    assert set(doc["streamed"]) == {f"eager:{c}{b}" for c in (1, 2, 4, 8) for b in ("", "x2")}
    for row in doc["streamed"].values():
        assert row["host_device_copies"] == 0 and row["host_syncs"] == 0
        assert row["rtfx"] > 0 and row["ttfa_ms"] > 0 and row["ratio_to_one_shot"] > 0
    assert all(s == "eager: device is cpu" for s in doc["graphs"]["status"].values())
    assert set(doc["replay_vs_eager"]) == {"1", "2", "4", "8", "1x2", "2x2", "4x2", "8x2"}
    assert all(r["bit_identical"] and r["rerun_bit_identical"] and not r["captured"]
               for r in doc["replay_vs_eager"].values())
    assert ["NanoCodec replay == eager", "8/8 identical", "all", "meets"] in record["summary"]
    codec = [r for r in record["summary"] if r[0] == "NanoCodec streamed eager:4"]
    assert len(codec) == 1 and codec[0][3] == "dry run"  # no H200 anchor verdict on a CPU
    assert "NanoCodec streamed eager:4" in (tmp_path / "summary.txt").read_text()


def test_unknown_step_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "benchmarks/gpu/run.py", "--only", "cv3-serv",
                           "--out-dir", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert "unknown step(s): cv3-serv" in proc.stderr


def _solve(replay_ms: float, identical: bool) -> dict:
    shape = {"eager_ms": 145.0, "replay_ms": replay_ms, "replayed": True,
             "bit_identical": identical}
    return {"status": "ok", "part": {"dtypes": {"float32": {
        "capture_s": 2.0, "shapes": {"b1/250": shape, "b8/250": dict(shape)}}}}}


def test_solve_rows_hold_the_anchor_and_the_goal() -> None:
    rows = solve_rows({"cv3-solve": _solve(18.5, True)})
    assert rows[0] == ["flow capture float32: replay == eager",
                       "2/2 identical, 2 replayed, capture 2.0 s", "all", "meets"]
    assert rows[1] == ["flow solve float32 b1/250", "eager 145.0 ms, replay 18.5 ms",
                       "seed 145 eager / 41 replay; goal <= 20 ms", "meets"]
    assert rows[2][3] == "n/a"  # b8 has no anchor
    assert solve_rows({"cv3-solve": _solve(41.0, False)})[0][3] == "MISSES"
    assert solve_rows({"cv3-solve": _solve(41.0, True)})[1][3] == "MISSES"


def test_missing_and_failed_steps_are_named_not_raised() -> None:
    steps = {"cv3-serve": {"status": "timed out", "seconds": 190.0, "part": {"missing": "x"}},
             "nanocodec": {"status": "failed (exit 1)", "seconds": 3.0, "part": {"error": "e"}}}
    rows = summary_rows(steps)
    text = table(rows)
    assert ["cv3-serve", "timed out", "190.0 s", ""] in rows
    assert ["CosyVoice3 served", "timed out", "seed 14.9 audio-s/s c1", "n/a"] in rows
    assert ["NanoCodec streamed", "failed (exit 1)", ">= 0.95, 0 copies", "n/a"] in rows
    assert ["flow solve b1/250", "not run", "145 / 41 ms", "n/a"] in rows
    assert text.splitlines()[0].split() == ["check", "figure", "anchor", "/", "goal", "verdict"]


def test_readme_gives_each_steps_limit_and_the_budget() -> None:
    """benchmarks/gpu/README.md's table and budget are run.py's (they drifted once)."""
    import re

    from run import BUDGET_S, STEPS

    text = (ROOT / "benchmarks" / "gpu" / "README.md").read_text()
    table = dict(re.findall(r"^\| `([\w-]+)` \| (\d+) s \|", text, re.M))
    assert table == {step.name: str(step.limit_s) for step in STEPS}
    assert f"{BUDGET_S} s budget" in text


def _level(ttfa: float | None = 0.3, ok: int = 4, requests: int = 4,
           errors_by_kind: dict | None = None) -> dict:
    errors = sum((errors_by_kind or {}).values())
    return {"requests": requests, "ok": ok, "errors": errors,
            "errors_by_kind": errors_by_kind or {}, "ttfa_p50": ttfa,
            "ttfa_p95": None if ttfa is None else ttfa + 0.05, "audio_s_per_s": 8.5,
            "rtf_p50": 0.4, "stall_rate": 0.25, "stalls": 1}


def _bistream(fed_c1: dict, per_c1: dict, **extra: object) -> dict:
    part = {"ready_s": 12.3, "gpu_memory_used_mib": None, "words": 26, "words_per_s": 20.0,
            "modes": {"fed": {"c1": fed_c1, "c4": _level()},
                      "per-sentence": {"c1": per_c1, "c4": _level(ttfa=0.8)}}, **extra}
    return {"cv3-bistream": {"status": "ok", "part": part}}


def test_bistream_rows_give_each_mode_and_level_and_the_lone_comparison() -> None:
    from summary import BISTREAM_GOAL, bistream_rows

    rows = bistream_rows(_bistream(_level(0.298, 1, 1), _level(0.713, 1, 1)))
    assert rows[0] == ["CosyVoice3 WS start-up (bistream step)",
                       "12.3 s, GPU memory None MiB; 26 words at 20.0/s", "", "n/a"]
    by_name = {row[0]: row for row in rows}
    assert by_name["CosyVoice3 WS fed c1"] == [
        "CosyVoice3 WS fed c1",
        "TTFA p50 298 ms p95 348 ms, 8.50 audio-s/s, stall rate 25%, ok 1/1",
        BISTREAM_GOAL, "meets"]
    assert by_name["CosyVoice3 WS per-sentence c4"][3] == "meets"
    lone = by_name["CosyVoice3 WS first audio c1: fed / per-sentence"]
    assert lone[1] == "298 / 713 ms (0.42x)" and lone[3] == "meets"
    # under load the ratio is shown without a verdict
    assert by_name["CosyVoice3 WS first audio c4: fed / per-sentence"][3] == "n/a"
    # fed later than per-sentence alone misses issue 43's point
    late = bistream_rows(_bistream(_level(0.9, 1, 1), _level(0.7, 1, 1)))
    assert [r[3] for r in late if r[0].endswith("c1: fed / per-sentence")] == ["MISSES"]


def test_bistream_rows_fail_a_level_with_an_error_no_audio_or_a_skip() -> None:
    from summary import bistream_rows

    steps = _bistream(_level(ok=3, errors_by_kind={"timeout": 1}),
                      _level(ttfa=None, ok=0, errors_by_kind={"no_audio": 4}))
    skipped = {"skipped": "5 s left of the step's deadline"}
    steps["cv3-bistream"]["part"]["modes"]["fed"]["c4"] = skipped
    by_name = {row[0]: row for row in bistream_rows(steps)}
    fed = by_name["CosyVoice3 WS fed c1"]
    assert fed[3] == "MISSES" and fed[1].endswith("ok 3/4, errors {'timeout': 1}")
    per = by_name["CosyVoice3 WS per-sentence c1"]
    assert per[3] == "MISSES" and per[1].startswith("no first audio, ok 0/4")
    assert by_name["CosyVoice3 WS fed c4"][1:] == ["5 s left of the step's deadline",
                                                   "every session audio, no error", "MISSES"]
    assert "CosyVoice3 WS first audio c1: fed / per-sentence" not in by_name


def test_bistream_rows_name_a_missing_step_and_keep_their_verdicts_in_a_dry_run() -> None:
    rows = summary_rows({"cv3-bistream": {"status": "timed out", "seconds": 90.0,
                                          "part": {"missing": "x"}}})
    assert ["CosyVoice3 WS fed vs per-sentence", "timed out", "every session audio, no error",
            "n/a"] in rows
    dry = summary_rows(_bistream(_level(0.3, 1, 1), _level(0.7, 1, 1)), dry_run=True)
    # identity and counts keep their verdicts on a CPU: no row is relabelled "dry run"
    assert not [r for r in dry if r[0].startswith("CosyVoice3 WS") and r[3] == "dry run"]


def test_bistream_step_helpers() -> None:
    """`bistream_served.py`'s text, per-level record and verdict (no server, no torch)."""
    import math

    from bistream_served import MODES, case_text, level_ok, level_record, step_ok

    from voxflow.bench.metrics import level_stats
    from voxflow.bench.timeline import Timeline

    two = case_text(2)
    assert two.startswith("The lighthouse keeper") and two.endswith("kitchen window.")
    assert two.count(".") == 2 and len(case_text(0).split()) > len(two.split())
    answered = Timeline(0, sent=0.0, sample_rate=24000)
    answered.add(0.3, 24000)
    answered.add(1.2, 24000)
    answered.done = 1.3
    silent = Timeline(0, sent=0.0, sample_rate=24000)
    silent.done = 2.0
    good = level_record(level_stats(1, [answered]))
    assert good["ttfa_p50"] == 0.3 and good["stall_rate"] == 0.0 and level_ok(good)
    bad = level_record(level_stats(1, [silent]))
    assert bad["ttfa_p50"] is None and bad["errors_by_kind"] == {"no_audio": 1}
    assert not level_ok(bad) and not any(isinstance(v, float) and math.isnan(v)
                                         for v in bad.values())
    record = {"modes": {name: {"c1": good, "c4": good} for name, _ in MODES}}
    assert step_ok(record, [1, 4])
    assert not step_ok(record, [1, 4, 8])  # a level not measured fails the step
    assert not step_ok({**record, "error": "ServerFailed: ..."}, [1, 4])
    record["modes"]["per-sentence"]["c4"] = {"skipped": "5 s left"}
    assert not step_ok(record, [1, 4])
