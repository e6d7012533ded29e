"""A seeded job whose server is killed with SIGKILL mid-job resumes from its last finished
segment when the server starts again, and its audio is byte for byte that of an uninterrupted
run of the same job."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
from serve_process import Server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "\n\n".join(f"# Part {n}\n\nThis is sentence {n} of a longer text. It goes on a while."
                   for n in range(40))


def sets(tiny_voice_dir: Path, jobs_dir: Path) -> list[str]:
    """``--set`` items: the tiny voice only, jobs on under `jobs_dir`."""
    items = {
        "models.0.options.voices_dir": str(tiny_voice_dir),
        "models.0.options.include_default_voice": "false",
        "models.0.options.default_voice": "tiny",
        "models.0.voice_aliases": "{}",
        "jobs.enabled": "true",
        "jobs.directory": str(jobs_dir),
        "jobs.segment_chars": "50",
    }
    return [f"{k}={v}" for k, v in items.items()]


def wait_for(url: str, job_id: str, done: bool, timeout_s: float = 120) -> dict:
    """Poll until the job is done (`done`), or has finished a segment but not all of them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = httpx.get(f"{url}/v1/audio/jobs/{job_id}").json()
        if done and view["state"] in ("done", "failed"):
            return view
        if not done and view["progress"]["segments_done"] >= 3:
            return view
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} did not get there: {view}")


def manifest_lines(jobs_dir: Path, job_id: str) -> int:
    return len((jobs_dir / job_id / "manifest.txt").read_text().splitlines())


def test_sigkilled_job_resumes_to_the_same_audio(tiny_voice_dir: Path, tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    body = {"model": "piper", "voice": "tiny", "input": TEXT, "response_format": "wav",
            "seed": 1234}
    server = Server(tmp_path, *sets(tiny_voice_dir, jobs_dir))
    try:
        job = httpx.post(f"{server.url}/v1/audio/jobs", json=body).json()
        view = wait_for(server.url, job["id"], done=False)
        server.signal(signal.SIGKILL)
        assert server.wait(30) == -signal.SIGKILL
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    total = view["progress"]["segments_total"]
    finished = manifest_lines(jobs_dir, job["id"])
    assert 3 <= finished < total, f"killed after {finished} of {total} segments"

    server = Server(tmp_path, *sets(tiny_voice_dir, jobs_dir))
    try:
        resumed = wait_for(server.url, job["id"], done=True)
        assert resumed["state"] == "done", resumed
        assert resumed["progress"]["segments_done"] == total
        assert manifest_lines(jobs_dir, job["id"]) == total  # no segment made twice
        audio = httpx.get(f"{server.url}/v1/audio/jobs/{job['id']}/audio").content
        fresh = httpx.post(f"{server.url}/v1/audio/jobs", json=body).json()
        assert wait_for(server.url, fresh["id"], done=True)["state"] == "done"
        uninterrupted = httpx.get(f"{server.url}/v1/audio/jobs/{fresh['id']}/audio").content
    finally:
        server.signal(signal.SIGTERM)
        server.wait(30)
    assert len(audio) > 44
    assert audio == uninterrupted
