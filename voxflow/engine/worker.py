"""What a stage worker thread does with one batch: run it safely and route each output."""

from __future__ import annotations

import logging
import time

from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import StageQueue
from voxflow.errors import SynthesisError, VoxflowError
from voxflow.models.base import Stage, WorkItem

log = logging.getLogger(__name__)


def _as_request_error(stage: Stage, exc: BaseException) -> VoxflowError:
    if isinstance(exc, VoxflowError):
        return exc
    return SynthesisError(f"stage '{stage.name}' failed: {type(exc).__name__}: {exc}")


def run_safely(stage: Stage, batch: list[WorkItem]) -> list:
    """`stage.run(batch)`, isolating failures: one output (value or exception) per item.

    If the batched call raises, each item is run alone so one bad item fails only its request.
    """
    try:
        outputs = stage.run(batch)
        if len(outputs) != len(batch):
            raise RuntimeError(f"returned {len(outputs)} outputs for {len(batch)} items")
        return outputs
    except Exception as exc:
        if len(batch) == 1:
            if not isinstance(exc, VoxflowError):
                log.exception("stage %s failed on request %s", stage.name, batch[0].state.id)
            return [exc]
        log.warning("stage %s batch of %d failed (%s); retrying items alone", stage.name,
                    len(batch), exc)
        return [run_safely(stage, [item])[0] for item in batch]


def run_stage_batch(
    model: str,
    stage: Stage,
    batch: list[WorkItem],
    downstream: StageQueue | None,
    metrics: EngineMetrics,
) -> None:
    """Run one batch and pass each output on (next queue, or the request's audio)."""
    started = time.perf_counter()
    outputs = run_safely(stage, batch)
    metrics.stage_seconds.labels(model, stage.name).observe(time.perf_counter() - started)
    metrics.batch_size.labels(model, stage.name).observe(len(batch))
    metrics.items_run.labels(model, stage.name).inc(len(batch))
    for item, out in zip(batch, outputs, strict=True):
        state = item.state
        if isinstance(out, BaseException):
            state.fail(_as_request_error(stage, out))
        elif state.cancelled:
            continue
        elif downstream is None:
            state.deliver(item.segment_index, out)
        elif stage.fans_out:
            state.set_segment_count(len(out))
            for index, payload in enumerate(out):
                downstream.put(item.with_payload(payload, index))
        else:
            downstream.put(item.with_payload(out))
