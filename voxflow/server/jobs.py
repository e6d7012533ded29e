"""The long-form job routes (docs/api.md, "Long-form jobs"):

- ``POST /v1/audio/jobs``: a job from text or Markdown (chapters at headings) and the speech
  options; 201 with the job at once.
- ``GET /v1/audio/jobs``: the kept jobs, newest first (``?state=`` keeps those in one state).
- ``GET /v1/audio/jobs/{job_id}``: its state and progress.
- ``GET /v1/audio/jobs/{job_id}/audio``: the audio of a finished job in its format, whole or
  one chapter (``?chapter=N``).
- ``POST /v1/audio/jobs/{job_id}/cancel``: stop it and keep it, ``cancelled``.
- ``DELETE /v1/audio/jobs/{job_id}``: cancel it and delete its files.

The job runner is `voxflow.jobs.manager.JobManager`, on ``app.state.jobs``.
"""

from __future__ import annotations

import asyncio

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, StrictStr

from voxflow.audio.encode import encode_audio
from voxflow.audio.formats import content_type
from voxflow.audio.rates import check_requested_rate, delivered_rate
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import ConflictError, InvalidRequestError, echo
from voxflow.jobs.captions import CaptionWord, webvtt
from voxflow.jobs.manager import JobManager
from voxflow.jobs.runner import times_words
from voxflow.jobs.store import STATES, JobFiles
from voxflow.server.schemas import SpeechOptions
from voxflow.server.voice_sync import refresh_if_unknown


class JobBody(SpeechOptions):
    """Body of ``POST /v1/audio/jobs``: the speech options and the whole text."""

    input: StrictStr = Field(
        description="Plain text or Markdown, up to `jobs.max_chars` (1,000,000 by default) "
        "characters; each Markdown heading starts a chapter."
    )


def job_view(job: JobFiles, manager: JobManager) -> dict:
    """The JSON a job is shown as (``GET /v1/audio/jobs/{id}``)."""
    rate = job.sample_rate
    progress = manager.progress.get(job.id)
    eta = progress.eta_s(job) if progress is not None and job.state == "running" else None
    chapters = []
    start = 0
    for index, chapter in enumerate(job.chapters):
        samples = sum(job.done.get((index, s), 0) for s in range(len(chapter.segments)))
        chapters.append({"index": index, "title": chapter.title, "characters": chapter.chars,
                         "start_seconds": round(start / rate, 3) if rate else 0.0,
                         "audio_seconds": round(samples / rate, 3) if rate else 0.0})
        start += samples
    return {
        "id": job.id, "object": "audio.job", "created_at": int(job.created),
        "state": job.state, "model": job.options["model"], "voice": job.options["voice"],
        "response_format": job.options["response_format"],
        "progress": {
            "characters_done": job.done_chars, "characters_total": job.total_chars,
            "segments_done": len(job.done),
            "segments_total": sum(len(c.segments) for c in job.chapters),
            "audio_seconds": round(job.audio_samples / rate, 3) if rate else 0.0,
            "eta_seconds": None if eta is None else round(eta, 1),
        },
        "chapters": chapters,
        "error": job.error["error"] if job.error else None,
    }


def _manager(request: Request) -> JobManager:
    return request.app.state.jobs


async def create_job(body: JobBody, request: Request) -> JSONResponse:
    """``POST /v1/audio/jobs``: check the options as a speech request would be, then plan,
    store and queue the job; 201 with its view."""
    manager = _manager(request)
    engine: Engine = request.app.state.engine
    if not body.input.strip():
        raise InvalidRequestError("The job's input has nothing to read (only whitespace).",
                                  param="input", code="empty_input")
    check_requested_rate(body.response_format, body.sample_rate)
    await refresh_if_unknown(request.app.state, body.model, body.voice_id)  # replicas
    # the engine's own checks (model, voice, speed, seed, language) on a sample of the text
    sample = SpeechRequest(body.model, body.input[:200], body.voice_id, body.speed, body.seed,
                           language=body.language, instructions=body.instructions or None,
                           lexicon=body.lexicon)
    resolved = engine.resolve(sample)
    engine.prepare(resolved)
    options = {"timestamps": times_words(engine, resolved), "model": resolved.model,
               "voice": resolved.voice, "speed": body.speed,
               "seed": body.seed, "language": body.language,
               "instructions": body.instructions or None, "lexicon": body.lexicon,
               "response_format": body.response_format, "sample_rate": body.sample_rate}
    job = manager.create(body.input, options)
    return JSONResponse(job_view(job, manager), status_code=201)


async def list_jobs(request: Request, state: str | None = None) -> dict:
    """``GET /v1/audio/jobs``: ``{"object": "list", "data": [view, ...]}``, each job as
    `get_job` shows it, newest first; ``?state=`` keeps the jobs in that state (one of
    `STATES`). 400 ``invalid_state`` (param ``state``) for any other state."""
    if state is not None and state not in STATES:
        raise InvalidRequestError(
            f"Unknown job state {echo(state)}; the states are {', '.join(STATES)}.",
            param="state", code="invalid_state")
    manager = _manager(request)
    # newest first; the dict is in creation order, so equal clocks keep the later job first
    jobs = sorted(reversed(manager.jobs.values()), key=lambda j: j.created, reverse=True)
    return {"object": "list",
            "data": [job_view(job, manager) for job in jobs
                     if state is None or job.state == state]}


async def get_job(job_id: str, request: Request) -> dict:
    """``GET /v1/audio/jobs/{job_id}``: the job's view; 404 ``job_not_found``."""
    manager = _manager(request)
    return job_view(manager.get(job_id), manager)


async def get_job_audio(job_id: str, request: Request, chapter: int | None = None) -> Response:
    """``GET /v1/audio/jobs/{job_id}/audio``: a done job's audio in its format (``?chapter=N``:
    that chapter's alone); 409 ``job_not_done`` before, 400 for a chapter it does not have."""
    job = _done_job(_manager(request), job_id, chapter)
    wanted = range(len(job.chapters)) if chapter is None else [chapter]
    fmt = job.options["response_format"]
    native = job.sample_rate or 0  # set: the job is done
    rate = delivered_rate(fmt, native, job.options.get("sample_rate"))

    def encode() -> bytes:
        audio = np.concatenate([job.read_chapter(c) for c in wanted])
        return encode_audio(audio, native, fmt, rate)

    data = await asyncio.to_thread(encode)
    return Response(data, media_type=content_type(fmt, rate),
                    headers={"X-Sample-Rate": str(rate)})


def job_captions(job: JobFiles, chapter: int | None) -> str:
    """The WebVTT of a done job (or of one chapter, its times from the chapter's start)."""
    rate = job.sample_rate or 1
    words: list[CaptionWord] = []
    offset = 0
    for c in range(len(job.chapters)):
        if chapter is not None and c != chapter:
            continue
        for s in range(len(job.chapters[c].segments)):
            base = offset / rate
            words += [CaptionWord(base + w[0], base + w[1], w[2]) for w in job.read_words(c, s)]
            offset += job.done.get((c, s), 0)
    return webvtt(words)


def _done_job(manager: JobManager, job_id: str, chapter: int | None) -> JobFiles:
    job = manager.get(job_id)
    if job.state != "done" or job.sample_rate is None:
        raise ConflictError(f"Job '{job_id}' is {job.state}, not done: its audio is not ready.",
                            param="job_id", code="job_not_done")
    if chapter is not None and not 0 <= chapter < len(job.chapters):
        raise InvalidRequestError(
            f"Job '{job_id}' has chapters 0 to {len(job.chapters) - 1}, not {chapter}.",
            param="chapter", code="invalid_chapter")
    return job


async def get_job_captions(job_id: str, request: Request,
                           chapter: int | None = None) -> Response:
    """``GET /v1/audio/jobs/{job_id}/captions``: a done job's WebVTT captions from its word
    timings (``?chapter=N``: that chapter's); a model that does not time words gives the
    header alone. 409 ``job_not_done`` before, 400 for a chapter it does not have."""
    job = _done_job(_manager(request), job_id, chapter)
    text = await asyncio.to_thread(job_captions, job, chapter)
    return Response(text, media_type="text/vtt; charset=utf-8")


async def cancel_job(job_id: str, request: Request) -> dict:
    """``POST /v1/audio/jobs/{job_id}/cancel``: stop a queued or running job and keep it as
    ``cancelled``; its view. 404 ``job_not_found``, 409 ``job_finished`` (done or failed)."""
    manager = _manager(request)
    return job_view(await manager.cancel(job_id), manager)


async def delete_job(job_id: str, request: Request) -> dict:
    """``DELETE /v1/audio/jobs/{job_id}``: cancel the job if it runs and delete its files."""
    job = await _manager(request).delete(job_id)
    return {"id": job.id, "object": "audio.job.deleted", "deleted": True}


__all__ = ["JobBody", "cancel_job", "create_job", "delete_job", "get_job", "get_job_audio",
           "get_job_captions", "job_captions", "job_view", "list_jobs"]
