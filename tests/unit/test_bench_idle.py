"""The idle gate with a fake load source and a fake clock: passes, waits, times out."""

from __future__ import annotations

import pytest

from voxflow.bench.errors import EXIT_BUSY, BusyError
from voxflow.bench.idle import IdlePolicy, LoadSample, PsutilLoad, wait_idle


class FakeLoad:
    """Replays CPU (and GPU) percentages; each sample advances the fake clock by one second."""

    def __init__(self, cpu: list[float], gpu: list[float | None] | None = None):
        self.cpu, self.gpu = list(cpu), list(gpu or [None] * len(cpu))
        self.now = 0.0
        self.taken = 0

    def sample(self) -> LoadSample:
        i = min(self.taken, len(self.cpu) - 1)  # the last value repeats forever
        self.taken += 1
        self.now += 1.0
        return LoadSample(self.cpu[i], self.gpu[min(i, len(self.gpu) - 1)])

    def clock(self) -> float:
        return self.now


POLICY = IdlePolicy(cpu_max_pct=10, gpu_max_pct=3, consecutive=4, timeout_s=30)


def test_passes_after_four_quiet_samples():
    load = FakeLoad([2, 5, 10, 0])
    result = wait_idle(load, POLICY, "case line", clock=load.clock)
    assert result.idle and load.taken == 4
    assert result.waited_s == 4.0 and result.label == "case line"


def test_waits_until_four_quiet_samples_in_a_row():
    # Busy, quiet x3, busy again (streak resets), then quiet x4.
    load = FakeLoad([80, 1, 1, 1, 50, 1, 1, 1, 1])
    result = wait_idle(load, POLICY, clock=load.clock)
    assert result.idle and load.taken == 9
    assert [s.cpu_pct for s in result.samples] == [80, 1, 1, 1, 50, 1, 1, 1, 1]


def test_gpu_utilization_counts_when_present():
    load = FakeLoad([0] * 6, gpu=[50, 50, 2, 3, 0, 1])
    assert wait_idle(load, POLICY, clock=load.clock).idle
    assert load.taken == 6


def test_times_out_with_busy_error_naming_the_load():
    load = FakeLoad([95])
    with pytest.raises(BusyError, match=r"not idle after 30 s.*CPU 95%.*--allow-busy") as info:
        wait_idle(load, POLICY, "case script", clock=load.clock)
    assert info.value.exit_code == EXIT_BUSY
    assert load.taken == 30


def test_allow_busy_goes_ahead_and_records_the_samples():
    load = FakeLoad([95])
    result = wait_idle(load, POLICY, allow_busy=True, clock=load.clock)
    assert not result.idle and len(result.samples) == 30
    assert result.to_dict()["samples"][0] == {"cpu_pct": 95, "gpu_pct": None}


def test_psutil_source_reports_a_percentage_of_all_cores():
    load = PsutilLoad(interval_s=0.05)
    assert 0.0 <= load.sample().cpu_pct <= 100.0
    mark = load.mark()
    sum(i * i for i in range(200_000))  # this process's own work is never "other"
    assert 0.0 <= load.since(mark) <= 100.0
