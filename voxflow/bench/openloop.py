"""Open-loop load: requests sent at seeded Poisson arrival times, whatever the server does.

A closed loop (`voxflow.bench.runner`) waits for an answer before sending the next request, so a
slow server is offered less load; real clients do not wait for each other. Here a rate of R
requests per second is a Poisson process **conditioned on its count**: a window of S seconds
holds exactly ``round(R * S)`` arrivals, placed as that many sorted independent uniform times in
the window, which is the law of a Poisson process's arrivals given their number (e.g. Ross,
*Stochastic Processes*, thm. 2.3.1). The arrivals stay as bursty as Poisson ones, but the window
sends the rate it names: free Poisson draws sent 164 requests in a 40 s window at 4.62 requests/s
(4.10 a second, 11% under the rate the capacity search then reported). The warm-up and the
measured window draw from ``numpy.random.default_rng([schedule_seed, 0])`` and ``[..., 1]``, so
two runs (and two arms) send the same schedule, and the measured window's arrivals do not depend
on the warm-up's length.

One rate runs for ``warmup_s + duration_s`` seconds of sending. Requests sent during the first
``warmup_s`` seconds are sent and awaited but not measured (they bring the server to its steady
state); the ``duration_s`` seconds after that are the measured window. Each request is sent at
its time in its own task, with no cap on requests in flight, and every request is awaited (each
has the request timeout) before the rate ends. Request i speaks text ``i % len(texts)`` with seed
``seed + text index`` when a seed is given, as in the closed loop.

`rate_stats` turns the measured requests into `RateStats`, including **goodput**: the share of
measured requests that met the service level (`Slo`); a failed request never meets it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field

import httpx
import numpy as np

from voxflow.bench.adapters import Adapter
from voxflow.bench.client import Result, fetch
from voxflow.bench.errors import BenchError
from voxflow.bench.idle import GateResult
from voxflow.bench.runner import Case, http_client
from voxflow.bench.timeline import Timeline, percentile

LEAD_S = 0.05
"""Seconds between scheduling a rate and its first send time (so the first send is not late)."""


@dataclass(frozen=True)
class Slo:
    """The service level one request must meet to count towards goodput.

    Attributes:
        ttfa_s: most seconds from sending to the first audio sample.
        max_stalls: most playback stalls (see `voxflow.bench.timeline`) of a listener who starts
            at the first audio; 0 means any stall fails the request.
    """

    ttfa_s: float = 1.0
    max_stalls: int = 0

    def met(self, t: Timeline) -> bool:
        """Whether `t` finished with audio, its first audio in time, and few enough stalls."""
        return t.ok and t.ttfa <= self.ttfa_s and t.stalls().count <= self.max_stalls


@dataclass(frozen=True)
class CapacitySearch:
    """How `find_capacity` searches (validated by the CLI).

    Attributes:
        start: the first rate probed, requests/s.
        goodput: the least goodput (0..1] a rate must reach to pass.
        tolerance: stop when the lowest failing rate is within this fraction above the highest
            passing one.
        max_probes: most rates probed in all.
        step: the factor (> 1) by which the rate rises while probes pass (falls while they
            fail) until a passing and a failing rate are known.
    """

    start: float = 1.0
    goodput: float = 0.99
    tolerance: float = 0.05
    max_probes: int = 12
    step: float = 2.0


@dataclass(frozen=True)
class OpenLoopPlan:
    """What one open-loop run sends (validated by the CLI; see `voxflow.bench.options`).

    Attributes:
        rates: fixed rates to run, requests/s, in order (may be empty with a capacity search).
        duration_s: seconds of the measured window of each rate.
        warmup_s: seconds of unmeasured sending before it.
        schedule_seed: seed of the arrival times (not of the speech; that is `seed`).
        seed: request seed base, as `SweepPlan.seed`.
        capacity: search the capacity after the fixed rates (None: no search).
    """

    rates: tuple[float, ...] = ()
    duration_s: float = 30.0
    warmup_s: float = 5.0
    schedule_seed: int = 0
    seed: int | None = None
    timeout_s: float = 120.0
    repeats: int = 1
    slo: Slo = field(default_factory=Slo)
    capacity: CapacitySearch | None = None


def poisson_schedule(rate: float, duration_s: float, seed: int,
                     warmup_s: float = 0.0) -> np.ndarray:
    """Send times of a warm-up and a measured window, each a Poisson process given its count.

    The warm-up ``[0, warmup_s)`` holds ``round(rate * warmup_s)`` arrivals and the measured
    window ``[warmup_s, warmup_s + duration_s)`` exactly ``round(rate * duration_s)``, each set
    drawn as sorted uniform times (the conditional law of Poisson arrivals given their number)
    from ``default_rng([seed, 0])`` and ``default_rng([seed, 1])`` respectively.

    Args:
        rate: requests per second, > 0.
        duration_s: the measured window, seconds, > 0.
        seed: the schedule seed.
        warmup_s: the unmeasured window before it, seconds, >= 0.

    Returns:
        float64 seconds from the start, ascending, all < ``warmup_s + duration_s``.

    Raises:
        ValueError: rate or duration not positive, or a negative warm-up.
    """
    if not rate > 0 or not duration_s > 0 or not warmup_s >= 0:
        raise ValueError(f"rate and duration must be positive and the warm-up not negative, "
                         f"got {rate}, {duration_s} and {warmup_s}")
    windows = ((0, 0.0, warmup_s), (1, warmup_s, duration_s))
    times = [start + np.sort(np.random.default_rng([seed, k]).uniform(0.0, span,
                                                                      round(rate * span)))
             for k, start, span in windows]
    return np.concatenate(times)


@dataclass(frozen=True)
class RateStats:
    """One offered rate, one run. Times in seconds; rates per second of the measured window.

    `sent` counts the requests scheduled in the measured window (all of them were sent and
    awaited). `goodput` is `good / sent`: failed requests count against it. `audio_s_per_s` is
    the decoded audio of the successful measured requests over `duration_s`; `audio_s_mean` is
    that audio per successful request. Percentiles and `stall_rate` (share of successful
    requests that stalled at least once) cover successful requests only. `send_lag_p99` is how
    late the client itself sent requests against the schedule: if it is large, the client, not
    the server, limited the load. `drain_s` is how long after the window's end the last measured
    request finished: a server that keeps up drains in about one request's latency, an
    overloaded one takes ever longer (and its `audio_s_per_s` then counts audio delivered after
    the window).
    """

    rate: float
    duration_s: float
    sent: int
    ok: int
    good: int
    goodput: float
    errors: int
    errors_by_kind: dict[str, int]
    achieved_rate: float
    ttfa_p50: float
    ttfa_p90: float
    ttfa_p99: float
    latency_p50: float
    latency_p99: float
    stall_rate: float
    audio_s: float
    audio_s_mean: float
    audio_s_per_s: float
    send_lag_p99: float
    slo_ttfa_s: float
    slo_max_stalls: int
    drain_s: float = float("nan")

    def to_dict(self) -> dict:
        return asdict(self)


def rate_stats(rate: float, duration_s: float, timelines: list[Timeline], slo: Slo,
               lags: list[float] | None = None, window_end: float | None = None) -> RateStats:
    """Statistics of one rate's measured requests (all finished; see `RateStats`).

    Raises:
        ValueError: a request has not finished.
    """
    if any(t.done is None for t in timelines):
        raise ValueError("every measured request must have finished")
    nan = float("nan")
    good = [t for t in timelines if t.ok]
    met = sum(slo.met(t) for t in timelines)
    ttfa = [t.ttfa for t in good]
    latency = [t.latency for t in good]
    audio = sum(t.audio_s for t in good)
    kinds = Counter(t.error or "no_audio" for t in timelines if not t.ok)
    sent = len(timelines)
    return RateStats(
        rate=rate, duration_s=duration_s, sent=sent, ok=len(good), good=met,
        goodput=met / sent if sent else nan,
        errors=sent - len(good), errors_by_kind=dict(sorted(kinds.items())),
        achieved_rate=sent / duration_s,
        ttfa_p50=percentile(ttfa, 50), ttfa_p90=percentile(ttfa, 90),
        ttfa_p99=percentile(ttfa, 99),
        latency_p50=percentile(latency, 50), latency_p99=percentile(latency, 99),
        stall_rate=sum(t.stalls().count > 0 for t in good) / len(good) if good else nan,
        audio_s=audio, audio_s_mean=audio / len(good) if good else nan,
        audio_s_per_s=audio / duration_s,
        send_lag_p99=percentile(lags or [], 99),
        slo_ttfa_s=slo.ttfa_s, slo_max_stalls=slo.max_stalls,
        drain_s=(max(t.done or 0.0 for t in timelines) - window_end
                 if timelines and window_end is not None else nan),
    )


async def run_rate(client: httpx.AsyncClient, adapter: Adapter, case: Case, rate: float,
                   plan: OpenLoopPlan) -> RateStats:
    """Send one rate's schedule (warm-up, then the measured window) and measure it."""
    times = poisson_schedule(rate, plan.duration_s, plan.schedule_seed, plan.warmup_s)
    origin = time.perf_counter() + LEAD_S
    tasks: list[asyncio.Task[Result]] = []
    for i, offset in enumerate(times):
        delay = origin + float(offset) - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        t = i % len(case.texts)
        seed = None if plan.seed is None else plan.seed + t
        tasks.append(asyncio.create_task(
            fetch(client, adapter, case.texts[t], t, seed, plan.timeout_s)))
    results = await asyncio.gather(*tasks)
    measured = [(float(off), r.timeline) for off, r in zip(times, results, strict=True)
                if off >= plan.warmup_s]
    lags = [max(0.0, tl.sent - (origin + off)) for off, tl in measured]
    end = origin + plan.warmup_s + plan.duration_s
    return rate_stats(rate, plan.duration_s, [tl for _, tl in measured], plan.slo, lags, end)


# ---- capacity search ----------------------------------------------------------------------------
@dataclass
class Capacity:
    """The outcome of `find_capacity`.

    Attributes:
        rate: the highest passing rate probed, requests/s (0 when none passed).
        audio_s_per_s: `rate` times the mean audio seconds of a request at that probe.
        lowest_failing: the lowest failing rate probed (None: every probe passed, so `rate` is
            only a lower bound).
        bracketed: a failing rate within the tolerance above `rate` was found.
        probes: every probe's stats, in the order run.
    """

    rate: float
    audio_s_per_s: float
    lowest_failing: float | None
    bracketed: bool
    probes: list[RateStats]
    target: float = 0.99
    """The goodput a probe had to reach to pass."""

    def passed(self, probe: RateStats) -> bool:
        return probe.goodput >= self.target

    def to_dict(self) -> dict:
        return {"rate": self.rate, "audio_s_per_s": self.audio_s_per_s, "target": self.target,
                "lowest_failing": self.lowest_failing, "bracketed": self.bracketed,
                "probes": [p.to_dict() for p in self.probes]}


async def find_capacity(probe: Callable[[float], Awaitable[RateStats]],
                        search: CapacitySearch) -> Capacity:
    """The highest rate whose goodput reaches `search.goodput`, within `search.tolerance`.

    From `search.start`, multiplies the rate by `search.step` while it passes (divides it while
    it fails) until a passing and a failing rate are known, then bisects between them until the
    failing one is within `tolerance` (relative) of the passing one. Never probes more than
    `max_probes` rates.
    """
    probes: list[RateStats] = []
    passing: float | None = None
    failing: float | None = None

    async def passes(rate: float) -> bool:
        stats = await probe(rate)
        probes.append(stats)
        return stats.goodput >= search.goodput

    rate = search.start
    while len(probes) < search.max_probes:
        if await passes(rate):
            passing = rate
        else:
            failing = rate
        if passing is None:
            rate = rate / search.step
        elif failing is None:
            rate = rate * search.step
        elif failing - passing > search.tolerance * passing:
            rate = (passing + failing) / 2
        else:
            break
    best = next((p for p in probes if p.rate == passing), None)
    audio = passing * best.audio_s_mean if passing is not None and best is not None else math.nan
    bracketed = (passing is not None and failing is not None
                 and failing - passing <= search.tolerance * passing)
    return Capacity(passing or 0.0, audio, failing, bracketed, probes, search.goodput)


# ---- a whole run --------------------------------------------------------------------------------
@dataclass
class OpenLoopRun:
    """One case, one repeat: the gate passed, each fixed rate's stats, and the capacity."""

    case: str
    repeat: int
    gates: list[GateResult] = field(default_factory=list)
    rates: list[RateStats] = field(default_factory=list)
    capacity: Capacity | None = None

    @property
    def busy(self) -> bool:
        return any(not g.idle for g in self.gates)

    def to_dict(self) -> dict:
        return {"case": self.case, "repeat": self.repeat,
                "rates": [r.to_dict() for r in self.rates],
                "capacity": self.capacity.to_dict() if self.capacity else None}


async def run_open_loop(
    adapter: Adapter,
    cases: list[Case],
    plan: OpenLoopPlan,
    gate: Callable[[str], GateResult] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> list[OpenLoopRun]:
    """Every case's fixed rates, then its capacity search, `plan.repeats` times."""
    runs: list[OpenLoopRun] = []
    async with http_client(None, keepalive=64) as client:
        for repeat in range(plan.repeats):
            for case in cases:
                run = OpenLoopRun(case.name, repeat)
                if gate:
                    label = f"case {case.name} (repeat {repeat + 1}/{plan.repeats})"
                    run.gates.append(await asyncio.to_thread(gate, label))

                fixed = _prober(client, adapter, case, repeat, plan, say, "rate")
                for rate in plan.rates:
                    run.rates.append(await fixed(rate))
                if plan.capacity is not None:
                    run.capacity = await find_capacity(
                        _prober(client, adapter, case, repeat, plan, say, "probe"), plan.capacity)
                    say(capacity_line(case.name, repeat, run.capacity))
                runs.append(run)
    return runs


def _prober(client: httpx.AsyncClient, adapter: Adapter, case: Case, repeat: int,
            plan: OpenLoopPlan, say: Callable[[str], None],
            kind: str) -> Callable[[float], Awaitable[RateStats]]:
    """``probe(rate)``: run that rate of `case` and say how it went.

    Raises:
        BenchError: no measured request could even connect (the server is gone). Every request
            failing otherwise (429s, timeouts) is a measurement: goodput 0.
    """
    async def probe(rate: float) -> RateStats:
        stats = await run_rate(client, adapter, case, rate, plan)
        say(rate_line(case.name, repeat, stats, kind))
        if stats.sent and stats.errors_by_kind.get("connect", 0) == stats.sent:
            raise BenchError(f"no request could connect at {rate:g} req/s of case {case.name}: "
                             f"is the server at {adapter.target.url} still up?")
        return stats
    return probe


def rate_line(case: str, repeat: int, s: RateStats, kind: str = "rate") -> str:
    return (f"{case} {kind} {s.rate:g}/s repeat {repeat + 1}: {s.ok}/{s.sent} ok, goodput "
            f"{s.goodput:.3f}, TTFA p50 {s.ttfa_p50:.3f} p99 {s.ttfa_p99:.3f} s, "
            f"{s.audio_s_per_s:.2f} audio-s/s, stall rate {s.stall_rate:.2f}"
            + (f", errors {s.errors_by_kind}" if s.errors else ""))


def capacity_line(case: str, repeat: int, c: Capacity) -> str:
    bound = ("" if c.bracketed else " (not bracketed within the tolerance: "
             + ("no probe failed" if c.lowest_failing is None else "probe cap reached") + ")")
    return (f"{case} repeat {repeat + 1}: capacity {c.rate:.3g} req/s, "
            f"{c.audio_s_per_s:.2f} audio-s/s after {len(c.probes)} probes{bound}")
