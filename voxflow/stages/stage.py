"""`Stage`: one step of a model's graph, and the kinds of stage the engine knows how to run.

The engine owns the queues and worker threads; a stage is a plain object that turns a
`StageBatch` into one `StageOutput` per item, testable without a server. Kinds:

- ``batch`` (this class): each `run` call is independent; the scheduler forms batches by
  `batch_key`, `max_batch_size` and `max_batch_cost`.
- ``autoregressive`` (`voxflow.stages.autoregressive`): items join and leave a running batch
  at every decode step; emits a segment in parts.
- ``bucketed`` (`voxflow.stages.bucketed`): fixed shapes from a ladder of sizes, padded, and
  replayed as captured graphs on CUDA.

A stage with ``in_order = True`` keeps streaming state between a request's items (a vocoder's
overlap, a codec's caches): the scheduler runs that request's items one at a time, in segment
and part order, and the engine calls `release` once when the request ends, however it ends.

A stage with ``serial_segments = True`` runs a request's segments one after another: a later
segment waits until the earlier ones are delivered, unless it is due (its listener would
otherwise wait). For CPU stages whose run alone takes every core (a solo session): running a
lone request's segments side by side only splits the cores and delays its first audio, while
under load the other requests' segments keep every worker busy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, ClassVar

from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, StageOutput


class Stage(ABC):
    """One step of a model's graph. Called from one or more worker threads.

    Class attributes a subclass sets:
        name: short stage name used in metrics ("frontend", "acoustic", "vocoder").
        kind: "batch", "autoregressive" or "bucketed": which engine loop runs it.
        fans_out: True when each input becomes a request's `Segments`.
        in_order: True when a request's items must run one at a time, in order (state).
        serial_segments: True when a request's later segment should wait for its earlier
            ones to be delivered, unless it is due (`voxflow.engine.scheduler`, rule 6).
        counts_waiting: True when its batches should carry `StageBatch.waiting` (the other
            requests queued at the stage); counting walks the queue under its lock, so only
            a stage that reads it asks.
    Instance attributes:
        max_batch_size: most items in one `run` call (1 = no batching).
        max_batch_cost: cap on padded cost, ``len(batch) * max(cost)``; None = no cap.
        workers: how many worker threads run this stage (with `bulk_workers`: its fast lane).
        bulk_workers: extra worker threads at a lower OS priority (nice + `bulk_nice`); with
            any, the `workers` take only urgent items (`urgent_in`; scheduler rule 7).
        bulk_nice: how much lower the bulk workers' priority is (Linux nice steps, 1-19;
            default 10, where the kernel's CFS weights give a bulk thread about a tenth of a
            core beside a fast one; no family sets another, none was measured).
        bulk_promotion: a bulk run whose items turn urgent while it runs gets the fast
            lane's priority back, where the process may raise it (`voxflow.engine.promotion`).
        serves_next: its workers also take the next stage's items, by playback deadline
            (scheduler rule 8: the next stage's urgent head before a later own item, any of
            its items when none of ours is ready); the next stage may then have 0 `workers`.
    """

    name: ClassVar[str]
    kind: ClassVar[str] = "batch"
    fans_out: ClassVar[bool] = False
    in_order: ClassVar[bool] = False
    serial_segments: ClassVar[bool] = False
    counts_waiting: ClassVar[bool] = False
    serves_next: bool = False

    def __init__(
        self, max_batch_size: int = 1, max_batch_cost: int | None = None, workers: int = 1,
        bulk_workers: int = 0, bulk_nice: int = 10, bulk_promotion: bool = False,
    ):
        self.max_batch_size = max_batch_size
        self.max_batch_cost = max_batch_cost
        self.workers = workers
        self.bulk_workers = bulk_workers
        self.bulk_nice = bulk_nice
        self.bulk_promotion = bulk_promotion

    def batch_key(self, item: StageItem) -> Hashable:
        """Items batch together only when their keys are equal (default: all compatible)."""
        return None

    def cost(self, item: StageItem) -> int:
        """Padded-size cost of an item (e.g. phoneme count); used with `max_batch_cost`."""
        return 1

    @abstractmethod
    def run(self, batch: StageBatch) -> list[StageOutput]:
        """Process a batch; return one output per item, in order.

        An output may be an Exception instance: that item's request fails with it, the others
        go on. Raising fails the whole call; the engine then retries the items one by one so a
        bad item never fails its batch-mates.
        """

    def urgent_in(self, item: StageItem, slack_s: float, audio_flowing: bool) -> float:
        """Seconds until `item` is urgent: the fast lane's workers take it from then on
        (scheduler rule 7; only read with `bulk_workers`). `slack_s`: seconds until its
        listener would wait (`RequestState.slack`); `audio_flowing`: its listener already has
        audio. Default: 0 (always urgent)."""
        return 0.0

    def passed_through(self, item: StageItem) -> Audio | None:
        """`item`'s audio when an earlier stage already made it and this stage only passes it
        on (the engine then delivers it without waiting for one of this stage's workers, when
        nothing of its request runs here or waits before it); None: `item` needs a run.
        Default: None."""
        return None

    def working_set_bytes(self, batch: StageBatch) -> int:
        """Predicted peak bytes this stage's run of `batch` holds above what it held before
        (intermediate tensors), reserved from the process's memory gate while it runs
        (`voxflow.memory_gate`). Default: 0 (runs never wait for memory)."""
        return 0

    def start(self) -> None:  # noqa: B027 (optional hook)
        """Called once by the engine after the family is loaded and before its warm-up, on the
        thread that starts the engine (capture graphs, allocate state pools). Default: nothing.
        """

    def release(self, request_id: str) -> None:  # noqa: B027 (optional hook)
        """Free what this stage holds for `request_id` (called once when the request ends:
        finished, failed, timed out or cancelled; and for every request at shutdown).
        Default: nothing."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Free every per-request state left (engine shutdown). Default: nothing."""

    def live_states(self) -> int:
        """Requests this stage holds state for now (`voxflow_stage_states`). Default: 0."""
        return 0

    def state_bytes(self) -> int:
        """Bytes of tensors and arrays this stage holds in per-request state now (KV caches,
        accumulated mel, overlap tails; `voxflow_stage_state_bytes`). Default: 0."""
        return 0

    def events(self) -> dict[str, int]:
        """Counts of notable events since start, by name (e.g. generations cut at a length
        cap), exported as ``voxflow_stage_events_total{model,stage,event}``; each count only
        grows. Default: none."""
        return {}

    def health(self) -> dict[str, Any]:
        """Facts for `/health` (e.g. which buckets run as captured graphs). Default: none."""
        return {}
