"""Prometheus metrics of the engine, on a registry of their own (one per engine).

Names follow Prometheus conventions; TTFA is time to first audio: seconds from submission to the
first non-empty chunk leaving the engine. RTF is the real-time factor: wall seconds spent per
second of audio produced (below 1 is faster than real time). The registry also carries
prometheus_client's process collector (``process_resident_memory_bytes`` and the rest).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    SummaryMetricFamily,
)

from voxflow.memory_budget import BudgetCollector
from voxflow.stages.bucketed import BucketStats
from voxflow.stages.graphs import GraphRunner
from voxflow.stages.stage import Stage

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60)
_RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)
_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


class EngineMetrics:
    """All engine metrics; `registry` is what `/metrics` exposes."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # process_resident_memory_bytes, process_cpu_seconds_total, ... of the server process
        # (Linux /proc; nothing on other systems): `voxflow bench soak` reads RSS from here.
        ProcessCollector(registry=r)
        r.register(BudgetCollector())  # voxflow_memory_budget_bytes, voxflow_arena_shrinks_total
        self.stages = StageCollector()
        r.register(self.stages)
        self.requests = Counter(
            "voxflow_requests", "Finished speech requests by outcome.", ["model", "status"],
            registry=r,
        )
        self.ttfa = Histogram(
            "voxflow_ttfa_seconds", "Time from submission to the first audio chunk.", ["model"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.audio_seconds = Counter(
            "voxflow_audio_seconds", "Seconds of audio produced.", ["model"], registry=r
        )
        self.rtf = Histogram(
            "voxflow_real_time_factor", "Request wall time over its audio duration.", ["model"],
            buckets=_RTF_BUCKETS, registry=r,
        )
        self.underruns = Counter(
            "voxflow_playback_underruns", "Chunks of finished requests sent after the audio "
            "before them had played out (playback taken to start at the first chunk): what a "
            "listener hears as a gap.", ["model"], registry=r,
        )
        self.underrun_seconds = Counter(
            "voxflow_playback_underrun_seconds", "Seconds listeners waited in playback "
            "underruns, finished requests.", ["model"], registry=r,
        )
        self.queue_depth = Gauge(
            "voxflow_queue_depth", "Items waiting in a stage queue.", ["model", "stage"],
            registry=r,
        )
        self.batch_size = Histogram(
            "voxflow_batch_size", "Items per stage run.", ["model", "stage"],
            buckets=_BATCH_BUCKETS, registry=r,
        )
        self.stage_seconds = Histogram(
            "voxflow_stage_seconds", "Wall time of one stage run.", ["model", "stage"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.items_run = Counter(
            "voxflow_stage_items", "Items processed by a stage.", ["model", "stage"], registry=r
        )
        self.dropped_items = Counter(
            "voxflow_dropped_items", "Queued items dropped because their request was cancelled.",
            ["model", "stage"], registry=r,
        )
        self.lane_promotions = Counter(
            "voxflow_lane_promotions", "Bulk-lane runs raised to the fast lane's priority "
            "because their items turned urgent while they ran (scheduler rule 7).",
            ["model", "stage"], registry=r,
        )
        self.worker_restarts = Counter(
            "voxflow_worker_restarts", "Stage worker loops that died (an exception around a "
            "run, not a stage's own) and were restarted (voxflow.engine.supervisor).",
            ["model", "stage"], registry=r,
        )
        self.cancellations = Counter(
            "voxflow_cancellations", "Requests cancelled before their last chunk.",
            ["model", "reason"], registry=r,
        )
        self.inflight = Gauge(
            "voxflow_inflight_requests", "Requests admitted and not yet finished.", registry=r
        )
        self.speech_streams = Gauge(
            "voxflow_speech_streams", "Open WebSocket speech streams "
            "(WS /v1/audio/speech/stream); each holds at most one request at a time.",
            registry=r,
        )
        self.waiting = Gauge(
            "voxflow_waiting_requests", "Requests waiting for an in-flight slot.", registry=r
        )

    def watch_stages(self, model: str, stages: Sequence[Stage]) -> None:
        """Expose `stages`' own gauges (live states, buckets, graphs) under `model`."""
        self.stages.models[model] = list(stages)


class StageCollector:
    """Reads the stages' own counters at scrape time.

    - ``voxflow_stage_states{model,stage}``: requests (or segments) a stage holds state for
      (CosyVoice3: live LM KV caches under ``stage="lm"``, vocoder streams under
      ``"token2wav"``);
    - ``voxflow_stage_state_bytes{model,stage}``: bytes of tensors in that state (KV caches,
      accumulated mel); both return to 0 when a request ends, however it ends;
    - ``voxflow_stage_events_total{model,stage,event}``: a stage's own event counts
      (`Stage.events`; MagpieTTS: segments cut at ``max_frames``);
    - ``voxflow_bucket_calls_total{model,stage,rows,bucket}``: bucketed calls per padded shape;
    - ``voxflow_graph_runs_total{model,stage,mode}``: bucketed calls replayed as a captured
      graph (``mode="replayed"``) or run eagerly (``"eager"``);
    - ``voxflow_bucket_padded_fraction{model,stage}``: summary of the padded share per call;
    - ``voxflow_graph_capture_seconds`` / ``voxflow_graph_capture_bytes{model,stage}``: time and
      device memory the start-up capture took.
    """

    def __init__(self) -> None:
        self.models: dict[str, list[Stage]] = {}

    def collect(self):
        states = GaugeMetricFamily("voxflow_stage_states", "Requests or segments a stage holds "
                                   "state for.", labels=["model", "stage"])
        state_bytes = GaugeMetricFamily("voxflow_stage_state_bytes", "Bytes of tensors a stage "
                                        "holds in per-request state (KV caches, vocoder caches).",
                                        labels=["model", "stage"])
        events = CounterMetricFamily("voxflow_stage_events", "Notable events a stage counted "
                                     "(e.g. generations cut at a length cap).",
                                     labels=["model", "stage", "event"])
        calls = CounterMetricFamily("voxflow_bucket_calls", "Bucketed stage calls per padded "
                                    "shape.", labels=["model", "stage", "rows", "bucket"])
        runs = CounterMetricFamily("voxflow_graph_runs", "Bucketed stage calls by how they ran.",
                                   labels=["model", "stage", "mode"])
        padded = SummaryMetricFamily("voxflow_bucket_padded_fraction", "Padded share of a "
                                     "bucketed call.", labels=["model", "stage"])
        capture_s = GaugeMetricFamily("voxflow_graph_capture_seconds", "Seconds spent capturing "
                                      "graphs at start-up.", labels=["model", "stage"])
        capture_b = GaugeMetricFamily("voxflow_graph_capture_bytes", "Device memory the "
                                      "captured graphs reserved.", labels=["model", "stage"])
        for model, stages in list(self.models.items()):
            for stage in stages:
                states.add_metric([model, stage.name], stage.live_states())
                state_bytes.add_metric([model, stage.name], stage.state_bytes())
                for event, count in sorted(stage.events().items()):
                    events.add_metric([model, stage.name, event], count)
                stats, graphs = getattr(stage, "stats", None), getattr(stage, "graphs", None)
                if not isinstance(stats, BucketStats) or not isinstance(graphs, GraphRunner):
                    continue  # a BucketedStage, or a stage that calls a bucketed runner
                hits, replays, eager, padded_sum, n = stats.snapshot()
                for (rows, bucket), count in sorted(hits.items()):
                    calls.add_metric([model, stage.name, str(rows), str(bucket)], count)
                runs.add_metric([model, stage.name, "replayed"], replays)
                runs.add_metric([model, stage.name, "eager"], eager)
                padded.add_metric([model, stage.name], count_value=n, sum_value=padded_sum)
                capture_s.add_metric([model, stage.name], graphs.capture_seconds)
                capture_b.add_metric([model, stage.name], graphs.capture_bytes)
        yield from (states, state_bytes, events, calls, runs, padded, capture_s, capture_b)
