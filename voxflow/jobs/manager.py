"""The jobs of one server (or one `voxflow speak --long`): create, look up, cancel, delete, and
run them one after another in the background; unfinished jobs found on disk resume at start."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from voxflow.config import JobsSettings
from voxflow.engine.engine import Engine
from voxflow.errors import (
    ConflictError,
    InvalidRequestError,
    OverloadedError,
    PayloadTooLargeError,
    StorageError,
)
from voxflow.jobs.chapters import split_chapters
from voxflow.jobs.runner import Progress, run_job
from voxflow.jobs.store import FINAL, JobFiles, folder_bytes

log = logging.getLogger(__name__)


class JobNotFoundError(InvalidRequestError):
    """No job has this id (404)."""

    status = 404


class QuotaExceededError(StorageError):
    """The jobs' disk quota (`jobs.disk_quota_bytes`) is used up (507)."""

    def __init__(self, used: int, quota: int):
        super().__init__(f"The jobs' disk quota is full ({used:,} of {quota:,} bytes used): "
                         "delete finished jobs (DELETE /v1/audio/jobs/{id}) and try again.",
                         full=True)
        self.code = "quota_exceeded"


class JobManager:
    """Jobs kept under ``settings.directory``, run by `engine` one at a time.

    Call `start` on the event loop (it resumes unfinished jobs) and `stop` before the engine
    stops (the running segment is abandoned; the job resumes on the next start).
    """

    def __init__(self, settings: JobsSettings, engine: Engine, internal: bool = True):
        if settings.directory is None:
            raise ValueError("jobs.directory is not set")
        self.settings = settings
        self.engine = engine
        self.root: Path = settings.directory
        self.internal = internal
        self.jobs: dict[str, JobFiles] = {}
        self.progress: dict[str, Progress] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._current: tuple[str, asyncio.Task] | None = None

    def start(self) -> None:
        """Load the jobs on disk and queue the unfinished ones, oldest first; start the
        background runner. Call on the event loop."""
        self.root.mkdir(parents=True, exist_ok=True)
        found = []
        for entry in sorted(self.root.iterdir()):
            if entry.is_dir() and (entry / "plan.json").is_file():
                try:
                    found.append(JobFiles.load(entry))
                except (OSError, ValueError, KeyError) as exc:
                    log.warning("job folder %s is unreadable, skipped: %s", entry, exc)
        for job in sorted(found, key=lambda j: j.created):
            self.jobs[job.id] = job
            if job.state not in FINAL:
                self._queue.put_nowait(job.id)
        resumed = sum(1 for j in found if j.state not in FINAL)
        if resumed:
            log.info("jobs: %d unfinished job(s) resume", resumed)
        self._worker = asyncio.create_task(self._run_queue())

    async def stop(self) -> None:
        """Stop the background runner (the job in progress stays resumable)."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None

    def used_bytes(self) -> int:
        """Bytes all jobs' folders take."""
        return sum(folder_bytes(job.root) for job in self.jobs.values())

    def check_quota(self) -> None:
        """Raises `QuotaExceededError` when the jobs take `disk_quota_bytes` or more."""
        used = self.used_bytes()
        if used >= self.settings.disk_quota_bytes:
            raise QuotaExceededError(used, self.settings.disk_quota_bytes)

    def create(self, text: str, options: dict[str, Any]) -> JobFiles:
        """Plan and store a new job and queue it.

        Args:
            text: plain text or Markdown (chapters at headings).
            options: the speech options (checked already by the caller with the engine);
                ``seed`` None draws one, kept with the job so a resume is identical.
        Raises:
            PayloadTooLargeError (413 ``job_too_large``), InvalidRequestError (400: nothing
            to read), OverloadedError (429 ``too_many_jobs``), QuotaExceededError (507).
        """
        if len(text) > self.settings.max_chars:
            raise PayloadTooLargeError(
                f"The job's input is {len(text):,} characters; the most is "
                f"{self.settings.max_chars:,} (jobs.max_chars).", param="input",
                code="job_too_large")
        chapters = split_chapters(text, self.settings.segment_chars)
        if not chapters:
            raise InvalidRequestError("The job's input has nothing to read (only whitespace).",
                                      param="input", code="empty_input")
        if len(self.jobs) >= self.settings.max_jobs:
            too_many = OverloadedError(
                f"{len(self.jobs)} jobs are kept, the most is {self.settings.max_jobs} "
                "(jobs.max_jobs): delete finished ones first.", retry_after=60)
            too_many.code = "too_many_jobs"
            raise too_many
        self.check_quota()
        if options.get("seed") is None:
            options = {**options, "seed": secrets.randbits(63)}
        job = JobFiles.create(self.root / f"job_{uuid.uuid4().hex}", options, chapters,
                              time.time())
        self.jobs[job.id] = job
        self._queue.put_nowait(job.id)
        return job

    def get(self, job_id: str) -> JobFiles:
        """The job `job_id`. Raises `JobNotFoundError` (404)."""
        job = self.jobs.get(job_id)
        if job is None:
            raise JobNotFoundError(f"No job '{job_id}' (it never existed or was deleted).",
                                   param="job_id", code="job_not_found")
        return job

    async def _stop(self, job: JobFiles) -> None:
        """Stop `job` if it is running (the segment being written is finished first) and mark
        it ``cancelled`` if it was not final (in memory only)."""
        if self._current is not None and self._current[0] == job.id:
            task = self._current[1]
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if job.state not in FINAL:
            job.state = "cancelled"

    async def cancel(self, job_id: str) -> JobFiles:
        """Stop job `job_id` and keep it as ``cancelled`` (its finished segments stay on disk,
        and count toward the quota, until it is deleted; a restart does not resume it).
        Cancelling a cancelled job again returns it as it is.

        Raises:
            JobNotFoundError (404); ConflictError (409 ``job_finished``) for a job that is
            ``done`` or ``failed``.
        """
        job = self.get(job_id)
        if job.state in ("done", "failed"):
            raise ConflictError(
                f"Job '{job_id}' is {job.state}: only a queued or running job can be cancelled "
                "(DELETE /v1/audio/jobs/{id} deletes it).", param="job_id", code="job_finished")
        if job.state != "cancelled":
            await self._stop(job)
            await asyncio.to_thread(job.save)
        return job

    async def delete(self, job_id: str) -> JobFiles:
        """Cancel job `job_id` if it is not finished and delete its files.

        Raises:
            JobNotFoundError (404).
        """
        job = self.get(job_id)
        await self._stop(job)
        del self.jobs[job_id]
        await asyncio.to_thread(job.remove)
        return job

    async def _run_queue(self) -> None:
        while True:
            job_id = await self._queue.get()
            job = self.jobs.get(job_id)
            if job is None or job.state in FINAL:
                continue
            progress = self.progress.setdefault(job_id, Progress())
            task = asyncio.create_task(run_job(self.engine, job, progress,
                                               internal=self.internal,
                                               quota_check=self.check_quota))
            self._current = (job_id, task)
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled() or task.done():
                    continue  # the job was deleted; the runner goes on
                task.cancel()  # the runner itself stops
                raise
            except Exception:  # an unexpected error fails the job, not the runner
                log.exception("job %s failed", job_id)
                job.state = "failed"
                job.error = {"error": {"message": "internal error", "type": "server_error",
                                       "param": None, "code": None}}
                job.save()
            finally:
                self._current = None


@asynccontextmanager
async def running_jobs(settings: JobsSettings, engine: Engine,
                       internal: bool = True) -> AsyncIterator[JobManager | None]:
    """A started `JobManager` for the body of the block (None where ``jobs.enabled`` is off),
    stopped on the way out."""
    if not settings.enabled:
        yield None
        return
    manager = JobManager(settings, engine, internal)
    manager.start()
    try:
        yield manager
    finally:
        await manager.stop()
