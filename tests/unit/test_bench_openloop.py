"""Open-loop load: the seeded Poisson schedule, goodput on synthetic timelines, the capacity
search on a fake probe, one rate sent through a mock transport, and option validation."""

from __future__ import annotations

import asyncio
import io
import json
import math
import wave

import httpx
import numpy as np
import pytest

from voxflow.bench.adapters import Target, make_adapter
from voxflow.bench.openloop import (
    CapacitySearch,
    OpenLoopPlan,
    OpenLoopRun,
    RateStats,
    Slo,
    find_capacity,
    poisson_schedule,
    rate_stats,
    run_rate,
)
from voxflow.bench.openloop_report import open_loop_record, open_loop_tables
from voxflow.bench.runner import Case
from voxflow.bench.timeline import Timeline
from voxflow.cli import build_parser, main

RATE = 1000  # Hz: 1000 samples = 1 s of audio
URL = "http://127.0.0.1:9"  # nothing listens there: a test that got past parsing would fail


def timeline(sent: float, pieces: list[tuple[float, int]], error: str | None = None) -> Timeline:
    t = Timeline(0, sent, RATE)
    for at, samples in pieces:
        t.add(at, samples)
    t.done = pieces[-1][0] if pieces else sent + 1
    t.error = error
    return t


# ---- schedule -----------------------------------------------------------------------------------
def test_schedule_is_seeded_reproducible_and_sends_exactly_the_rate():
    a = poisson_schedule(50.0, 200.0, seed=7, warmup_s=10.0)
    assert np.array_equal(a, poisson_schedule(50.0, 200.0, seed=7, warmup_s=10.0))
    assert not np.array_equal(a[:100], poisson_schedule(50.0, 200.0, seed=8, warmup_s=10.0)[:100])
    assert np.all(np.diff(a) > 0) and a[0] > 0 and a[-1] < 210.0
    # exactly rate x span in each window, not a random count around it
    assert int(np.sum(a < 10.0)) == 500 and int(np.sum(a >= 10.0)) == 10_000
    measured = a[a >= 10.0]
    assert float(np.mean(np.diff(measured))) == pytest.approx(1 / 50, rel=0.01)
    # still Poisson-like: gaps nearly exponential (standard deviation equal to the mean) and
    # a 1 s bin's count with variance equal to its mean (50), not a regular train
    assert float(np.std(np.diff(measured))) == pytest.approx(1 / 50, rel=0.05)
    counts = np.histogram(measured, bins=200, range=(10.0, 210.0))[0]
    assert 30.0 < float(np.var(counts)) < 75.0  # sample variance: 50 +- 5 (1 sd)


def test_the_measured_window_does_not_depend_on_the_warmup():
    short, long = poisson_schedule(3.0, 40.0, 0, 5.0), poisson_schedule(3.0, 40.0, 0, 9.0)
    assert np.allclose(short[short >= 5.0] - 5.0, long[long >= 9.0] - 9.0)
    assert len(short[short >= 5.0]) == 120 and len(short[short < 5.0]) == 15


def test_a_rate_too_low_for_its_window_sends_nothing_there():
    assert len(poisson_schedule(0.01, 40.0, 0)) == 0  # round(0.4) = 0
    assert len(poisson_schedule(0.02, 40.0, 0)) == 1


@pytest.mark.parametrize(("rate", "span", "warmup"),
                         [(0.0, 1.0, 0.0), (-1.0, 1.0, 0.0), (1.0, 0.0, 0.0), (1.0, 1.0, -1.0)])
def test_schedule_rejects_non_positive_rate_or_span(rate, span, warmup):
    with pytest.raises(ValueError, match="positive"):
        poisson_schedule(rate, span, 0, warmup)


# ---- goodput ------------------------------------------------------------------------------------
def test_goodput_counts_late_first_audio_stalls_and_errors_as_failures():
    slo = Slo(ttfa_s=1.0, max_stalls=0)
    good = timeline(0.0, [(0.5, 1000), (1.2, 1000)])  # 2nd piece before 1.5: no stall
    late = timeline(0.0, [(1.5, 1000)])  # first audio after 1 s
    stalled = timeline(0.0, [(0.5, 500), (1.5, 500)])  # playback ends at 1.0: 0.5 s stall
    failed = timeline(0.0, [], error="http_429")
    exact = timeline(0.0, [(1.0, 1000)])  # exactly at the service level: meets it
    assert [slo.met(t) for t in (good, late, stalled, failed, exact)] == [
        True, False, False, False, True]
    s = rate_stats(5.0, 2.0, [good, late, stalled, failed, exact], slo)
    assert (s.sent, s.ok, s.good, s.errors) == (5, 4, 2, 1)
    assert s.goodput == pytest.approx(2 / 5)
    assert s.errors_by_kind == {"http_429": 1}
    assert s.achieved_rate == pytest.approx(2.5)
    assert s.stall_rate == pytest.approx(1 / 4)
    assert s.audio_s == pytest.approx(5.0) and s.audio_s_per_s == pytest.approx(2.5)
    assert s.audio_s_mean == pytest.approx(1.25)
    assert s.ttfa_p50 == pytest.approx(0.75)
    assert math.isnan(s.drain_s)
    assert rate_stats(5.0, 2.0, [good, late], slo, window_end=1.0).drain_s == pytest.approx(0.5)
    # one stall allowed: the stalled request meets the service level
    assert rate_stats(5.0, 2.0, [stalled], Slo(1.0, max_stalls=1)).goodput == 1.0
    # a looser first-audio limit lets the late one in
    assert rate_stats(5.0, 2.0, [late], Slo(ttfa_s=2.0)).goodput == 1.0


def test_no_measured_request_gives_nan_goodput_not_a_pass():
    s = rate_stats(0.01, 1.0, [], Slo())
    assert s.sent == 0 and math.isnan(s.goodput) and not s.goodput >= 0.99


# ---- capacity search ----------------------------------------------------------------------------
def fake_probe(threshold: float, calls: list[float]):
    """Goodput 1 up to `threshold` req/s, 0.5 above it."""
    async def probe(rate: float) -> RateStats:
        calls.append(rate)
        ok = rate <= threshold
        t = [timeline(0.0, [(0.1 if ok else 2.0, 2000)])]
        return rate_stats(rate, 1.0, t, Slo())
    return probe


@pytest.mark.parametrize(("threshold", "start"), [(7.3, 1.0), (7.3, 50.0), (0.9, 1.0),
                                                  (64.0, 2.0)])
def test_find_capacity_brackets_a_known_threshold_within_tolerance(threshold, start):
    calls: list[float] = []
    search = CapacitySearch(start=start, goodput=0.99, tolerance=0.05, max_probes=20)
    cap = asyncio.run(find_capacity(fake_probe(threshold, calls), search))
    assert cap.bracketed and cap.rate <= threshold < cap.lowest_failing
    assert cap.lowest_failing <= cap.rate * 1.05
    assert cap.audio_s_per_s == pytest.approx(cap.rate * 2.0)  # 2 s of audio per request
    assert [p.rate for p in cap.probes] == calls and len(calls) <= 20
    assert len(set(calls)) == len(calls)  # no rate probed twice


def test_find_capacity_respects_the_probe_cap():
    calls: list[float] = []
    search = CapacitySearch(start=1.0, tolerance=0.01, max_probes=4)
    cap = asyncio.run(find_capacity(fake_probe(1000.0, calls), search))
    assert calls == [1.0, 2.0, 4.0, 8.0]
    assert cap.rate == 8.0 and cap.lowest_failing is None and not cap.bracketed


def test_find_capacity_steps_by_its_factor_until_it_brackets():
    calls: list[float] = []
    search = CapacitySearch(start=4.0, tolerance=0.1, max_probes=5, step=1.25)
    cap = asyncio.run(find_capacity(fake_probe(5.2, calls), search))
    # 4 and 5 pass, 6.25 fails; then bisection: 5.625 and 5.3125 fail, within 10% of 5
    assert calls == [4.0, 5.0, 6.25, 5.625, 5.3125]
    assert cap.rate == 5.0 and cap.lowest_failing == 5.3125 and cap.bracketed
    calls.clear()
    cap = asyncio.run(find_capacity(fake_probe(2.0, calls), search))
    assert calls[:3] == [4.0, 3.2, 2.56] and cap.rate <= 2.0 < cap.lowest_failing


def test_find_capacity_with_no_passing_rate_reports_zero():
    calls: list[float] = []
    cap = asyncio.run(find_capacity(fake_probe(-1.0, calls), CapacitySearch(max_probes=3)))
    assert calls == [1.0, 0.5, 0.25]
    assert cap.rate == 0.0 and math.isnan(cap.audio_s_per_s) and not cap.bracketed
    assert [cap.passed(p) for p in cap.probes] == [False] * 3


# ---- one rate through a mock server -------------------------------------------------------------
class Body(httpx.AsyncByteStream):
    """A response body the client reads as a stream, as from a real server."""

    def __init__(self, data: bytes):
        self.data = data

    async def __aiter__(self):
        yield self.data


def pcm_server(delay_s: float = 0.0):
    """A mock OpenAI speech server: 0.1 s of 16-bit PCM at 1000 Hz per request."""
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(delay_s)
        return httpx.Response(200, stream=Body(b"\x01\x00" * 100),
                              headers={"x-sample-rate": str(RATE)})
    return handler


def test_one_rate_sends_its_schedule_and_measures_only_after_warmup():
    plan = OpenLoopPlan(rates=(20.0,), duration_s=1.0, warmup_s=0.5, seed=3)
    times = poisson_schedule(20.0, 1.0, 0, 0.5)
    bodies: list[dict] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return await pcm_server()(request)

    async def go() -> RateStats:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            adapter = make_adapter(Target("openai", URL))
            return await run_rate(client, adapter, Case("c", ("a", "b", "c")), 20.0, plan)

    s = asyncio.run(go())
    assert len(bodies) == len(times)
    assert s.sent == int(np.sum(times >= 0.5)) == 20 and s.ok == s.sent and s.goodput == 1.0
    assert [b["input"] for b in bodies[:4]] == ["a", "b", "c", "a"]
    assert [b["seed"] for b in bodies[:4]] == [3, 4, 5, 3]
    assert s.audio_s == pytest.approx(0.1 * s.sent)
    assert s.send_lag_p99 < 0.5
    assert -1.0 < s.drain_s < 0.5  # the last request ends around the window's end


def test_a_server_that_refuses_every_connection_stops_the_run():
    from voxflow.bench.errors import BenchError
    from voxflow.bench.openloop import run_open_loop

    plan = OpenLoopPlan(rates=(20.0,), duration_s=0.3, warmup_s=0.0, timeout_s=2.0)
    adapter = make_adapter(Target("openai", URL))
    with pytest.raises(BenchError, match="no request could connect"):
        asyncio.run(run_open_loop(adapter, [Case("c", ("a",))], plan))


def wav_bytes(samples: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(b"\x00\x01" * samples)
    return buf.getvalue()


def test_a_whole_wav_server_has_its_whole_latency_as_first_audio():
    """piper-tts's server answers one WAV once synthesized: first audio = whole latency."""
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.2)
        return httpx.Response(200, stream=Body(wav_bytes(500)),
                              headers={"content-type": "audio/wav"})

    plan = OpenLoopPlan(duration_s=0.5, warmup_s=0.0, slo=Slo(ttfa_s=0.1))

    async def go() -> RateStats:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            adapter = make_adapter(Target("piper-http", URL))
            return await run_rate(client, adapter, Case("c", ("hello",)), 10.0, plan)

    s = asyncio.run(go())
    assert s.ok == s.sent > 0
    assert s.ttfa_p50 >= 0.2 and s.ttfa_p50 == pytest.approx(s.latency_p50, abs=0.01)
    assert s.goodput == 0.0  # 0.2 s > the 0.1 s service level


def test_tables_and_record_of_rates_and_a_capacity():
    slo = Slo()
    fast = [timeline(0.0, [(0.1, 1000)])]
    run = OpenLoopRun("line", 0, rates=[rate_stats(2.0, 1.0, fast, slo)])
    run.capacity = asyncio.run(find_capacity(fake_probe(3.0, []), CapacitySearch(max_probes=3)))
    text = open_loop_tables([run])
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["case", "rate", "ok/sent", "goodput"]
    assert lines[1].split()[:4] == ["line", "2", "1/1", "1.000"]
    capacity_row = next(line for line in lines if line.startswith("line") and "1/1" not in line)
    assert "capacity req/s" in text and capacity_row.split()[:3] == ["line", "2.000", "4.00"]
    record = json.loads(json.dumps(open_loop_record([run])))
    assert record["capacity"]["line"]["rate"]["median"] == 2.0
    assert [p["rate"] for p in record["runs"][0]["capacity"]["probes"]] == [1.0, 2.0, 4.0]
    assert record["rates"]["line"][0]["summary"]["goodput"]["median"] == 1.0


def test_compare_gives_capacity_verdicts_against_the_base_arm():
    from voxflow.bench.openloop_compare import open_comparison, open_comparison_table

    def runs(threshold: float) -> list[OpenLoopRun]:
        out = []
        for repeat in range(3):
            run = OpenLoopRun("line", repeat, rates=[rate_stats(
                4.0, 1.0, [timeline(0.0, [(0.1 if threshold >= 4 else 2.0, 1000)])], Slo())])
            run.capacity = asyncio.run(find_capacity(fake_probe(threshold + repeat * 0.1, []),
                                                     CapacitySearch(start=1.0)))
            out.append(run)
        return out

    result = open_comparison({"a": runs(2.0), "b": runs(8.0), "c": runs(2.0)}, ["a", "b", "c"])
    cap = result["line"]["capacity"]
    assert cap["arms"]["a"]["rate"]["n"] == 3
    assert cap["vs_base"]["b"]["rate"]["verdict"] == "better"
    assert cap["vs_base"]["c"]["rate"]["verdict"] == "within noise"
    assert result["line"]["rates"][0]["vs_base"]["b"]["goodput"]["verdict"] == "better"
    assert result["line"]["rates"][0]["vs_base"]["b"]["ttfa_p99"]["verdict"] == "better"
    table = open_comparison_table(result, ["a", "b", "c"])
    assert table.splitlines()[0].split()[:5] == ["case", "rate", "metric", "a", "(base)"]
    assert "verdict b" in table and "search" in table


# ---- options ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["--request-rate", "0"], "every request rate must be more than 0"),
    (["--request-rate", "2,-1"], "more than 0"),
    (["--request-rate", "1,x"], "comma-separated list of numbers"),
    (["--request-rate", ""], "comma-separated list of numbers"),
    (["--request-rate", "2,2"], "repeat"),
    (["--request-rate", "inf"], "more than 0"),
    (["--duration", "0"], "--duration: must be more than 0"),
    (["--warmup-s", "-1"], "--warmup-s: must be 0 or more"),
    (["--slo-ttfa", "0"], "--slo-ttfa: must be more than 0"),
    (["--slo-max-stalls", "-1"], "--slo-max-stalls: must be 0 or more"),
    (["--capacity-goodput", "1.5"], "at most 1"),
    (["--capacity-tolerance", "1"], "less than 1"),
    (["--capacity-max-probes", "1"], "at least 2"),
    (["--capacity-step", "1"], "--capacity-step: must be more than 1"),
    (["--capacity-step", "0.5"], "more than 1"),
    (["--request-rate", "2", "--check", "2"], "--check and --save-audio-dir work with"),
])
def test_open_loop_options_are_checked_before_anything_runs(capsys, argv, message):
    assert main(["bench", "run", "--url", URL, *argv]) == 2
    assert message in capsys.readouterr().err


def test_open_loop_plan_from_options():
    from voxflow.bench.options import open_loop_from

    parse = build_parser().parse_args
    assert open_loop_from(parse(["bench", "run"])) is None
    plan = open_loop_from(parse(["bench", "run", "--request-rate", "2,4.5", "--seed", "1"]))
    assert plan is not None and plan.rates == (2.0, 4.5) and plan.capacity is None
    assert (plan.duration_s, plan.warmup_s, plan.slo, plan.seed) == (30.0, 5.0, Slo(1.0, 0), 1)
    plan = open_loop_from(parse(["bench", "run", "--request-rate", "2,4", "--find-capacity"]))
    assert plan is not None and plan.capacity == CapacitySearch(start=4.0)
    plan = open_loop_from(parse(["bench", "run", "--find-capacity", "--capacity-step", "1.2"]))
    assert plan is not None and plan.capacity is not None and plan.capacity.step == 1.2
    plan = open_loop_from(parse(["bench", "run", "--find-capacity", "--slo-ttfa", "0.5"]))
    assert plan is not None and plan.rates == () and plan.capacity is not None
    assert plan.capacity.start == 1.0 and plan.slo.ttfa_s == 0.5
