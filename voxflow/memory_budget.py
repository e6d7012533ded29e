"""The process's memory budget: above it, model runs hand their arena memory back.

ONNX Runtime's arena (`voxflow.models.onnx_memory`) keeps the memory of finished runs for the
next ones; giving it back costs the next run its page faults again (+16% CPU for a Piper
segment, +5% for Kokoro, when every run does it). So runs keep it while the process is within
its budget, and a run that starts over it ends by shrinking the arena. The budget is the RSS
once the models' sessions are loaded (Python, its libraries and the weights in memory; each
loader calls `ArenaBudget.note_loaded`) plus `HEADROOM_BYTES`, issue 7's "steady state at most
the weights in memory plus 400 MB". The front ends, the encoders, requests in flight and the
arena all live in the headroom.
"""

from __future__ import annotations

import os
import threading

HEADROOM_BYTES = 400 << 20
"""Bytes of RSS allowed above the loaded sessions before runs shrink the arena."""


def process_rss() -> int | None:
    """This process's resident memory in bytes, from ``/proc/self/statm`` (None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class ArenaBudget:
    """Whether a run should shrink the shared arena: RSS over the loaded RSS plus `headroom`.

    `note_loaded` (called by the loaders after each session is made) raises the baseline to the
    RSS then; before any call nothing is over budget. `shrinks` counts the runs told to shrink.
    """

    def __init__(self, headroom_bytes: int = HEADROOM_BYTES, rss=process_rss):
        self.headroom = headroom_bytes
        self.baseline: int | None = None
        self.shrinks = 0
        self._rss = rss
        self._lock = threading.Lock()

    def note_loaded(self) -> None:
        rss = self._rss()
        with self._lock:
            if rss is not None and (self.baseline is None or rss > self.baseline):
                self.baseline = rss

    @property
    def limit(self) -> int | None:
        """The RSS in bytes above which runs shrink the arena (None: no baseline yet)."""
        return None if self.baseline is None else self.baseline + self.headroom

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
    """Prometheus collector of `budget`: ``voxflow_memory_budget_bytes`` (the RSS above which
    runs shrink the arena; absent before a model is loaded) and ``voxflow_arena_shrinks_total``."""

    def __init__(self, budget: ArenaBudget = BUDGET):
        self.budget = budget

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        limit = self.budget.limit
        if limit is not None:
            yield GaugeMetricFamily("voxflow_memory_budget_bytes", "RSS above which a model "
                                    "run ends by shrinking the ONNX Runtime arena.", value=limit)
        yield CounterMetricFamily("voxflow_arena_shrinks", "Model runs that shrank the ONNX "
                                  "Runtime arena (the process was over its memory budget).",
                                  value=self.budget.shrinks)
