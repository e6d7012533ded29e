"""The idle gate: no number is taken while the machine is busy with something else.

Before each case the harness samples the machine's load until it has been quiet for
`IdlePolicy.consecutive` samples in a row: CPU time used by processes other than the harness and
its children (the servers it started) at most `cpu_max_pct` percent of all cores, and, when
``nvidia-smi`` exists, every GPU's utilization at most `gpu_max_pct` percent. After `timeout_s`
without that, `wait_idle` raises `BusyError`, or with ``allow_busy`` goes ahead and says so. Every
sample is kept for the report.

The load source is a parameter: tests use a fake one; real runs use `PsutilLoad`, which also
measures the mean load of other processes over a whole level (`LoadMeter`), so a report shows
whether something else ran while it measured.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from voxflow.bench.errors import BusyError


@dataclass(frozen=True)
class LoadSample:
    """Load over one sampling interval: CPU percent of all cores used by other processes, and
    the busiest GPU's utilization percent (None without a GPU)."""

    cpu_pct: float
    gpu_pct: float | None = None


class LoadSource(Protocol):
    def sample(self) -> LoadSample:
        """Measure the load over the next interval (blocks for that interval)."""
        ...


@runtime_checkable
class LoadMeter(Protocol):
    """Mean load over a span of any length (a whole concurrency level), without blocking."""

    def mark(self) -> object:
        ...

    def since(self, mark: object) -> float:
        """Mean CPU percent of all cores used by other processes since `mark`."""
        ...


@dataclass(frozen=True)
class IdlePolicy:
    """What counts as idle and how long to wait for it."""

    cpu_max_pct: float = 10.0
    gpu_max_pct: float = 3.0
    consecutive: int = 4
    timeout_s: float = 600.0

    def quiet(self, s: LoadSample) -> bool:
        gpu_ok = s.gpu_pct is None or s.gpu_pct <= self.gpu_max_pct
        return s.cpu_pct <= self.cpu_max_pct and gpu_ok


@dataclass
class GateResult:
    """One pass through the gate: every sample seen, the seconds waited, and whether it was idle."""

    label: str
    idle: bool
    waited_s: float
    samples: list[LoadSample] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def wait_idle(
    source: LoadSource,
    policy: IdlePolicy,
    label: str = "",
    allow_busy: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> GateResult:
    """Sample `source` until `policy.consecutive` quiet samples in a row.

    Raises:
        BusyError: not idle within `policy.timeout_s` and not `allow_busy`.
    """
    start = clock()
    result = GateResult(label, idle=False, waited_s=0.0)
    streak = 0
    while streak < policy.consecutive:
        sample = source.sample()
        result.samples.append(sample)
        streak = streak + 1 if policy.quiet(sample) else 0
        result.waited_s = clock() - start
        if streak < policy.consecutive and result.waited_s >= policy.timeout_s:
            if allow_busy:
                return result
            raise BusyError(
                f"machine not idle after {policy.timeout_s:.0f} s before {label or 'the run'} "
                f"(last load: CPU {sample.cpu_pct:.0f}% of all cores by other processes"
                + (f", GPU {sample.gpu_pct:.0f}%" if sample.gpu_pct is not None else "")
                + "); pass --allow-busy to measure anyway"
            )
    result.idle = True
    return result


class PsutilLoad:
    """CPU use of other processes measured with psutil over `interval_s`, plus nvidia-smi."""

    def __init__(self, interval_s: float = 1.0):
        import psutil

        self._psutil = psutil
        self.interval_s = interval_s
        self.cores = psutil.cpu_count() or 1
        self.has_gpu = shutil.which("nvidia-smi") is not None

    def _own_cpu_s(self) -> float:
        """CPU seconds used so far by this process and its living descendants."""
        me = self._psutil.Process()
        total = 0.0
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except self._psutil.Error:
                pass
        return total

    def mark(self) -> tuple[float, float, float]:
        """Start measuring: (wall, busy CPU, own CPU) seconds now; pass it to `since`."""
        return time.monotonic(), busy_cpu_s(), self._own_cpu_s()

    def since(self, mark: tuple[float, float, float]) -> float:
        """Mean CPU percent of all cores used by other processes since `mark`."""
        t0, busy0, own0 = mark
        wall = max(time.monotonic() - t0, 1e-9)
        other = max(0.0, (busy_cpu_s() - busy0) - max(0.0, self._own_cpu_s() - own0))
        return round(min(100.0 * other / (wall * self.cores), 100.0), 1)

    def sample(self) -> LoadSample:
        start = self.mark()
        time.sleep(self.interval_s)
        cpu = self.since(start)
        return LoadSample(cpu, gpu_utilization() if self.has_gpu else None)


def busy_cpu_s() -> float:
    """CPU seconds all processes of the machine have used, counted as psutil's own cpu_percent
    counts them (guest time is already inside user time on Linux)."""
    import psutil

    t = psutil.cpu_times()
    not_busy = ("idle", "iowait", "guest", "guest_nice")
    return sum(t) - sum(getattr(t, name, 0.0) for name in not_busy)


def gpu_utilization() -> float | None:
    """The busiest GPU's utilization percent from nvidia-smi; None when it cannot be read."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        return max(float(v) for v in out.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
