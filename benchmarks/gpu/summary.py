"""The GPU run's summary: one row per figure the issue asks for, beside its anchor or goal.

`summary_rows` reads the steps' JSON parts (as `run.py` records them: ``{"status", "part"}``
per step) and never raises on a missing or failed part: the row then says what is missing.
Anchors (issue 37, the seeds' figures on an H200): the flow solve at b1 / 250 frames 145 ms
eager and 41 ms replayed (goal at most 20 ms replayed); served CosyVoice3 14.9 audio-s/s and
TTFA 172 ms at concurrency 1, 34.7 audio-s/s at 32; streams without a stall at concurrency 8
(vLLM-Omni 19.5%; goal at least 95%); NanoCodec streamed RTFx at least 95% of one-shot with 0
host copies per chunk.
"""

from __future__ import annotations

from typing import Any

Row = list[str]


def _part(steps: dict[str, Any], name: str) -> dict[str, Any] | None:
    step = steps.get(name)
    if not step:
        return None
    part = step.get("part")
    return part if isinstance(part, dict) else None


def _missing(steps: dict[str, Any], name: str) -> str:
    step = steps.get(name)
    return "not run" if not step else step.get("status", "?")


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("meets" if ok else "MISSES")


def _ms(value: Any) -> str:
    return f"{value:.1f} ms" if isinstance(value, int | float) else "-"


def torch_rows(steps: dict[str, Any]) -> list[Row]:
    part = _part(steps, "torch-api")
    if part is None or "checked" not in part:
        return [["torch API names resolve", _missing(steps, "torch-api"), "all", "n/a"]]
    missing = part.get("missing") or {}
    return [[f"torch API names resolve (torch {part.get('torch')})",
             f"{part['checked'] - len(missing)}/{part['checked']}", "all",
             _verdict(not missing)]]


def parity_rows(steps: dict[str, Any]) -> list[Row]:
    part = _part(steps, "cv3-parity")
    checks = (part or {}).get("checks")
    if not isinstance(checks, dict):
        return [["CosyVoice3 parity fixtures", _missing(steps, "cv3-parity"), "all", "n/a"]]
    good = sum(bool(c.get("ok")) for c in checks.values())
    return [["CosyVoice3 parity fixtures", f"{good}/{len(checks)} within tolerance", "all",
             _verdict(good == len(checks))]]


def solve_rows(steps: dict[str, Any]) -> list[Row]:
    part = _part(steps, "cv3-solve")
    dtypes = (part or {}).get("dtypes")
    if not isinstance(dtypes, dict):
        return [["flow solve b1/250", _missing(steps, "cv3-solve"), "145 / 41 ms", "n/a"]]
    rows: list[Row] = []
    for dtype, record in dtypes.items():
        shapes = record.get("shapes", {})
        same = sum(bool(s.get("bit_identical")) for s in shapes.values())
        replayed = sum(bool(s.get("replayed")) for s in shapes.values())
        rows.append([f"flow capture {dtype}: replay == eager", f"{same}/{len(shapes)} "
                     f"identical, {replayed} replayed, capture {record.get('capture_s', 0):.1f} s",
                     "all", _verdict(bool(shapes) and same == len(shapes))])
        for key, s in shapes.items():
            anchor, ok = "", None
            if key == "b1/250":
                anchor = "seed 145 eager / 41 replay; goal <= 20 ms"
                ok = s.get("replayed", False) and s.get("replay_ms", 1e9) <= 20.0
            rows.append([f"flow solve {dtype} {key}",
                         f"eager {_ms(s.get('eager_ms'))}, replay {_ms(s.get('replay_ms'))}",
                         anchor, _verdict(ok)])
            kernels = s.get("eager_kernels")
            if kernels and kernels.get("top"):
                first = kernels["top"][0]
                rows.append([f"  eager {key}: {kernels['what']}",
                             f"{kernels['count']} taking {kernels['ms']:.1f} ms; most: "
                             f"{first['name'][:40]} x{first['count']} {first['ms']:.1f} ms",
                             "", "n/a"])
    return rows


def served_rows(steps: dict[str, Any]) -> list[Row]:
    part = _part(steps, "cv3-serve")
    levels = (part or {}).get("levels")
    if not isinstance(levels, dict) or "error" in levels:
        why = (part or {}).get("error") or (levels or {}).get("error") \
            or _missing(steps, "cv3-serve")
        return [["CosyVoice3 served", str(why)[:80], "seed 14.9 audio-s/s c1", "n/a"]]
    rows: list[Row] = [["CosyVoice3 start-up (capture included)",
                        f"{part.get('ready_s')} s, GPU memory "
                        f"{part.get('gpu_memory_used_mib')} MiB", "", "n/a"]]
    anchors = {"c1": (14.9, 0.172), "c32": (34.7, None)}
    for key, level in levels.items():
        rate, ttfa = level.get("audio_s_per_s"), level.get("ttfa_p50")
        figure = (f"{rate:.1f} audio-s/s, TTFA p50 {1000 * ttfa:.0f} ms, "
                  f"stall rate {level.get('stall_rate', 0):.0%}, errors {level.get('errors')}"
                  if isinstance(rate, int | float) and isinstance(ttfa, int | float) else "-")
        anchor, ok = "", None
        if key in anchors:
            seed_rate, seed_ttfa = anchors[key]
            anchor = f"seed {seed_rate} audio-s/s" + (f", {1000 * seed_ttfa:.0f} ms"
                                                      if seed_ttfa else "")
            ok = isinstance(rate, int | float) and rate >= seed_rate and (
                seed_ttfa is None or (isinstance(ttfa, int | float) and ttfa <= seed_ttfa))
        if key == "c8":
            anchor = "stall-free >= 95% (vLLM-Omni 19.5%)"
            ok = isinstance(level.get("stall_rate"), int | float) and \
                1 - level["stall_rate"] >= 0.95
        rows.append([f"CosyVoice3 served {key}", figure, anchor, _verdict(ok)])
    return rows


BISTREAM_MODES = ("fed", "per-sentence")
"""`bistream_served.MODES`' names (that module imports voxflow; this one must not)."""

BISTREAM_GOAL = "every session audio, no error"
FED_FIRST = "fed first (CPU tiny: 0.30 vs 0.72 s)"


def _bistream_figure(level: dict[str, Any]) -> tuple[str, bool]:
    """One (mode, level) record as a figure and whether it meets `BISTREAM_GOAL`."""
    if "skipped" in level or "error" in level:
        return str(level.get("skipped") or level.get("error"))[:80], False
    p50: Any = level.get("ttfa_p50")
    p95: Any = level.get("ttfa_p95")
    rate: Any = level.get("audio_s_per_s")
    stall: Any = level.get("stall_rate")
    numbers = all(isinstance(v, int | float) for v in (p50, p95, rate, stall))
    figure = (f"TTFA p50 {1000 * p50:.0f} ms p95 {1000 * p95:.0f} ms, {rate:.2f} audio-s/s, "
              f"stall rate {stall:.0%}, ok {level.get('ok')}/{level.get('requests')}"
              if numbers else f"no first audio, ok {level.get('ok')}/{level.get('requests')}")
    requests = level.get("requests")
    ok = (numbers and isinstance(requests, int) and requests > 0 and level.get("errors") == 0
          and level.get("ok") == requests)
    if level.get("errors"):
        figure += f", errors {level.get('errors_by_kind')}"
    return figure, ok


def bistream_rows(steps: dict[str, Any]) -> list[Row]:
    """The cv3-bistream step: start-up, one row per (mode, level) with its TTFA p50/p95,
    audio-s/s, stall rate and sessions answered (goal: every session audio, no error), and per
    level fed against per-sentence first audio: alone, fed must come first (issue 43's point:
    first audio after the first words; no GPU anchor, the CPU tiny figures beside it); under
    load the ratio is shown without a verdict."""
    part = _part(steps, "cv3-bistream") or {}
    modes = part.get("modes")
    if not isinstance(modes, dict) or not modes:
        why = part.get("error") or _missing(steps, "cv3-bistream")
        return [["CosyVoice3 WS fed vs per-sentence", str(why)[:80], BISTREAM_GOAL, "n/a"]]
    rows: list[Row] = [["CosyVoice3 WS start-up (bistream step)",
                        f"{part.get('ready_s')} s, GPU memory "
                        f"{part.get('gpu_memory_used_mib')} MiB; {part.get('words')} words at "
                        f"{part.get('words_per_s')}/s", "", "n/a"]]
    levels = list(dict.fromkeys(key for mode in modes.values() for key in mode))
    for key in levels:
        first: dict[str, Any] = {}
        for name in BISTREAM_MODES:
            level = (modes.get(name) or {}).get(key)
            if level is None:
                rows.append([f"CosyVoice3 WS {name} {key}", "not run", BISTREAM_GOAL, "MISSES"])
                continue
            figure, ok = _bistream_figure(level)
            rows.append([f"CosyVoice3 WS {name} {key}", figure, BISTREAM_GOAL, _verdict(ok)])
            first[name] = level.get("ttfa_p50")
        fed, per = first.get("fed"), first.get("per-sentence")
        if isinstance(fed, int | float) and isinstance(per, int | float) and per > 0:
            rows.append([f"CosyVoice3 WS first audio {key}: fed / per-sentence",
                         f"{1000 * fed:.0f} / {1000 * per:.0f} ms ({fed / per:.2f}x)",
                         FED_FIRST if key == "c1" else "",
                         _verdict(fed < per) if key == "c1" else "n/a"])
    if part.get("error"):
        rows.append(["CosyVoice3 WS fed vs per-sentence", str(part["error"])[:80],
                     BISTREAM_GOAL, "MISSES"])
    return rows


def codec_rows(steps: dict[str, Any]) -> list[Row]:
    part = _part(steps, "nanocodec")
    streamed = (part or {}).get("streamed")
    if not isinstance(streamed, dict):
        return [["NanoCodec streamed", _missing(steps, "nanocodec"), ">= 0.95, 0 copies",
                 "n/a"]]
    rows: list[Row] = []
    for mode in ("eager:4", "graph:4", "eager:4x8", "graph:4x8"):
        r = streamed.get(mode)
        if not r:
            continue
        ok = r["ratio_to_one_shot"] >= 0.95 and r["host_device_copies"] == 0
        rows.append([f"NanoCodec streamed {mode}",
                     f"RTFx {r['rtfx']:.1f} ({r['ratio_to_one_shot']:.2f} of one-shot), copies "
                     f"{r['host_device_copies']}, syncs {r['host_syncs']}",
                     ">= 0.95 of one-shot, 0 copies", _verdict(ok)])
    same = part.get("replay_vs_eager", {}) if part else {}
    if same:
        good = sum(bool(r.get("bit_identical")) for r in same.values())
        rows.append(["NanoCodec replay == eager", f"{good}/{len(same)} identical", "all",
                     _verdict(good == len(same))])
    return rows


def magpie_rows(steps: dict[str, Any]) -> list[Row]:
    part = _part(steps, "magpie-serve")
    if part is None:
        return [["MagpieTTS served", _missing(steps, "magpie-serve"), "", "n/a"]]
    rows: list[Row] = []
    for key, value in (part.get("summary") or {}).items():
        rows.append([f"MagpieTTS {key}", str(value)[:70], "", "n/a"])
    if not rows:
        rows.append(["MagpieTTS served", str(part.get("error", "no summary"))[:80], "", "n/a"])
    return rows


def summary_rows(steps: dict[str, Any], dry_run: bool = False) -> list[Row]:
    """[check, figure, anchor or goal, verdict] for every figure the issue names: first each
    step's status and seconds, then the figures. In a dry run (CPU, tiny models) the figures
    are compared with nothing: verdicts on identity and counts stay, those against the H200
    anchors read "dry run"."""
    rows = [[name, step.get("status", "?"), f"{step.get('seconds', 0)} s", ""]
            for name, step in steps.items()]
    for build in (torch_rows, parity_rows, solve_rows, served_rows, bistream_rows, codec_rows,
                  magpie_rows):
        try:
            rows += build(steps)
        except Exception as exc:  # noqa: BLE001 (a malformed part must not lose the table)
            rows.append([build.__name__, f"unreadable: {type(exc).__name__}: {exc}", "", "n/a"])
    if dry_run:
        for row in rows:
            if row[2].startswith(("seed", ">=", "stall-free")):
                row[3] = "dry run"
    return rows


def table(rows: list[Row]) -> str:
    """Rows as an aligned plain-text table with a header."""
    header = ["check", "figure", "anchor / goal", "verdict"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [header, *rows]]
    return "\n".join(lines)
