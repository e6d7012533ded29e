"""Long-form jobs through the served app on the tiny Piper voice: create, poll, download,
chapters, cancel, and bad input in the OpenAI error shape."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import LiveServer, start_server

pytestmark = pytest.mark.integration

BOOK = """Intro words before any heading.

# Chapter one

The first chapter has two sentences. Here is the second one.

## Chapter two

A short second chapter.
"""


def tiny_overrides(tiny_voice_dir: Path, jobs_dir: Path, **jobs) -> dict:
    """Settings overrides: only the tiny voice, jobs on under `jobs_dir`."""
    return {
        "models.0.options.voices_dir": str(tiny_voice_dir),
        "models.0.options.include_default_voice": False,
        "models.0.options.default_voice": "tiny",
        "models.0.voice_aliases": {},
        "jobs.enabled": True,
        "jobs.directory": str(jobs_dir),
        "jobs.segment_chars": 60,
        **{f"jobs.{k}": v for k, v in jobs.items()},
    }


@pytest.fixture(scope="module")
def server(tiny_voice_dir: Path, tmp_path_factory) -> Iterator[LiveServer]:
    jobs_dir = tmp_path_factory.mktemp("jobs")
    live = start_server(tiny_overrides(tiny_voice_dir, jobs_dir, max_chars=2000, max_jobs=3))
    yield live
    live.stop()


def wait_done(url: str, job_id: str, timeout_s: float = 60) -> dict:
    """Poll a job until it is final; its last view."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = httpx.get(f"{url}/v1/audio/jobs/{job_id}").json()
        if view["state"] in ("done", "failed", "cancelled"):
            return view
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} not done: {view}")


def create(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/jobs", json={
        "model": "piper", "voice": "tiny", "input": BOOK, "response_format": "pcm",
        "sample_rate": "native", "seed": 7, **body})


def test_job_runs_to_done_with_chapters_and_audio(server: LiveServer) -> None:
    r = create(server.url)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["object"] == "audio.job" and job["id"].startswith("job_")
    assert [c["title"] for c in job["chapters"]] == ["", "Chapter one", "Chapter two"]
    view = wait_done(server.url, job["id"])
    assert view["state"] == "done", view
    progress = view["progress"]
    assert progress["characters_done"] == progress["characters_total"] > 0
    assert progress["segments_done"] == progress["segments_total"] == 4
    whole = httpx.get(f"{server.url}/v1/audio/jobs/{job['id']}/audio")
    assert whole.status_code == 200
    rate = int(whole.headers["x-sample-rate"])
    assert abs(len(whole.content) / 2 / rate - progress["audio_seconds"]) < 0.01
    parts = [httpx.get(f"{server.url}/v1/audio/jobs/{job['id']}/audio",
                       params={"chapter": i}).content for i in range(3)]
    assert b"".join(parts) == whole.content
    assert all(len(p) > 0 for p in parts)
    marks = [c["start_seconds"] for c in view["chapters"]]
    assert marks[0] == 0.0 and marks[0] < marks[1] < marks[2] < progress["audio_seconds"]
    vtt = httpx.get(f"{server.url}/v1/audio/jobs/{job['id']}/captions")
    assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    lines = vtt.text.splitlines()
    assert lines[0] == "WEBVTT"
    spoken = " ".join(line for line in lines[2:] if line and "-->" not in line)
    assert spoken.startswith("Intro words before any heading.")
    assert "second one." in spoken and spoken.endswith("second chapter.")
    chapter_two = httpx.get(f"{server.url}/v1/audio/jobs/{job['id']}/captions",
                            params={"chapter": 2}).text
    assert chapter_two.splitlines()[2].startswith("00:00:00.")
    # a seeded job gives the same audio again
    again = wait_done(server.url, create(server.url).json()["id"])
    assert httpx.get(f"{server.url}/v1/audio/jobs/{again['id']}/audio").content == whole.content
    for j in (job["id"], again["id"]):
        assert httpx.delete(f"{server.url}/v1/audio/jobs/{j}").json()["deleted"] is True


def test_unknown_job_is_404_in_openai_shape(server: LiveServer) -> None:
    for method, path in (("GET", "job_nope"), ("GET", "job_nope/audio"),
                         ("GET", "job_nope/captions"), ("POST", "job_nope/cancel"),
                         ("DELETE", "job_nope")):
        r = httpx.request(method, f"{server.url}/v1/audio/jobs/{path}")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "job_not_found"
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_oversized_job_is_413(server: LiveServer) -> None:
    r = create(server.url, input="word " * 500)  # 2,500 characters, the limit is 2,000
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "job_too_large"
    assert "2,500 characters; the most is 2,000" in r.json()["error"]["message"]


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"speed": 9.0}, 400, "speed"),
    ({"voice": "nobody"}, 400, "voice"),
    ({"model": "nope"}, 404, "model"),
    ({"input": "   \n  "}, 400, "input"),
    ({"response_format": "ogg"}, 400, "response_format"),
    ({"stream": True}, 400, "stream"),
    ({"seed": -1}, 400, "seed"),
    ({"input": 5}, 400, "input"),
    ({"lexicon": "nowhere"}, 400, "lexicon"),
])
def test_bad_options_are_4xx(server: LiveServer, body: dict, status: int, param: str) -> None:
    r = create(server.url, **body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_too_many_jobs_is_429_and_delete_frees_a_place(server: LiveServer) -> None:
    ids = [create(server.url).json()["id"] for _ in range(3)]
    r = create(server.url)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "too_many_jobs"
    deleted = httpx.delete(f"{server.url}/v1/audio/jobs/{ids[-1]}")
    assert deleted.status_code == 200
    assert httpx.get(f"{server.url}/v1/audio/jobs/{ids[-1]}").status_code == 404
    r = create(server.url)
    assert r.status_code == 201
    for j in [*ids[:-1], r.json()["id"]]:
        httpx.delete(f"{server.url}/v1/audio/jobs/{j}")


def test_chapter_out_of_range_is_400(server: LiveServer) -> None:
    job_id = create(server.url).json()["id"]
    wait_done(server.url, job_id)
    r = httpx.get(f"{server.url}/v1/audio/jobs/{job_id}/audio", params={"chapter": 3})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_chapter"
    assert "chapters 0 to 2, not 3" in r.json()["error"]["message"]
    httpx.delete(f"{server.url}/v1/audio/jobs/{job_id}")


def test_audio_before_done_is_409(server: LiveServer) -> None:
    # a long job: its audio is asked for at once
    r = create(server.url, input="A sentence to read. " * 90)
    job_id = r.json()["id"]
    audio = httpx.get(f"{server.url}/v1/audio/jobs/{job_id}/audio")
    assert audio.status_code == 409
    assert audio.json()["error"]["code"] == "job_not_done"
    assert httpx.delete(f"{server.url}/v1/audio/jobs/{job_id}").status_code == 200


def test_deleting_a_running_job_cancels_it_and_the_next_job_runs(
        server: LiveServer, tmp_path: Path) -> None:
    long_id = create(server.url, input="A sentence to read. " * 90).json()["id"]
    deadline = time.monotonic() + 30
    while httpx.get(f"{server.url}/v1/audio/jobs/{long_id}").json()["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    folder = server.app.state.jobs.root / long_id
    assert folder.is_dir()
    assert httpx.delete(f"{server.url}/v1/audio/jobs/{long_id}").status_code == 200
    assert not folder.exists()
    assert httpx.get(f"{server.url}/v1/audio/jobs/{long_id}").status_code == 404
    short = create(server.url).json()["id"]
    assert wait_done(server.url, short)["state"] == "done"
    httpx.delete(f"{server.url}/v1/audio/jobs/{short}")


def test_cancelled_job_is_kept_listed_and_not_resumed(tiny_voice_dir: Path,
                                                      tmp_path: Path) -> None:
    """POST .../cancel stops a running job and keeps it (state, finished segments, files);
    a queued one is cancelled before it starts; a restart resumes neither."""
    live = start_server(tiny_overrides(tiny_voice_dir, tmp_path, max_jobs=5))
    try:
        jobs_url = f"{live.url}/v1/audio/jobs"
        running = create(live.url, input="A sentence to read. " * 90).json()["id"]
        queued = create(live.url, input="A sentence to read. " * 90).json()["id"]
        # the runner takes one job at a time, oldest first: `queued` waits for `running`
        first = httpx.post(f"{jobs_url}/{queued}/cancel").json()
        assert (first["state"], first["progress"]["segments_done"]) == ("cancelled", 0)
        deadline = time.monotonic() + 30
        while httpx.get(f"{jobs_url}/{running}").json()["progress"]["segments_done"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        cancelled = httpx.post(f"{jobs_url}/{running}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        view = cancelled.json()
        assert view["state"] == "cancelled" and view["object"] == "audio.job"
        done = view["progress"]["segments_done"]
        assert 2 <= done < view["progress"]["segments_total"]
        # cancelling again answers the job as it is; nothing runs any more
        time.sleep(0.3)
        assert httpx.post(f"{jobs_url}/{running}/cancel").json() == view
        assert [v["id"] for v in httpx.get(jobs_url, params={"state": "cancelled"}).json()[
            "data"]] == [queued, running]
        assert httpx.get(jobs_url, params={"state": "running"}).json()["data"] == []
        audio = httpx.get(f"{jobs_url}/{running}/audio")
        assert audio.status_code == 409 and audio.json()["error"]["code"] == "job_not_done"
        assert (live.app.state.jobs.root / running).is_dir()
    finally:
        live.stop()
    again = start_server(tiny_overrides(tiny_voice_dir, tmp_path, max_jobs=5))
    try:
        time.sleep(0.3)
        views = {v["id"]: v for v in httpx.get(f"{again.url}/v1/audio/jobs").json()["data"]}
        assert {j: (v["state"], v["progress"]["segments_done"]) for j, v in views.items()} == {
            running: ("cancelled", done), queued: ("cancelled", 0)}
        short = create(again.url).json()["id"]
        assert wait_done(again.url, short)["state"] == "done"
        finished = httpx.post(f"{again.url}/v1/audio/jobs/{short}/cancel")
        assert finished.status_code == 409
        error = finished.json()["error"]
        assert (error["code"], error["param"]) == ("job_finished", "job_id")
        assert error["message"] == (f"Job '{short}' is done: only a queued or running job can "
                                    "be cancelled (DELETE /v1/audio/jobs/{id} deletes it).")
        assert httpx.delete(f"{again.url}/v1/audio/jobs/{running}").status_code == 200
        assert not (tmp_path / running).exists()
    finally:
        again.stop()


def test_full_quota_is_507_in_openai_shape(tiny_voice_dir: Path, tmp_path: Path) -> None:
    live = start_server(tiny_overrides(tiny_voice_dir, tmp_path, disk_quota_bytes=1))
    try:
        first = create(live.url)
        assert first.status_code == 201  # nothing stored yet
        r = create(live.url)
        assert r.status_code == 507
        error = r.json()["error"]
        assert error["code"] == "quota_exceeded"
        assert "jobs' disk quota is full" in error["message"]
        failed = wait_done(live.url, first.json()["id"])
        # its plan and state files already take the byte: it fails before its first segment
        assert failed["state"] == "failed"
        assert failed["error"]["code"] == "quota_exceeded"
    finally:
        live.stop()


def test_list_is_newest_first_in_the_job_shape_and_filters_by_state(
        tiny_voice_dir: Path, tmp_path: Path) -> None:
    live = start_server(tiny_overrides(tiny_voice_dir, tmp_path, max_jobs=5))
    try:
        jobs_url = f"{live.url}/v1/audio/jobs"
        assert httpx.get(jobs_url).json() == {"object": "list", "data": []}
        first = create(live.url).json()["id"]
        wait_done(live.url, first)
        second = create(live.url, input="Another text to read.").json()["id"]
        wait_done(live.url, second)
        listed = httpx.get(jobs_url)
        assert listed.status_code == 200
        assert listed.json() == {"object": "list", "data": [
            httpx.get(f"{jobs_url}/{j}").json() for j in (second, first)]}
        assert [v["id"] for v in httpx.get(jobs_url, params={"state": "done"}).json()["data"]
                ] == [second, first]
        # a long job: not done while the list is read at once
        running = create(live.url, input="A sentence to read. " * 90).json()["id"]
        assert [v["id"] for v in httpx.get(jobs_url).json()["data"]] == [running, second, first]
        assert [v["id"] for v in httpx.get(jobs_url, params={"state": "done"}).json()["data"]
                ] == [second, first]
        for state in ("failed", "cancelled"):
            assert httpx.get(jobs_url, params={"state": state}).json()["data"] == []
        for bad in ("finished", "DONE", ""):
            r = httpx.get(jobs_url, params={"state": bad})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert (error["param"], error["code"]) == ("state", "invalid_state")
            assert error["message"] == (f"Unknown job state '{bad}'; the states are queued, "
                                        "running, done, failed, cancelled.")
        for j in (running, second, first):
            assert httpx.delete(f"{jobs_url}/{j}").status_code == 200
        assert httpx.get(jobs_url).json()["data"] == []
    finally:
        live.stop()
