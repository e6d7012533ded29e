"""The load runner: closed-loop concurrency levels over fixed texts, warm-up excluded.

A level of concurrency C keeps C requests in flight (C workers, each sending its next request
as soon as its previous one ends) until ``per_level * C`` requests have been sent. Request ``i``
speaks text ``i % len(texts)``, with seed ``seed + text index`` when a seed is given, so the same
text always gets the same seed. Before each level, `SweepPlan.warmup` requests are sent at that
level's concurrency (at most) and not measured.

`run_sweep` runs every case at every level, `repeats` times (repeat outermost, so slow drift
spreads over all levels), passing the idle gate before each case. The gate cannot see a test run
that starts in the middle of a level; with a load meter, a level during which other processes
used more than the gate's CPU limit on average is measured again after the gate (up to
`retakes` times), and the discarded attempts are kept in the record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from voxflow.bench.adapters import Adapter
from voxflow.bench.client import Result, fetch
from voxflow.bench.errors import BenchError
from voxflow.bench.idle import GateResult, LoadMeter
from voxflow.bench.metrics import LevelStats, level_stats
from voxflow.bench.ws_client import fetch_ws

MIN_PER_LEVEL = 5
"""Each level sends at least this many requests per unit of concurrency."""


@dataclass(frozen=True)
class Case:
    """A named list of input texts: one request per text."""

    name: str
    texts: tuple[str, ...]

    @classmethod
    def from_file(cls, path: Path, name: str | None = None) -> Case:
        """One text per non-blank line of `path` (UTF-8).

        Raises:
            ValueError: unreadable file or no text in it.
        """
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {path}: {exc}") from None
        texts = tuple(line.strip() for line in lines if line.strip())
        if not texts:
            raise ValueError(f"{path} has no text (one request per non-blank line)")
        return cls(name or Path(path).stem, texts)


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep runs (validated by the CLI; see `voxflow.bench.options`)."""

    concurrency: tuple[int, ...]
    per_level: int = MIN_PER_LEVEL
    warmup: int = 1
    repeats: int = 1
    seed: int | None = None
    timeout_s: float = 120.0
    ws_words_per_s: float | None = None
    """Set: each request is a `WS /v1/audio/speech/stream` session sending its text word by
    word at this rate (`voxflow.bench.ws_client`); None: `POST /v1/audio/speech`."""

    def requests(self, concurrency: int) -> int:
        return self.per_level * concurrency


@dataclass
class CaseRun:
    """One case, one repeat: the gates passed (before the case, then before each retake), each
    level's statistics, and the attempts discarded because the machine got busy."""

    case: str
    repeat: int
    gates: list[GateResult] = field(default_factory=list)
    levels: list[LevelStats] = field(default_factory=list)
    discarded: list[LevelStats] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """A gate gave up waiting (--allow-busy), so something here ran on a busy machine."""
        return any(not g.idle for g in self.gates)


@dataclass(frozen=True)
class LevelGuard:
    """Retake a level when other processes averaged more than `max_cpu_pct` during it."""

    meter: LoadMeter
    max_cpu_pct: float
    retakes: int


LevelCallback = Callable[[Case, int, int, list[tuple[int, Result]]], None]
"""Called with (case, concurrency, repeat, [(request index, result)]) after each level."""


KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle kept-alive connection is reused. Below the servers' own idle limit (uvicorn
closes after 5 s, httpx's default expiry is also 5 s): at the same 5 s a request could go out on
a connection the server was closing, and come back cut short."""


def http_client(max_connections: int | None, keepalive: int | None = None) -> httpx.AsyncClient:
    """The client every request of a run goes through (keep-alive, no proxies from the env):
    `max_connections` at once (None: no cap, as an open loop must never queue in the client),
    `keepalive` of them kept alive (default: all)."""
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=keepalive or max_connections,
                          keepalive_expiry=KEEPALIVE_EXPIRY_S)
    return httpx.AsyncClient(limits=limits, trust_env=False)


async def run_level(
    client: httpx.AsyncClient,
    adapter: Adapter,
    case: Case,
    concurrency: int,
    requests: int,
    plan: SweepPlan,
    keep_audio: bool = False,
) -> list[tuple[int, Result]]:
    """Send `requests` requests with `concurrency` in flight; returns them in sending order."""
    indices = iter(range(requests))  # shared by the workers: each index is taken once
    done: list[tuple[int, Result]] = []

    async def worker() -> None:
        for i in indices:
            t = i % len(case.texts)
            seed = None if plan.seed is None else plan.seed + t
            if plan.ws_words_per_s is not None:
                result = await fetch_ws(adapter.target, case.texts[t], t, seed, plan.timeout_s,
                                        plan.ws_words_per_s, keep_audio)
            else:
                result = await fetch(client, adapter, case.texts[t], t, seed, plan.timeout_s,
                                     keep_audio)
            done.append((i, result))

    await asyncio.gather(*(worker() for _ in range(min(concurrency, requests))))
    return sorted(done, key=lambda pair: pair[0])


async def run_sweep(
    adapter: Adapter,
    cases: list[Case],
    plan: SweepPlan,
    gate: Callable[[str], GateResult] | None = None,
    on_level: LevelCallback | None = None,
    say: Callable[[str], None] = lambda line: None,
    guard: LevelGuard | None = None,
) -> list[CaseRun]:
    """Every case at every level, `plan.repeats` times; `gate(label)` runs before each case.

    `guard`, when given, measures the other processes' mean CPU use during each level and
    retakes a busy one (only meaningful when the server under test is a child of this process,
    whose CPU the meter does not count).

    Raises:
        BenchError: every request of a level failed (the server is down or refuses them all).
    """
    runs: list[CaseRun] = []
    async with http_client(max(plan.concurrency)) as client:
        for repeat in range(plan.repeats):
            for case in cases:
                run = CaseRun(case.name, repeat)
                label = f"case {case.name} (repeat {repeat + 1}/{plan.repeats})"
                if gate:
                    run.gates.append(await asyncio.to_thread(gate, label))
                for c in plan.concurrency:
                    run.levels.append(await _guarded_level(
                        client, adapter, case, c, repeat, plan, run, gate, on_level, say, guard))
                runs.append(run)
    return runs


async def _guarded_level(client, adapter, case, c, repeat, plan, run: CaseRun, gate, on_level,
                         say, guard: LevelGuard | None) -> LevelStats:
    """One level, measured again while the guard finds it ran on a busy machine."""
    attempt = 0
    while True:
        if plan.warmup:
            await run_level(client, adapter, case, c, plan.warmup, plan)
        mark = guard.meter.mark() if guard else None
        results = await run_level(client, adapter, case, c, plan.requests(c), plan,
                                  keep_audio=on_level is not None)
        others = guard.meter.since(mark) if guard else float("nan")
        stats = level_stats(c, [r.timeline for _, r in results], others)
        say(progress_line(case.name, repeat, stats))
        if stats.ok == 0:
            raise BenchError(f"every request failed at concurrency {c} of case {case.name}: "
                             f"{stats.errors_by_kind}")
        if guard is None or others <= guard.max_cpu_pct or attempt >= guard.retakes:
            break
        attempt += 1
        run.discarded.append(stats)
        say(f"other processes used {others:.0f}% CPU during that level: measuring it again "
            f"({attempt}/{guard.retakes})")
        if gate:
            run.gates.append(await asyncio.to_thread(gate, f"retake of {case.name} c={c}"))
    if on_level is not None:
        on_level(case, c, repeat, results)
    return stats


def progress_line(case: str, repeat: int, s: LevelStats) -> str:
    return (f"{case} c={s.concurrency} repeat {repeat + 1}: {s.ok}/{s.requests} ok, "
            f"TTFA p50 {s.ttfa_p50:.3f} s, {s.audio_s_per_s:.2f} audio-s/s, "
            f"RTF p50 {s.rtf_p50:.3f}, stall rate {s.stall_rate:.2f}"
            + (f", others' CPU {s.others_cpu_pct:.0f}%" if s.others_cpu_pct == s.others_cpu_pct
               else "")
            + (f", errors {s.errors_by_kind}" if s.errors else ""))
