"""The bucketed stage kind: fixed shapes from a ladder of sizes, captured as graphs on CUDA.

A bucketed stage (CosyVoice3's flow-matching solve over mel frames, a codec decoder over code
frames) runs a computation whose cost and memory follow its input shape. It declares two
ladders: `buckets` along its padded axis (frames, tokens) and `batch_rows` (e.g. 1, 2, 4, 8).
An item's bucket is the smallest rung that holds its `size`; items batch only with items of the
same bucket (`batch_key`), and a batch of n items is padded to the smallest row rung >= n. So
every call has one of ``len(batch_rows) * len(buckets)`` shapes, and each can be captured once
at start-up (`start`, largest first, one memory pool) and replayed (`voxflow.stages.graphs`).

Contract for a subclass: `pack` builds the fixed-shape inputs with padding that cannot reach
the real rows (masks, per-row lengths, padded rows' own independent inputs); `forward` is the
computation (same shapes in, same shapes out; no host reads of device values inside); `unpack`
cuts each real row back to its own length. The test `padded == unpadded` (tests/unit) holds a
stage to it. `example_inputs` gives the inputs `start` captures with.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from bisect import bisect_left
from collections.abc import Hashable, Sequence
from typing import Any

from voxflow.stages.graphs import GraphRunner
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import StageOutput
from voxflow.stages.stage import Stage

log = logging.getLogger(__name__)


def pick_rung(ladder: Sequence[int], size: int, what: str = "bucket") -> int:
    """The smallest rung of the ascending `ladder` that is >= `size`.

    Raises:
        ValueError: `size` is above the top rung (the family must cut its segments shorter, or
            the scheduler form smaller batches); the message names `what` the ladder holds.
    """
    index = bisect_left(ladder, size)
    if index == len(ladder):
        raise ValueError(f"size {size} is above the largest {what} {ladder[-1]}")
    return ladder[index]


def check_ladder(name: str, ladder: Sequence[int]) -> tuple[int, ...]:
    """`ladder` as a tuple if it is non-empty, positive and strictly ascending.

    Raises:
        ValueError: naming `name` otherwise.
    """
    rungs = tuple(int(v) for v in ladder)
    if not rungs or rungs[0] < 1 or any(b <= a for a, b in zip(rungs, rungs[1:], strict=False)):
        raise ValueError(f"{name} must be positive and strictly ascending, got {list(ladder)}")
    return rungs


class BucketStats:
    """Counters of a bucketed stage, read by the engine's metrics (thread-safe).

    Attributes:
        hits: (rows, bucket) -> calls of that shape.
        replays: calls that replayed a captured graph.
        eager: calls that ran eagerly.
        padded_sum: the sum over calls of the padded share of ``rows * bucket`` (0 = no
            padding); its mean is ``padded_sum / calls``.
        calls: calls recorded.
    """

    def __init__(self) -> None:
        self.hits: dict[tuple[int, int], int] = {}
        self.replays = 0
        self.eager = 0
        self.padded_sum = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def record(self, shape: tuple[int, int], real: int, replayed: bool) -> None:
        """One call of `shape` (rows, bucket) holding `real` real positions (sum of sizes)."""
        rows, bucket = shape
        with self._lock:
            self.hits[shape] = self.hits.get(shape, 0) + 1
            if replayed:
                self.replays += 1
            else:
                self.eager += 1
            self.padded_sum += 1.0 - real / (rows * bucket)
            self.calls += 1

    def snapshot(self) -> tuple[dict[tuple[int, int], int], int, int, float, int]:
        """(hits, replays, eager, padded_sum, calls), read together."""
        with self._lock:
            return dict(self.hits), self.replays, self.eager, self.padded_sum, self.calls


class BucketedStage(Stage):
    """A stage of fixed-shape calls padded to a ladder (see the module docstring).

    Args:
        buckets: ascending sizes along the padded axis (e.g. mel frames).
        batch_rows: ascending row counts; the largest is `max_batch_size`.
        capture_graphs: capture each shape at start-up on CUDA (the family's option).
        device: where `forward` runs ("cpu", "cuda").
        workers: worker threads.
    Raises:
        ValueError: a ladder that is empty, not positive or not ascending.
    """

    kind = "bucketed"

    def __init__(
        self,
        buckets: Sequence[int],
        batch_rows: Sequence[int] = (1,),
        capture_graphs: bool = True,
        device: str = "cpu",
        workers: int = 1,
    ):
        self.buckets = check_ladder("buckets", buckets)
        self.batch_rows = check_ladder("batch_rows", batch_rows)
        super().__init__(max_batch_size=self.batch_rows[-1], workers=workers)
        self.graphs = GraphRunner(self.forward, capture_graphs, device)
        self.stats = BucketStats()

    @abstractmethod
    def size(self, item: StageItem) -> int:
        """The item's length along the bucketed axis (frames), >= 1."""

    @abstractmethod
    def pack(self, batch: StageBatch, rows: int, bucket: int) -> dict[str, Any]:
        """Inputs of shape (rows, ..., bucket, ...) for `forward`; rows past `len(batch)` and
        positions past an item's size are padding that must not change the real rows."""

    @abstractmethod
    def forward(self, inputs: dict[str, Any]) -> Any:
        """The fixed-shape computation (what is captured)."""

    @abstractmethod
    def unpack(self, outputs: Any, batch: StageBatch) -> list[StageOutput]:
        """One output per real item, cut to its own size."""

    def example_inputs(self, rows: int, bucket: int) -> dict[str, Any]:
        """Inputs of one shape for capture at start-up (default: `pack` of nothing is not
        possible, so a capturing subclass must override)."""
        raise NotImplementedError(f"stage {self.name} does not provide example inputs")

    def batch_key(self, item: StageItem) -> Hashable:
        """Items batch only with items of the same bucket."""
        return pick_rung(self.buckets, self.size(item))

    def shape(self, batch: StageBatch) -> tuple[int, int]:
        """The (rows, bucket) `batch` is padded to."""
        bucket = pick_rung(self.buckets, max(self.size(item) for item in batch))
        return pick_rung(self.batch_rows, len(batch), "row count"), bucket

    def start(self) -> None:
        """Capture every (rows, bucket), largest first, when capture can run here; log how
        many were captured, or why they run eagerly."""
        reason = self.graphs.eager_reason()
        shapes = [(r, b) for r in reversed(self.batch_rows) for b in reversed(self.buckets)]
        if reason is not None:
            for shape in shapes:
                self.graphs.status[shape] = f"eager: {reason}"
            log.info("stage %s runs eagerly (%s)", self.name, reason)
            return
        captured = sum(self.graphs.capture(s, self.example_inputs(*s)) for s in shapes)
        log.info("stage %s: captured %d of %d shapes in %.1f s (%d MiB)", self.name, captured,
                 len(shapes), self.graphs.capture_seconds, self.graphs.capture_bytes >> 20)

    def run(self, batch: StageBatch) -> list[StageOutput]:
        rows, bucket = self.shape(batch)
        inputs = self.pack(batch, rows, bucket)
        outputs, replayed = self.graphs.run((rows, bucket), inputs)
        self.stats.record((rows, bucket), sum(self.size(i) for i in batch), replayed)
        return self.unpack(outputs, batch)

    def health(self) -> dict[str, Any]:
        status = self.graphs.status
        captured = sum(1 for s in status.values() if s == "captured")
        eager = sorted({s for s in status.values() if s != "captured"})
        return {"graphs": {"captured": captured, "shapes": len(status), "eager": eager}}
