"""The bench's metric arithmetic on synthetic timelines: no server, exact numbers."""

from __future__ import annotations

import math

import pytest

from voxflow.bench.compare import ratio, verdict
from voxflow.bench.metrics import Spread, level_stats, merge_errors, spread, summarize
from voxflow.bench.openloop import Slo, rate_stats
from voxflow.bench.openloop_report import RATE_NUMBERS
from voxflow.bench.timeline import Timeline, percentile

RATE = 1000  # Hz: 1000 samples = 1 s of audio, so durations read directly


def timeline(sent: float, pieces: list[tuple[float, int]], done: float | None = None,
             error: str | None = None, text_index: int = 0) -> Timeline:
    """A finished request sent at `sent` that received `pieces` (time, samples)."""
    t = Timeline(text_index, sent, RATE)
    for at, samples in pieces:
        t.add(at, samples)
    t.done = done if done is not None else (pieces[-1][0] if pieces else sent)
    t.error = error
    return t


def test_ttfa_latency_audio_seconds_and_rtf():
    t = timeline(10.0, [(10.25, 500), (10.5, 1500)], done=10.75)
    assert t.ttfa == pytest.approx(0.25)
    assert t.latency == pytest.approx(0.75)
    assert t.audio_s == pytest.approx(2.0)
    assert t.rtf == pytest.approx(0.375)
    assert t.gaps() == pytest.approx([0.25])


def test_empty_reads_are_not_audio():
    # A header-only read (0 samples) at 10.1 must not count as the first audio.
    t = timeline(10.0, [(10.1, 0), (10.4, 100)])
    assert t.ttfa == pytest.approx(0.4)
    assert len(t.arrivals) == 1


def test_no_stall_when_each_chunk_arrives_while_the_previous_plays():
    # Playback from 1.0: chunk 1 plays 1.0-2.0, chunk 2 arrives at 1.5 (early) and plays to 2.5.
    t = timeline(0.0, [(1.0, 1000), (1.5, 500), (2.4, 1000)])
    assert t.stalls().count == 0
    assert t.stalls().seconds == 0.0


def test_one_stall_counts_the_wait():
    # Chunk 1 plays 1.0-1.5; chunk 2 arrives at 2.0: the listener waits 0.5 s.
    # Playback restarts at 2.0 and chunk 2 ends at 3.0; chunk 3 at 2.9 is on time.
    t = timeline(0.0, [(1.0, 500), (2.0, 1000), (2.9, 100)])
    stalls = t.stalls()
    assert stalls.count == 1
    assert stalls.seconds == pytest.approx(0.5)


def test_a_chunk_exactly_on_time_is_not_a_stall():
    # Chunk 1 plays 1.0-1.5 and chunk 2 arrives at exactly 1.5 (binary-exact values).
    t = timeline(0.0, [(1.0, 500), (1.5, 500), (2.0, 250)])
    assert t.stalls().count == 0


def test_two_stalls_add_up():
    t = timeline(0.0, [(1.0, 250), (2.0, 250), (3.0, 250)])
    stalls = t.stalls()
    assert stalls.count == 2
    assert stalls.seconds == pytest.approx(0.75 + 0.75)


def test_percentiles_interpolate_linearly():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(4.8)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_level_stats_rates_over_the_wall_time_of_the_measured_requests():
    # Two requests in flight from 0 to 2 s: 3 s of audio in 2 s of wall time.
    a = timeline(0.0, [(0.5, 1000), (1.0, 1000)], done=1.0)
    b = timeline(0.5, [(1.25, 250), (1.75, 750)], done=2.0)
    s = level_stats(2, [a, b])
    assert s.wall_s == pytest.approx(2.0)
    assert s.audio_s == pytest.approx(3.0)
    assert s.audio_s_per_s == pytest.approx(1.5)
    assert s.requests_per_s == pytest.approx(1.0)
    assert s.ttfa_p50 == pytest.approx((0.5 + 0.75) / 2)
    assert s.latency_p50 == pytest.approx((1.0 + 1.5) / 2)
    assert s.rtf_p50 == pytest.approx((0.5 + 1.5) / 2)  # 1 s / 2 s audio; 1.5 s / 1 s audio
    # b plays 1.25-1.5 and its second piece arrives at 1.75: one stall of 0.25 s.
    assert s.stall_rate == pytest.approx(0.5)
    assert s.stalls == 1 and s.stall_s_mean == pytest.approx(0.125)


def test_level_stats_counts_errors_by_kind_and_leaves_them_out_of_percentiles():
    good = timeline(0.0, [(0.2, 1000)], done=0.3)
    refused = timeline(0.0, [], done=0.01, error="http_429")
    refused2 = timeline(0.1, [], done=0.11, error="http_429")
    timed_out = timeline(0.0, [], done=5.0, error="timeout")
    empty = timeline(0.0, [], done=0.5)  # finished with no audio at all
    s = level_stats(4, [good, refused, refused2, timed_out, empty])
    assert (s.requests, s.ok, s.errors) == (5, 1, 4)
    assert s.errors_by_kind == {"http_429": 2, "no_audio": 1, "timeout": 1}
    assert s.ttfa_p50 == pytest.approx(0.2) and s.ttfa_p99 == pytest.approx(0.2)
    assert s.wall_s == pytest.approx(5.0)


def test_level_stats_refuses_unfinished_requests():
    running = Timeline(0, 0.0, RATE)
    with pytest.raises(ValueError, match="finished"):
        level_stats(1, [running])


def test_summarize_and_merge_errors_pool_repeats_of_a_level_or_a_rate():
    good = timeline(0.0, [(0.25, 1000)], done=1.0)
    slow = timeline(0.0, [(0.75, 1000)], done=1.0)
    refused = timeline(0.0, [], done=0.1, error="http_429")
    timed_out = timeline(0.0, [], done=5.0, error="timeout")
    levels = [level_stats(1, [good, refused]), level_stats(1, [slow, refused, timed_out])]
    assert summarize(levels)["ttfa_p50"] == Spread(0.5, 0.25, 0.75, 2)
    assert merge_errors(levels) == {"http_429": 2, "timeout": 1}
    rates = [rate_stats(1.0, 1.0, [good, refused], Slo()),
             rate_stats(1.0, 1.0, [slow, timed_out], Slo())]
    summary = summarize(rates, RATE_NUMBERS)
    assert set(summary) == set(RATE_NUMBERS)
    assert summary["goodput"] == Spread(0.5, 0.5, 0.5, 2)
    assert merge_errors(rates) == {"http_429": 1, "timeout": 1}


def test_spread_is_median_and_range_ignoring_nan():
    s = spread([3.0, 1.0, float("nan"), 2.0])
    assert (s.median, s.lo, s.hi, s.n) == (2.0, 1.0, 3.0, 3)
    assert spread([float("nan")]).n == 0


@pytest.mark.parametrize(("base", "other", "lower_is_better", "expected"), [
    ((1.0, 0.9, 1.1), (0.5, 0.4, 0.6), True, "better"),
    ((1.0, 0.9, 1.1), (0.5, 0.4, 0.6), False, "worse"),
    ((1.0, 0.9, 1.1), (1.05, 1.0, 1.2), True, "within noise"),
    ((1.0, 0.9, 1.1), (1.2, 1.1, 1.3), True, "within noise"),  # touching ranges overlap
    ((1.0, 1.0, 1.0), (2.0, 2.0, 2.0), False, "better"),
])
def test_verdict_by_range_overlap_and_direction(base, other, lower_is_better, expected):
    assert verdict(Spread(*base, 3), Spread(*other, 3), lower_is_better) == expected


def test_ratio_of_medians():
    assert ratio(Spread(2.0, 2.0, 2.0, 1), Spread(1.0, 1.0, 1.0, 1)) == 0.5
    assert math.isnan(ratio(Spread(0.0, 0.0, 0.0, 1), Spread(0.0, 0.0, 0.0, 1)))
    assert math.isinf(ratio(Spread(0.0, 0.0, 0.0, 1), Spread(1.0, 1.0, 1.0, 1)))
