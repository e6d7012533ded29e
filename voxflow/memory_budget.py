"""The process's memory budget: the models' memory plus a headroom; above it, model runs hand
their arena memory back, and runs wait for room (`voxflow.memory_gate`).

Issue 7's bound: the steady state at most "the models' weights in memory plus 400 MB". The
engine measures each model's memory as the RSS its load added (`ArenaBudget.loading`: the
sessions with their weights, the voices, the front ends and their dictionaries) and the budget
is their sum plus the audio cache's bound (``cache.max_bytes`` when the cache is on: its bodies
are held for good, like weights) plus `headroom` (``engine.memory_headroom_mb``, 400 MB).
Everything else lives in
the headroom: Python and its libraries (the RSS before the first model, `base`), requests in
flight, the encoders and ONNX Runtime's arena (`voxflow.models.onnx_memory`). So the runs'
working sets get ``headroom - base - UNRESERVED_BYTES`` (`run_capacity`), which the engine
gives the gate.

The arena keeps the memory of finished runs for the next ones; giving it back costs the next
run its page faults again (+16% CPU for a Piper segment, +5% for Kokoro, when every run does
it). So runs keep it while the process is within its budget, and a run that starts over it
ends by shrinking the arena. Without an engine's accounting (a script opening sessions) there
is no budget: nothing shrinks and nothing waits.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from voxflow.memory_gate import GATE, WorkingSetGate

HEADROOM_BYTES = 400 * 10**6
"""Bytes of RSS allowed above the models' memory (issue 7: "plus 400 MB")."""
UNRESERVED_BYTES = 32 << 20
"""Room kept out of the runs' capacity for what no run reserves: the encoders and buffers of
the requests in flight, and a run's peak above its prediction. Without it a soak of
configs/multi.yaml sat at the budget (median 601 MiB against 619) and went over it in 12% of
its samples, by up to 32 MiB."""


def process_rss() -> int | None:
    """This process's resident memory in bytes, from ``/proc/self/statm`` (None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class ArenaBudget:
    """Whether a run should shrink the shared arena: RSS over the models' memory plus
    `headroom`.

    The engine calls `start` before loading its models and wraps each load in `loading`;
    before that (or with `headroom` None) there is no limit. `shrinks` counts the runs told to
    shrink.

    Args:
        headroom_bytes: RSS allowed above the models' memory; None = no budget.
        rss: the function reading the process's RSS in bytes (None where unknown).
    """

    def __init__(self, headroom_bytes: int | None = HEADROOM_BYTES, rss=process_rss):
        self.headroom = headroom_bytes
        self.base: int | None = None      # RSS before the first model (Python, libraries)
        self.models: dict[str, int] = {}  # model name -> RSS its load added
        self.cache = 0  # bytes the audio cache may hold (`cache.max_bytes`; 0 when off)
        self.shrinks = 0
        self._rss = rss
        self._lock = threading.Lock()

    def start(self, headroom_bytes: int | None = HEADROOM_BYTES, cache_bytes: int = 0) -> None:
        """Begin an engine's accounting: forget earlier models, note the RSS now as `base`;
        `cache_bytes` is what the audio cache may hold (``cache.max_bytes``, 0 without it)."""
        with self._lock:
            self.headroom = headroom_bytes
            self.cache = cache_bytes
            self.base = self._rss()
            self.models = {}

    @contextmanager
    def loading(self, name: str) -> Iterator[None]:
        """Account the RSS that loading model `name` in the block adds (0 if it shrank)."""
        before = self._rss()
        yield
        after = self._rss()
        if before is not None and after is not None:
            with self._lock:
                self.models[name] = max(0, after - before)

    @property
    def models_bytes(self) -> int:
        """The models' memory: the sum of what their loads added to the RSS."""
        return sum(self.models.values())

    @property
    def limit(self) -> int | None:
        """The RSS in bytes above which runs shrink the arena: the models' memory, the audio
        cache's bound and the headroom (None: no budget)."""
        if self.headroom is None or self.base is None or not self.models:
            return None
        return self.models_bytes + self.cache + self.headroom

    @property
    def run_capacity(self) -> int | None:
        """Bytes the budget leaves for runs' working sets: the limit less the RSS with the
        models loaded, less the audio cache's bound, less `UNRESERVED_BYTES` (``headroom - base
        - UNRESERVED_BYTES``; 0 when that is negative); None: no budget."""
        limit = self.limit
        if limit is None or self.base is None:
            return None
        return max(0, limit - self.base - self.models_bytes - self.cache - UNRESERVED_BYTES)

    def over(self) -> bool:
        limit, rss = self.limit, self._rss()
        if limit is None or rss is None or rss <= limit:
            return False
        with self._lock:
            self.shrinks += 1
        return True


BUDGET = ArenaBudget()
"""The process's budget: one arena, one budget."""


class BudgetCollector:
    """Prometheus collector of `budget` and `gate`: ``voxflow_memory_budget_bytes`` (the RSS
    above which runs shrink the arena; absent without a budget), ``voxflow_model_memory_bytes``
    {model} (what each model's load added to the RSS), ``voxflow_arena_shrinks_total``,
    ``voxflow_memory_run_capacity_bytes`` (working sets allowed in flight),
    ``voxflow_memory_reserved_bytes`` (reserved by the runs in progress),
    ``voxflow_buffered_audio_bytes`` (audio queued for clients, `WorkingSetGate.add_buffered`),
    ``voxflow_memory_waits_total`` and ``voxflow_memory_wait_seconds_total`` (runs that waited
    for memory, and how long)."""

    def __init__(self, budget: ArenaBudget = BUDGET, gate: WorkingSetGate = GATE):
        self.budget = budget
        self.gate = gate

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        limit = self.budget.limit
        if limit is not None:
            yield GaugeMetricFamily("voxflow_memory_budget_bytes", "RSS above which a model "
                                    "run ends by shrinking the ONNX Runtime arena.", value=limit)
        models = GaugeMetricFamily("voxflow_model_memory_bytes", "RSS a model's load added "
                                   "(weights, voices, front ends).", labels=["model"])
        for name, nbytes in sorted(self.budget.models.items()):
            models.add_metric([name], nbytes)
        yield models
        yield CounterMetricFamily("voxflow_arena_shrinks", "Model runs that shrank the ONNX "
                                  "Runtime arena (the process was over its memory budget).",
                                  value=self.budget.shrinks)
        capacity = self.gate.capacity
        if capacity is not None:
            yield GaugeMetricFamily("voxflow_memory_run_capacity_bytes", "Bytes of model runs' "
                                    "predicted working sets allowed in flight.", value=capacity)
        yield GaugeMetricFamily("voxflow_memory_reserved_bytes", "Predicted working sets of the "
                                "model runs in progress.", value=self.gate.reserved)
        yield GaugeMetricFamily("voxflow_buffered_audio_bytes", "Audio made and not yet taken "
                                "by its clients (it comes off the runs' capacity).",
                                value=self.gate.buffered)
        yield CounterMetricFamily("voxflow_memory_waits", "Model runs that waited for memory "
                                  "before starting.", value=self.gate.waits)
        yield CounterMetricFamily("voxflow_memory_wait_seconds", "Seconds model runs waited "
                                  "for memory.", value=self.gate.wait_seconds)
