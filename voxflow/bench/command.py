"""What ``voxflow bench run`` and ``voxflow bench compare`` do with their parsed options.

Progress goes to stderr, the table to stdout, the full record to ``--out``. Exit status: 0; 1
when a server fails or every request of a level fails, or ``--check`` finds runs that differ;
2 for a usage error; 3 when the machine stays busy (see `voxflow.bench.errors`).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from voxflow import __version__
from voxflow.bench import options
from voxflow.bench.adapters import Adapter, dropped_extras, make_adapter
from voxflow.bench.arms import Arm, parse_arm
from voxflow.bench.check import run_check
from voxflow.bench.compare import comparison, comparison_table, run_compare
from voxflow.bench.errors import EXIT_FAILED, EXIT_USAGE, BenchError
from voxflow.bench.idle import GateResult, LoadMeter, LoadSource, PsutilLoad, wait_idle
from voxflow.bench.machine import git_state, machine_record
from voxflow.bench.openloop import run_open_loop
from voxflow.bench.openloop_compare import open_comparison, open_comparison_table
from voxflow.bench.openloop_report import open_loop_record, open_loop_tables
from voxflow.bench.report import gates_record, run_table, runs_record
from voxflow.bench.runner import Case, LevelGuard, run_sweep
from voxflow.eval.clips import write_clip
from voxflow.records import write_json


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def make_load_source() -> LoadSource:
    """The load source of the idle gate (tests replace this with a fake)."""
    return PsutilLoad()


def make_gate(args: argparse.Namespace, source: LoadSource) -> Callable[[str], GateResult]:
    """``gate(label)``: wait for an idle machine as the options say, and report it."""
    policy = options.policy_from(args)

    def gate(label: str) -> GateResult:
        say(f"idle gate before {label} ...")
        result = wait_idle(source, policy, label, allow_busy=args.allow_busy)
        last = result.samples[-1]
        state = "idle" if result.idle else "BUSY (measuring anyway: --allow-busy)"
        say(f"idle gate: {state} after {result.waited_s:.0f} s (CPU by others "
            f"{last.cpu_pct:.0f}%" + (f", GPU {last.gpu_pct:.0f}%" if last.gpu_pct is not None
                                     else "") + ")")
        return result

    return gate


def _inputs(args: argparse.Namespace) -> list[Case]:
    try:
        return options.cases_from(args)
    except ValueError as exc:
        raise BenchError(str(exc), EXIT_USAGE) from None


def _warn_dropped(adapter: Adapter) -> list[str]:
    dropped = dropped_extras(adapter)
    if dropped:
        say(f"ignoring --extra {', '.join(dropped)}: the harness sets these fields itself")
    return dropped


_HIDDEN = "**********"  # an API key's place in a record


def redact_argv(argv: list[str]) -> list[str]:
    """`argv` with the value of ``--api-key`` (``--api-key KEY`` or ``--api-key=KEY``) hidden."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--api-key" and i + 1 < len(out):
            out[i + 1] = _HIDDEN
        elif arg.startswith("--api-key="):
            out[i] = f"--api-key={_HIDDEN}"
    return out


def _header(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
               if not callable(v)}
    if options.get("api_key"):
        options["api_key"] = _HIDDEN
    return {
        "tool": f"voxflow bench {kind}", "voxflow_version": __version__,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": redact_argv(sys.argv),
        "options": options,
        "machine": machine_record(),
    }


# ---- bench run ----------------------------------------------------------------------------------
def audio_saver(folder: Path):
    """An `on_level` callback that writes each measured request's audio under `folder`."""
    def save(case: Case, concurrency: int, repeat: int, results) -> None:
        level_dir = folder / case.name / f"c{concurrency}-r{repeat + 1}"
        level_dir.mkdir(parents=True, exist_ok=True)
        for i, result in results:
            t = result.timeline
            if t.ok and result.audio is not None:
                write_clip(level_dir / f"{t.text_index:03d}_{i:04d}.wav", result.audio,
                           t.sample_rate)
    return save


async def _server_info(adapter: Adapter) -> dict[str, Any]:
    from voxflow.bench.runner import http_client

    async with http_client(1) as client:
        if not await adapter.ready(client):
            raise BenchError(f"{adapter.target.url} does not answer its health check "
                             f"({adapter.target.engine})", EXIT_FAILED)
        return await adapter.info(client)


def bench_run(args: argparse.Namespace) -> int:
    """``voxflow bench run``: one server, a concurrency sweep (or ``--check N``)."""
    if args.wyoming:
        if args.engine not in ("openai", "wyoming"):
            raise BenchError(f"--wyoming is --engine wyoming, not --engine {args.engine}",
                             EXIT_USAGE)
        args.engine, args.url = "wyoming", args.wyoming
    _check_wyoming(args, {args.engine})
    try:
        adapter = make_adapter(options.target_from(args, args.engine, args.url))
    except ValueError as exc:
        raise BenchError(str(exc), EXIT_USAGE) from None
    cases, plan = _inputs(args), options.plan_from(args)
    open_plan = options.open_loop_from(args)
    if open_plan is not None and (args.check or args.save_audio_dir):
        raise BenchError("--check and --save-audio-dir work with --concurrency only, not with "
                         "--request-rate or --find-capacity", EXIT_USAGE)
    _check_ws(args, open_plan is not None)
    dropped = _warn_dropped(adapter)
    record = _header(args, "run")
    record["server"] = {"engine": args.engine, "url": adapter.target.url,
                        "seeded": adapter.seeded, "info": asyncio.run(_server_info(adapter)),
                        "git": git_state(args.server_repo)}
    record["dropped_extras"] = dropped
    if args.check:
        return _check(args, adapter, cases, plan, record)
    if open_plan is not None:
        return _open_loop(args, adapter, cases, open_plan, record)
    saver = audio_saver(args.save_audio_dir) if args.save_audio_dir else None
    gate = make_gate(args, make_load_source())
    runs = asyncio.run(run_sweep(adapter, cases, plan, gate, saver, say))
    table = run_table(runs)
    print(table)
    record.update(gates=gates_record(runs), busy=any(r.busy for r in runs),
                  cases=runs_record(runs), table=table)
    if args.out:
        write_json(args.out, record)
        say(f"wrote {args.out}")
    return 0


def _check_wyoming(args: argparse.Namespace, engines: set[str]) -> None:
    """Options a bench of Wyoming servers cannot honour are a usage error."""
    clash = options.wyoming_clash(args, engines)
    if clash:
        raise BenchError(f"cannot bench a Wyoming server with {'; '.join(clash)}", EXIT_USAGE)


def _check_ws(args: argparse.Namespace, open_loop: bool) -> None:
    """``--ws`` is a closed-loop sweep of voxflow's stream route, nothing else."""
    if not args.ws:
        return
    clash = [name for name, on in (("--request-rate/--find-capacity", open_loop),
                                   ("--check", bool(args.check)), ("--sse", args.sse),
                                   (f"--engine {args.engine}", args.engine != "openai"))
             if on]
    if clash:
        raise BenchError(f"--ws measures voxflow's WS /v1/audio/speech/stream with "
                         f"--concurrency only; drop {', '.join(clash)}", EXIT_USAGE)


def _open_loop(args, adapter: Adapter, cases: list[Case], plan, record: dict[str, Any]) -> int:
    """``bench run --request-rate/--find-capacity``: see `voxflow.bench.openloop`."""
    gate = make_gate(args, make_load_source())
    runs = asyncio.run(run_open_loop(adapter, cases, plan, gate, say))
    table = open_loop_tables(runs)
    print(table)
    record.update(gates=[g.to_dict() for r in runs for g in r.gates],
                  busy=any(r.busy for r in runs), open_loop=open_loop_record(runs), table=table)
    if args.out:
        write_json(args.out, record)
        say(f"wrote {args.out}")
    return 0


def _check(args, adapter: Adapter, cases: list[Case], plan, record: dict[str, Any]) -> int:
    if not adapter.seeded:
        say(f"note: {args.engine} takes no seed; its runs are expected to differ")
    plan = replace(plan, seed=plan.seed if plan.seed is not None else 0)
    report = asyncio.run(run_check(adapter, cases, args.check, plan, say=print))
    differing = report.differing()
    for case, texts in differing.items():
        print(f"DIFFERENT: case {case}: runs differ on texts {texts}")
    if not differing:
        print(f"identical: every case gave the same audio in all {args.check} runs")
    record["check"] = report.to_dict()
    if args.out:
        write_json(args.out, record)
    return EXIT_FAILED if differing else 0


# ---- bench compare ------------------------------------------------------------------------------
def _arms(args: argparse.Namespace) -> list[Arm]:
    try:
        arms = [parse_arm(text, args.engine) for text in args.arms]
    except ValueError as exc:
        raise BenchError(str(exc), EXIT_USAGE) from None
    names = [a.name for a in arms]
    if not 2 <= len(arms) <= 3 or len(set(names)) != len(names):
        raise BenchError(f"give two or three --arm with different names, got {names}",
                         EXIT_USAGE)
    folders = dict(args.arm_cwd)
    unknown = set(folders) - set(names)
    if unknown:
        raise BenchError(f"--arm-cwd names no arm: {', '.join(sorted(unknown))}", EXIT_USAGE)
    return [replace(a, cwd=folders.get(a.name)) for a in arms]


def _stop_on_sigterm() -> Callable[[], None]:
    """Turn SIGTERM into KeyboardInterrupt so arm servers are stopped; returns the undo."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)

    def undo() -> None:
        signal.signal(signal.SIGTERM, previous)

    return undo


def bench_compare(args: argparse.Namespace) -> int:
    """``voxflow bench compare``: start arms in rotation, bench each, print verdicts."""
    arms, cases, plan = _arms(args), _inputs(args), options.plan_from(args)
    _check_wyoming(args, {a.engine for a in arms})
    open_plan = options.open_loop_from(args)
    if open_plan is not None and args.quality:
        raise BenchError("--quality works with --concurrency only, not with --request-rate or "
                         "--find-capacity", EXIT_USAGE)
    names = [a.name for a in arms]
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="voxflow-compare-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    say(f"logs and clips under {work_dir}")
    quality_case = cases[-1] if args.quality else None
    record = _header(args, "compare")
    record["arms"] = [{"name": a.name, "engine": a.engine, "command": a.command, "cwd": a.cwd}
                      for a in arms]

    def target(arm: Arm, url: str):
        return options.target_from(args, arm.engine, url)

    # The arm servers are children of this process, so the meter can tell their CPU use from
    # everyone else's while each level runs.
    source = make_load_source()
    guard = (LevelGuard(source, args.idle_cpu_max, args.retakes)
             if isinstance(source, LoadMeter) else None)
    undo = _stop_on_sigterm()
    try:
        starts = asyncio.run(run_compare(
            arms, target, cases, plan, args.runs, work_dir, make_gate(args, source),
            quality_case, args.health_timeout, say, guard, open_plan))
    finally:
        undo()
    if open_plan is None:
        result = comparison(starts, names)
        table = comparison_table(result, names)
    else:
        result = open_comparison({n: [r for s in starts if s.arm == n for r in s.open_runs]
                                  for n in names}, names)
        table = open_comparison_table(result, names)
    print(table)
    record.update(starts=[s.to_dict() for s in starts], comparison=result, table=table,
                  busy=any(r.busy for s in starts for r in s.runs)
                  or any(r.busy for s in starts for r in s.open_runs))
    if quality_case is not None:
        from voxflow.bench.quality import quality_report

        say("quality: transcribing and embedding each arm's clips")
        folders = {n: work_dir / "quality" / n for n in names}
        try:
            record["quality"] = quality_report(folders, quality_case, args.ref)
        except ValueError as exc:
            raise BenchError(f"quality: {exc}", EXIT_FAILED) from None
        print(f"\nquality ({quality_case.name}, {len(quality_case.texts)} texts; speaker "
              f"reference: {record['quality']['reference']})")
        print(record["quality"]["table"])
    if args.out:
        write_json(args.out, record)
        say(f"wrote {args.out}")
    return 0
