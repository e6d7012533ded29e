"""Synthesize a job's pending segments through the engine, one at a time, behind interactive
requests.

A job yields to interactive requests twice: before each segment it waits until no other
request is in flight or queued (`Admission`) and none has been for `jobs.quiet_s`, then submits
that one segment as its own background request (`Engine.submit(background=True)`), seeded by
`segment_seed`; the scheduler holds a background request's items while any interactive request
is in the engine (`voxflow.engine.foreground`), so an interactive request that arrives meanwhile
waits for at most the job's run in progress, not its segment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import InvalidRequestError, OverloadedError, VoxflowError
from voxflow.jobs.store import JobFiles, segment_seed

IDLE_POLL_S = 0.05
"""How often a job waiting for the engine to be idle looks again, in seconds."""
SLACK_S = 3600.0
"""A job's segment is submitted as if its listener had this many seconds of audio left
(`Engine.submit`'s `listener_ends_at`): its items are due that late, so the deadline-ordered
stage queues serve every interactive request's items before them."""


@dataclass
class Progress:
    """A running job's rate so far, for its ETA."""

    started: float = 0.0
    chars_at_start: int = 0

    def eta_s(self, job: JobFiles) -> float | None:
        """Seconds left at the rate (characters per second) of this run; None before any."""
        chars = job.done_chars - self.chars_at_start
        spent = time.monotonic() - self.started
        if chars <= 0 or spent <= 0:
            return None
        return (job.total_chars - job.done_chars) / (chars / spent)


def times_words(engine: Engine, request: SpeechRequest) -> bool:
    """Whether the model of `request` (resolved) times the words of its text, so the job can
    keep word timings for captions.

    Raises:
        what `Engine.prepare` raises for `request` itself (bad options).
    """
    if not engine.family(request.model).word_timestamps:
        return False
    try:
        engine.prepare(replace(request, timestamps=True))
    except InvalidRequestError as exc:
        if exc.code == "timestamps_unsupported":  # not in this language (Kokoro's Japanese)
            return False
        raise
    return True


TRAILING = frozenset(".,;:!?)\"'»”’…")
"""Punctuation a caption keeps after a word (a word's span in the input stops before it)."""


def caption_text(text: str, start: int, end: int) -> str:
    """The word at ``text[start:end]`` with the punctuation right after it (``one.``), for
    captions that read as the text does."""
    while end < len(text) and text[end] in TRAILING:
        end += 1
    return text[start:end]


async def wait_for_idle(engine: Engine) -> None:
    """Return once the engine holds no request (in flight or queued) and has had no
    interactive one for `jobs.quiet_s` (`Engine.foreground`)."""
    while engine.admission.outstanding > 0 or engine.foreground.busy:
        await asyncio.sleep(IDLE_POLL_S)


async def synthesize_segment(engine: Engine, job: JobFiles, chapter: int, segment: int,
                             internal: bool) -> tuple[np.ndarray, int, list[list] | None]:
    """One segment's audio: ``((N,) float32, sample rate Hz, words)``; `words` (where the
    job's ``timestamps`` option is on) ``[start_s, end_s, text]`` per word, else None.

    Raises:
        what `Engine.submit` raises (but `OverloadedError`: it waits and tries again), and the
        stream's error.
    """
    opts = job.options
    text = job.chapters[chapter].segments[segment]
    timed = bool(opts.get("timestamps"))
    request = SpeechRequest(
        opts["model"], text, opts["voice"], opts["speed"],
        segment_seed(opts["seed"], chapter, segment), language=opts.get("language"),
        instructions=opts.get("instructions") or None, timestamps=timed,
        lexicon=opts.get("lexicon"),
    )
    while True:
        await wait_for_idle(engine)
        try:
            stream = engine.submit(request, internal=internal, background=True,
                                   listener_ends_at=time.perf_counter() + SLACK_S)
            break
        except OverloadedError:
            await asyncio.sleep(IDLE_POLL_S)
    chunks, words = [], []
    async with stream:
        async for chunk in stream:
            chunks.append(chunk.samples)
            words += [[w.start, w.end, caption_text(text, w.text_start, w.text_end)]
                      for w in chunk.words]
    audio = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    return audio, stream.sample_rate, words if timed else None


async def run_job(engine: Engine, job: JobFiles, progress: Progress,
                  on_segment: Callable[[], None] | None = None, internal: bool = True,
                  quota_check: Callable[[], None] | None = None) -> None:
    """Synthesize `job`'s pending segments in order, each stored as it finishes; sets the
    state to ``running`` then ``done``. A `VoxflowError` of a segment fails the job (state
    ``failed``, its error kept); cancellation (`asyncio.CancelledError`) leaves the state as it
    is, so a restart resumes the job.

    Args:
        on_segment: called after each stored segment (a progress bar).
        quota_check: called before each segment; raises to fail the job (a full quota).
    """

    job.state = "running"
    job.save()
    progress.started, progress.chars_at_start = time.monotonic(), job.done_chars
    try:
        for chapter, segment in job.pending():
            if quota_check is not None:
                quota_check()
            audio, rate, words = await synthesize_segment(engine, job, chapter, segment,
                                                          internal)
            if job.sample_rate is None:
                job.sample_rate = rate
                job.save()
            write = asyncio.ensure_future(
                asyncio.to_thread(job.write_segment, chapter, segment, audio, words))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                await write  # the write ends before the job stops: a delete comes next
                raise
            if on_segment is not None:
                on_segment()
    except VoxflowError as exc:
        job.state, job.error = "failed", exc.to_dict()
        job.save()
        return
    job.state = "done"
    job.save()
