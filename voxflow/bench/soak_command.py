"""``voxflow bench soak``: its options and what it does with them (see `voxflow.bench.soak`).

The server is either running (``--url``, loopback only) or started by the bench (``--serve
COMMAND`` with ``{port}``, stopped at the end as `bench compare` stops its arms). Progress and a
line per checkpoint go to stderr, the table and a PASS/FAIL line per verdict
(`voxflow.bench.soak_checks`) to stdout, the record to ``--out``. Exit status: 0; 1 when a
verdict fails, the server does not answer, has no RSS to read, or every request failed; 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from voxflow import __version__
from voxflow.audio.formats import FORMATS
from voxflow.bench import options
from voxflow.bench.adapters import OpenAIAdapter, Target
from voxflow.bench.arms import Arm, ArmServer, free_port, parse_arm
from voxflow.bench.command import _stop_on_sigterm
from voxflow.bench.errors import EXIT_FAILED, EXIT_USAGE, BenchError
from voxflow.bench.machine import git_state, machine_record
from voxflow.bench.memory import pick_source
from voxflow.bench.runner import Case, http_client
from voxflow.bench.soak import (
    MAX_CLIENTS,
    MAX_REQUESTS,
    SoakMix,
    SoakPlan,
    run_soak,
    server_voices,
    soak_schedule,
    soak_table,
)
from voxflow.bench.soak_checks import resend_seeded, soak_verdicts
from voxflow.bench.target import NO_STORE
from voxflow.records import write_json

DEFAULT_FORMATS = "mp3,opus,aac,wav"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_SECONDS = 24 * 3600.0


def loopback_url(text: str) -> str:
    """An ``http://`` URL on this machine's loopback interface, without a trailing slash."""
    parts = urlsplit(text)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        raise argparse.ArgumentTypeError(
            f"the soak only targets loopback: http://127.0.0.1:PORT, got {text!r}")
    return text.rstrip("/")


def format_list(text: str) -> tuple[str, ...]:
    """``"mp3,wav"`` -> ("mp3", "wav"), each one of `voxflow.audio.formats.FORMATS`."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown format {', '.join(unknown) or repr(text)}; formats: {', '.join(FORMATS)}")
    return names


def _at_most(parse, limit):
    return options.checked(parse, lambda v: v <= limit, f"at most {limit:g}")


_settle_seconds = options.checked(options.number, lambda v: 0 <= v <= 600, "0 to 600 seconds")
_fraction = options.checked(options.number, lambda v: 0 <= v <= 1, "0 to 1")


def add_soak(kinds) -> argparse.ArgumentParser:
    """Add the ``soak`` parser under ``voxflow bench``; returns it."""
    p = kinds.add_parser(
        "soak", help="mixed traffic for a while, and the server's resident memory over time",
        description="Send N requests of mixed models, voices, formats and lengths with C "
        "clients, and record the server's RSS at the start, every K requests and every few "
        "seconds. See docs/benchmarks.md.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", type=loopback_url, default="http://127.0.0.1:8000",
                       help="a running server on loopback (http://127.0.0.1:8000)")
    where.add_argument("--serve", metavar="COMMAND",
                       help="start this server command (with {port}) and stop it at the end")
    p.add_argument("--requests", type=_at_most(options.positive_int, MAX_REQUESTS), default=360,
                   metavar="N", help=f"requests to send (360, at most {MAX_REQUESTS})")
    p.add_argument("--clients", type=_at_most(options.positive_int, MAX_CLIENTS), default=4,
                   metavar="C", help="requests in flight (4)")
    p.add_argument("--every", type=options.positive_int, default=120, metavar="K",
                   help="print and record RSS after every K completed requests (120)")
    p.add_argument("--interval", type=options.positive_float, default=2.0, metavar="S",
                   help="also sample RSS every S seconds (2)")
    p.add_argument("--max-seconds", type=_at_most(options.positive_float, MAX_SECONDS),
                   default=3600.0, metavar="S", help="stop sending after S seconds (3600)")
    p.add_argument("--settle", type=_settle_seconds, default=3.0, metavar="S",
                   help="read RSS once more S seconds after the last request, at rest (3; 0: no)")
    p.add_argument("--models", metavar="A,B", help="models to mix (default: every model the "
                   "server lists at /v1/audio/voices)")
    p.add_argument("--formats", type=format_list, default=format_list(DEFAULT_FORMATS),
                   metavar="A,B", help=f"response formats to mix ({DEFAULT_FORMATS})")
    p.add_argument("--sentences", type=Path, default=options.DEFAULT_SENTENCES, metavar="FILE",
                   help="a request speaks one or two consecutive lines "
                   "(benchmarks/data/sentences.txt)")
    p.add_argument("--seed", type=options.non_negative_int, default=0,
                   help="seed of the schedule, including the seeded requests' seeds (0)")
    p.add_argument("--leave-fraction", type=_fraction, default=0.05, metavar="F",
                   help="share of requests whose client leaves after the first chunk (0.05)")
    p.add_argument("--bad-fraction", type=_fraction, default=0.01, metavar="F",
                   help="share of bad requests, each expecting its 4xx (0.01)")
    p.add_argument("--seeded-fraction", type=_fraction, default=0.02, metavar="F",
                   help="share of seeded requests, sent again alone after the soak and "
                   "compared byte for byte (0.02)")
    p.add_argument("--max-input-chars", type=options.positive_int, default=4096, metavar="N",
                   help="the server's server.max_input_chars, which a too-long bad input "
                   "exceeds (4096)")
    p.add_argument("--pid", type=options.positive_int,
                   help="read RSS of this process (and its children) instead of /metrics")
    p.add_argument("--timeout", type=options.positive_float, default=120.0,
                   help="seconds a request may take (120)")
    p.add_argument("--health-timeout", type=options.positive_float, default=300.0, metavar="S",
                   help="seconds a --serve server may take to become ready (300)")
    p.add_argument("--out", type=Path, metavar="FILE.json", help="write the full record here")
    return p


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _soak(args: argparse.Namespace, url: str, pid: int | None) -> dict[str, Any]:
    texts = _sentences(args.sentences)
    plan = SoakPlan(args.requests, args.clients, args.every, args.interval, args.max_seconds,
                    args.timeout, args.settle, args.max_input_chars)
    try:
        mix = SoakMix(args.leave_fraction, args.bad_fraction, args.seeded_fraction)
    except ValueError as exc:
        raise BenchError(str(exc), EXIT_USAGE) from None
    async with http_client(args.clients + 1) as client:
        models = [m.strip() for m in args.models.split(",")] if args.models else None
        try:
            voices = await server_voices(client, url, models)
        except ValueError as exc:
            raise BenchError(str(exc), EXIT_FAILED) from None
        source = await pick_source(client, url, pid)
        if source is None:
            raise BenchError(f"{url}/metrics has no process_resident_memory_bytes; give --pid",
                             EXIT_FAILED)
        schedule = soak_schedule(plan.requests, voices, args.formats, texts, args.seed, mix)
        leaving, bad, seeded = mix.counts(plan.requests)
        say(f"soak: {plan.requests} requests ({leaving} leaving mid-stream, {bad} bad, "
            f"{seeded} seeded), {plan.clients} clients, voices "
            f"{', '.join(f'{m}/{v}' for m, v in voices)}, formats {', '.join(args.formats)}; "
            f"RSS from {source.describe()}")
        record = await run_soak(client, url, schedule, plan, source, say)
        if record.bodies:
            say(f"sending the {len(record.bodies)} seeded requests again, one at a time")
            await resend_seeded(client, url, schedule, record, plan.timeout_s)
    if record.results and all(r["error"] for r in record.results):
        raise BenchError(f"every request failed: {record.errors()}", EXIT_FAILED)
    verdicts = soak_verdicts(record, len(schedule))
    return {"plan": plan.__dict__, "mix": mix.__dict__, "voices": voices,
            "soak": record.to_dict(), "table": soak_table(record),
            "verdicts": [{"name": v.name, "passed": v.passed, "detail": v.detail}
                         for v in verdicts],
            "verdict_lines": [v.line() for v in verdicts]}


def _sentences(path: Path) -> tuple[str, ...]:
    try:
        return Case.from_file(path).texts
    except ValueError as exc:
        raise BenchError(str(exc), EXIT_USAGE) from None


def _started(stack: ExitStack, command: str, health_timeout_s: float) -> tuple[str, int]:
    """Start `command` on a free loopback port; returns its URL and pid once it is healthy.

    Raises:
        BenchError: a command without {port} (usage), or a server that exits or never answers.
    """
    try:
        arm: Arm = parse_arm(f"soak={command}")
    except ValueError as exc:
        raise BenchError(str(exc), EXIT_USAGE) from None
    log = Path(tempfile.mkdtemp(prefix="voxflow-soak-")) / "server.log"
    server = stack.enter_context(ArmServer(arm, free_port(), log))
    say(f"starting the server ({server.command}); log {log}")
    # no-store: its seeded identity compares two syntheses, never a cached copy
    adapter = OpenAIAdapter(Target("openai", server.url, headers=dict(NO_STORE)))

    async def ready() -> float:
        async with http_client(1) as client:
            return await server.wait_ready(adapter, client, health_timeout_s)

    waited = asyncio.run(ready())
    say(f"server ready after {waited:.1f} s at {server.url}")
    assert server.process is not None  # started above
    return server.url, server.process.pid


def bench_soak(args: argparse.Namespace) -> int:
    """``voxflow bench soak``: see the module docstring."""
    record: dict[str, Any] = {
        "tool": "voxflow bench soak", "voxflow_version": __version__,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv,
        "machine": machine_record(), "git": git_state(None),
    }
    with ExitStack() as stack:
        url, pid = args.url, args.pid
        if args.serve:  # SIGTERM then stops the server too (KeyboardInterrupt unwinds the stack)
            stack.callback(_stop_on_sigterm())
            url, server_pid = _started(stack, args.serve, args.health_timeout)
            record["server_command"] = args.serve
            record["server_pid"] = server_pid
        record["url"] = url
        record.update(asyncio.run(_soak(args, url, pid)))
    print(record["table"])
    print("\n".join(record["verdict_lines"]))
    if args.out:
        write_json(args.out, record)
        say(f"wrote {args.out}")
    return EXIT_FAILED if any(v["passed"] is False for v in record["verdicts"]) else 0


