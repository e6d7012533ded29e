"""What a stage worker thread does with one batch: run it safely and route each typed output.

Routing (`voxflow.stages.outputs`): `Segments` fan a request out into segment jobs for the next
stage (and record its pauses on the request); `Next` goes to the next stage's queue keeping the
item's segment, part and final flag; `Parts` queue one job per part of the segment,
`StreamedParts` one per part as each is made; `Audio` is
delivered to the request as that segment part; `Continued` delivers its audio as that part and
queues the rest of the segment back into the same stage as the next part;
an exception fails only its own request. A segment's word timings (`words` of an output, else
of the item) go on with its first part.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from voxflow import failpoints
from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.scheduler import Job, StageQueue, stage_batch
from voxflow.errors import SynthesisError, VoxflowError
from voxflow.memory_gate import GATE
from voxflow.stages.items import StageBatch
from voxflow.stages.outputs import (
    Audio,
    Continued,
    Next,
    Parts,
    Segments,
    StreamedParts,
    check_outputs,
)
from voxflow.stages.stage import Stage

log = logging.getLogger(__name__)


def as_request_error(stage: Stage, exc: BaseException) -> VoxflowError:
    """`exc` as the error its request ends with (a stage's own `VoxflowError` unchanged)."""
    if isinstance(exc, VoxflowError):
        return exc
    return SynthesisError(f"stage '{stage.name}' failed: {type(exc).__name__}: {exc}")


def run_safely(stage: Stage, batch: list[Job], isolated: bool = False,
               staged: StageBatch | None = None) -> list:
    """`stage.run` of the batch, isolating failures: one output (value or exception) per job.

    If the batched call raises (or returns outputs of the wrong count or type), each job is
    run alone so one bad item fails only its request.
    """
    try:
        if failpoints.ACTIVE:  # fault tests only (voxflow.failpoints)
            failpoints.stage_raise(stage.name, (job.state.request.text for job in batch))
        outputs = stage.run(staged if staged is not None else stage_batch(batch, stage, isolated))
        return check_outputs(stage.name, outputs, len(batch))
    except Exception as exc:
        if len(batch) == 1:
            if not isinstance(exc, VoxflowError):
                log.exception("stage %s failed on request %s", stage.name, batch[0].state.id)
            return [exc]
        log.warning("stage %s batch of %d failed (%s); retrying items alone", stage.name,
                    len(batch), exc)
        return [run_safely(stage, [job], isolated)[0] for job in batch]


def route(stage: Stage, job: Job, out: object, downstream: StageQueue | None,
          own: StageQueue | None = None) -> None:
    """Pass one job's output on: next queue, the request's audio (and, for `Continued`, the
    rest of the segment back into `own`, the stage's queue), or its failure."""
    state = job.state
    if isinstance(out, BaseException):
        state.fail(as_request_error(stage, out))
    elif state.cancelled:
        return
    elif isinstance(out, Segments):
        fan_out(stage, job, out, downstream)
    elif isinstance(out, Audio):
        deliver(job, out, job.item.final)
    elif isinstance(out, Continued):
        continue_segment(stage, job, out, own)
    elif downstream is None:
        state.fail(as_request_error(stage, TypeError("the last stage returned no audio")))
    elif isinstance(out, Parts):
        split_into_parts(stage, job, out, downstream)
    elif isinstance(out, StreamedParts):
        stream_parts(stage, job, out, downstream)
    else:
        assert isinstance(out, Next)
        words = out.words if out.words is not None else job.item.words
        hand_down(job.derive(out.payload, part=job.item.part, final=job.item.final,
                             words=words), downstream)


def hand_down(job: Job, downstream: StageQueue) -> None:
    """Queue `job` for the next stage, or deliver its audio at once where that stage only
    passes it on (`Stage.passed_through`) and may take it now (`StageQueue.claim`): audio
    made in line then never waits for a worker of the next stage busy with other requests'
    runs (open loop, under load: up to a whole decoder window)."""
    audio = downstream.stage.passed_through(job.item)
    if audio is not None and downstream.claim(job):
        deliver(job, audio, job.item.final)
    else:
        downstream.put(job)


def continue_segment(stage: Stage, job: Job, out: Continued, own: StageQueue | None) -> None:
    """Deliver a cut segment's head as the item's part and queue the rest as the next part."""
    item, state = job.item, job.state
    if own is None:
        state.fail(as_request_error(stage, TypeError("Continued needs the stage's own queue")))
        return
    # queued first: delivering may end the wait of a held later segment (rule 6), which must
    # not run before this rest
    own.put(job.derive(out.rest, part=item.part + 1, final=item.final))
    deliver(job, out.audio, final=False)


def deliver(job: Job, audio: Audio, final: bool) -> None:
    """Hand `audio` to the request as the item's part (`final`: the segment's last), with its
    words, else the item's."""
    item = job.item
    words = audio.words if audio.words is not None else item.words
    job.state.deliver(item.segment, audio.samples, item.part, final, words)


def fan_out(stage: Stage, job: Job, plan: Segments, downstream: StageQueue | None) -> None:
    """Record the front end's plan on the request and queue one job per segment."""
    state = job.state
    if downstream is None:
        error = TypeError("a front end must be followed by a stage")
        state.fail(as_request_error(stage, error))
        return
    state.set_segment_plan(plan.pauses_after, plan.lead_silence_s)
    if not plan.payloads:  # nothing speakable: one empty segment, the lead silence around it
        state.unspeakable = True
        state.set_segment_count(1)
        state.deliver(0, np.zeros(0, np.float32))
        return
    state.set_segment_count(len(plan.payloads))
    speed = job.item.speed
    for index, payload in enumerate(plan.payloads):
        downstream.put(job.derive(payload, segment=index, speed=plan.speeds.get(index, speed)))


def split_into_parts(stage: Stage, job: Job, parts: Parts, downstream: StageQueue) -> None:
    """Queue one job per part of a whole segment: part i, the last final."""
    item = job.item
    if not parts.payloads or item.part != 0 or not item.final:
        error = TypeError("Parts must come from a whole segment (part 0, final) and be non-empty")
        job.state.fail(as_request_error(stage, error))
        return
    last = len(parts.payloads) - 1
    words = parts.words if parts.words is not None else item.words
    for index, payload in enumerate(parts.payloads):
        hand_down(job.derive(payload, part=index, final=index == last,
                             words=words if index == 0 else None), downstream)


def stream_parts(stage: Stage, job: Job, parts: StreamedParts, downstream: StageQueue) -> None:
    """Make a segment's parts one by one and queue each as soon as it exists: part i, the last
    final. Stops early when the request ends meanwhile (cancelled or failed)."""
    item, state = job.item, job.state
    if parts.count < 1 or item.part != 0 or not item.final:
        error = TypeError("StreamedParts must come from a whole segment (part 0, final) and "
                          "have at least one part")
        state.fail(as_request_error(stage, error))
        return
    index = 0
    try:
        for index, payload in enumerate(parts.produce()):
            if state.cancelled:
                return
            if index >= parts.count:
                raise TypeError(f"StreamedParts made more than its {parts.count} parts")
            words = (parts.words if parts.words is not None else item.words) if index == 0 else None
            hand_down(job.derive(payload, part=index, final=index == parts.count - 1,
                                 words=words), downstream)
    except Exception as exc:
        if not isinstance(exc, VoxflowError):
            log.exception("stage %s failed making part %d of request %s", stage.name, index,
                          state.id)
        state.fail(as_request_error(stage, exc))
        return
    if index != parts.count - 1 and not state.cancelled:
        state.fail(as_request_error(stage, TypeError(
            f"StreamedParts made {index + 1} of its {parts.count} parts")))


def run_stage_batch(
    model: str,
    stage: Stage,
    batch: list[Job],
    downstream: StageQueue | None,
    metrics: EngineMetrics,
    isolated: bool = False,
    own: StageQueue | None = None,
) -> None:
    """Run one batch and pass each output on (next queue, the request's audio, or `own`, the
    stage's queue, for the rest of a `Continued` segment)."""
    if failpoints.ACTIVE:  # fault tests only: the worker loop dies here (voxflow.failpoints)
        failpoints.worker_die((job.state.id, job.state.request.text) for job in batch)
    # built once: its slack is taken before a memory wait (rare: 3 waits in 80 runs at c=8)
    staged = stage_batch(batch, stage, isolated, own) if batch else None
    need = stage.working_set_bytes(staged) if staged is not None else 0
    with GATE.hold(need):  # waits while the runs in progress hold the memory it needs
        started = time.perf_counter()
        outputs = run_safely(stage, batch, isolated, staged)
        for job, out in zip(batch, outputs, strict=True):
            route(stage, job, out, downstream, own)  # StreamedParts are made here, in the hold
    ended = time.perf_counter()
    metrics.stage_seconds.labels(model, stage.name).observe(ended - started)
    if staged is not None and log.isEnabledFor(logging.DEBUG):
        _trace(stage, batch, staged.formed_at or started, started, ended)
    metrics.batch_size.labels(model, stage.name).observe(len(batch))
    metrics.items_run.labels(model, stage.name).inc(len(batch))


def _trace(stage: Stage, batch: list[Job], formed_at: float, started: float,
           ended: float) -> None:
    """One debug line per job of a run: when its batch formed (seconds after its request's
    submission), how long it waited for memory, and how long the run and its routing took,
    for tracing where a request's first audio waited under load (`--set
    server.log_level=debug`)."""
    for job in batch:
        log.debug("stage %s request %s segment %d part %d: formed %.3f s after submission, "
                  "memory wait %.3f s, ran %.3f s", stage.name, job.state.id, job.segment,
                  job.item.part, formed_at - job.state.submitted_at, started - formed_at,
                  ended - started)
