"""Issue 40 item 5, the fault matrix's cases that fit CI time (benchmarks/faults.py runs them
all and prints the table in docs/benchmarks.md): a stage that raises for one request, a worker
thread that dies (`voxflow.failpoints`), SIGKILL with streams in flight and the saved voices
after the restart, SIGINT when idle, the memory budget exhausted, and a client that disconnects
while queued, at its first audio and mid-stream. SIGTERM and SIGINT with load are
test_graceful_stop.py's. Real `voxflow serve` subprocesses (the default Piper voice)."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from serve_process import Server

from voxflow.bench.scrape import metric

pytestmark = pytest.mark.integration

SENTENCE = "The little red kite circled twice above the harbor before settling on the mast. "
SHORT = SENTENCE * 3  # about 13 s of audio
LONG = SENTENCE * 40  # minutes of audio
PCM_BYTES_S = 22050 * 2  # joe: 22.05 kHz, 16-bit mono
FAILPOINTS = {"VOXFLOW_FAILPOINTS": "stage_raise=FAULT-RAISE@acoustic;worker_die=FAULT-DIE"}


def speech(text: str, **extra) -> dict:
    return {"model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
            "stream": True, **extra}


class Client(threading.Thread):
    """A streamed request read to its end: `status`, `nbytes`, `ended` ("complete", "cut" or
    the error code), `seconds` from start to end, `ended_at` (monotonic s), `first` set at the
    first audio."""

    def __init__(self, url: str, body: dict, request_id: str | None = None):
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.headers = {"X-Request-Id": request_id} if request_id else {}
        self.first = threading.Event()
        self.status: int | None = None
        self.nbytes, self.ended, self.seconds, self.ended_at = 0, "", 0.0, 0.0
        self.start()

    def run(self) -> None:
        started = time.monotonic()
        try:
            with httpx.stream("POST", f"{self.url}/v1/audio/speech", json=self.body,
                              headers=self.headers, timeout=120) as r:
                self.status = r.status_code
                if r.status_code != 200:
                    r.read()
                    error = r.json()["error"]
                    assert set(error) == {"message", "type", "param", "code"}
                    self.ended = error["code"]
                else:
                    try:
                        for piece in r.iter_raw():
                            self.nbytes += len(piece)
                            self.first.set()
                        self.ended = "complete"
                    except httpx.RemoteProtocolError:
                        self.ended = "cut"
        finally:
            self.ended_at = time.monotonic()
            self.seconds = self.ended_at - started
            self.first.set()


def family(pid: int) -> list[int]:
    """`pid` and its children's pids, recursively."""
    return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def stop(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture(scope="module")
def failpoint_server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("failpoints"), env=FAILPOINTS)
    yield server
    stop(server)


def test_a_stage_that_raises_fails_its_request_at_once_and_no_other(failpoint_server):
    url = failpoint_server.url
    other = Client(url, speech(SHORT))
    marked = Client(url, speech(f"FAULT-RAISE {SENTENCE}"), request_id="stage-raise")
    marked.join(60)
    other.join(60)
    assert (marked.status, marked.ended) == (500, "synthesis_failed")
    assert marked.seconds < 10  # at once, not at the 120 s request timeout
    assert (other.status, other.ended) == (200, "complete")
    assert other.nbytes > 10 * PCM_BYTES_S  # the whole reading
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ready" and "worker_restarts" not in health["models"]["piper"]
    log = failpoint_server.log.read_text()
    assert "ERROR   voxflow.engine.worker: stage acoustic failed on request stage-raise" in log
    assert "FailpointError: failpoint stage_raise in stage 'acoustic'" in log


def test_a_worker_thread_that_dies_fails_its_batch_at_once_and_is_restarted(failpoint_server):
    url = failpoint_server.url
    other = Client(url, speech(SHORT))
    marked = Client(url, speech(f"FAULT-DIE {SENTENCE}"), request_id="worker-die")
    marked.join(60)
    other.join(60)
    assert (marked.status, marked.ended) == (500, "worker_died")
    assert marked.seconds < 10  # before supervision: 504 after the 120 s timeout
    assert (other.status, other.ended) == (200, "complete")
    assert other.nbytes > 10 * PCM_BYTES_S
    # Piper's front end has one worker: before supervision every later request timed out
    after = Client(url, speech(SHORT))
    after.join(60)
    assert (after.status, after.ended) == (200, "complete") and after.nbytes > 10 * PCM_BYTES_S
    health = httpx.get(f"{url}/health")
    assert health.status_code == 200 and health.json()["status"] == "ready"
    restarts = health.json()["models"]["piper"]["worker_restarts"]
    assert restarts["frontend"]["restarts"] == 1
    assert restarts["frontend"]["last"].startswith("piper-frontend-0: WorkerDeath: failpoint")
    assert metric(url, "voxflow_worker_restarts_total", model="piper", stage="frontend") == 1
    log = failpoint_server.log.read_text()
    assert ("ERROR   voxflow.engine.supervisor: worker thread piper-frontend-0 of model piper "
            "stage frontend died (WorkerDeath)") in log
    assert "Traceback (most recent call last)" in log


def saved_voices_config(folder: Path) -> Path:
    path = folder / "faults.yaml"
    path.write_text(yaml.safe_dump({"models": [
        {"name": "piper", "family": "piper",
         "options": {"include_default_voice": True, "default_voice": "joe"}},
        {"name": "cosyvoice3", "family": "cosyvoice3", "voice_aliases": {},
         "options": {"weights": "tiny_fixture", "saved_voices_dir": str(folder / "voices")}},
    ]}))
    return path


def test_sigkill_with_streams_cuts_them_leaves_no_process_and_saved_voices_come_back(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tiktoken")
    from voxflow.models.cosyvoice3.voice_admin import tensor_bytes
    from voxflow.models.cosyvoice3.voices import tiny_voice

    config = saved_voices_config(tmp_path)
    server = Server(tmp_path, config=config)
    try:
        voice = tiny_voice(Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3")
        features = tensor_bytes(voice.tensors(), voice.metadata())
        for name in ("ada", "bo"):
            made = httpx.post(f"{server.url}/v1/audio/voices",
                              data={"name": name, "model": "cosyvoice3"},
                              files={"features": ("v.safetensors", features)}, timeout=60)
            assert made.status_code == 200, made.text
        streams = [Client(server.url, speech(LONG)) for _ in range(2)]
        for s in streams:
            assert s.first.wait(60)
        pids = family(server.proc.pid)
        killed_at = time.monotonic()
        server.signal(signal.SIGKILL)
        for s in streams:
            s.join(30)
        assert [(s.status, s.ended) for s in streams] == [(200, "cut")] * 2
        assert max(s.ended_at for s in streams) - killed_at < 5  # cut at once
        assert server.wait(10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(pids) == []
    finally:
        stop(server)
    again = Server(tmp_path, config=config)
    try:
        listed = httpx.get(f"{again.url}/v1/audio/voices", params={"model": "cosyvoice3"})
        ids = {v["id"] for v in listed.json()["data"]}
        assert {"random-ada", "random-bo"} <= ids
        for name in ("ada", "bo"):
            r = httpx.post(f"{again.url}/v1/audio/speech", timeout=120, json={
                "model": "cosyvoice3", "voice": f"random-{name}", "input": "A saved voice.",
                "response_format": "pcm", "stream": False, "seed": 1})
            assert r.status_code == 200 and len(r.content) > 0
    finally:
        stop(again)


def test_sigint_when_idle_exits_0_at_once_and_leaves_no_process(tmp_path):
    server = Server(tmp_path)
    pids = family(server.proc.pid)
    started = time.monotonic()
    server.signal(signal.SIGINT)
    assert server.wait(30) == 0
    assert time.monotonic() - started < 10
    assert alive(pids) == []
    assert "SIGINT: draining (0 requests or sessions, 0 engine requests in flight)" in \
        server.log.read_text()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health")


def test_with_the_memory_budget_exhausted_runs_wait_their_turn_and_all_complete(tmp_path):
    server = Server(tmp_path, "engine.memory_headroom_mb=0")
    try:
        clients = [Client(server.url, speech(SHORT)) for _ in range(3)]
        for c in clients:
            c.join(120)
        assert [(c.status, c.ended) for c in clients] == [(200, "complete")] * 3
        assert all(c.nbytes > 10 * PCM_BYTES_S for c in clients)
        assert metric(server.url, "voxflow_memory_waits_total") > 0  # each run waited its turn
        assert httpx.get(f"{server.url}/health").json()["status"] == "ready"
        assert re.search(r"memory: models \{'piper': \d+\} MiB, audio cache \d+ MiB, budget \d+ "
                         r"MiB, runs' working sets 0 MiB", server.log.read_text())
    finally:
        stop(server)


@pytest.fixture(scope="module")
def one_slot_server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("one_slot"), "engine.max_inflight_requests=1")
    yield server
    stop(server)


def raw_stream(port: int, text: str, request_id: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    body = json.dumps(speech(text)).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: voxflow\r\n"
                 b"Content-Type: application/json\r\n"
                 + f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    sock.settimeout(60)
    return sock


def counts(url: str) -> tuple[int, int]:
    body = httpx.get(f"{url}/health").json()
    return body["inflight_requests"], body["waiting_requests"]


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("phase", ["queued", "first_audio", "mid_stream"])
def test_a_client_gone_at_any_phase_is_cancelled_at_once_and_others_finish(one_slot_server,
                                                                           phase):
    url = one_slot_server.url
    cancelled = metric(url, "voxflow_cancellations_total", model="piper", reason="client")
    holder = Client(url, speech(SENTENCE * 8))  # holds the one slot for a few seconds
    assert holder.first.wait(60)
    sock = raw_stream(one_slot_server.port, LONG, f"gone-{phase}")
    if phase == "queued":
        assert wait_until(lambda: counts(url)[1] == 1, 30)  # waits for the slot
    else:  # read the first audio, or 4 s of it
        want, got = (1 if phase == "first_audio" else 4 * PCM_BYTES_S), 0
        while got < want:
            got += len(sock.recv(65536))
    sock.close()
    gone_at = time.monotonic()
    # nothing of it in flight or waiting (the holder may still be streaming), and counted
    assert wait_until(lambda: counts(url) == (1 if holder.is_alive() else 0, 0), 10)
    assert wait_until(lambda: metric(url, "voxflow_cancellations_total", model="piper",
                                     reason="client") == cancelled + 1, 10)
    assert time.monotonic() - gone_at < 10
    holder.join(60)
    assert (holder.status, holder.ended) == (200, "complete")
    assert holder.nbytes > 30 * PCM_BYTES_S

    def access_line() -> str | None:
        return next((x for x in one_slot_server.log.read_text().splitlines()
                     if f"request_id=gone-{phase} " in x), None)

    # a queued one's handler ends (and logs) only once a slot frees: when the holder ends
    assert wait_until(lambda: access_line() is not None, 10)
    line = access_line()
    if phase == "queued":  # no response began: 499, nothing cut
        assert " status=499 " in line and " audio_s=0.0 " in line, line
    else:
        assert " status=200 " in line and " complete=false " in line, line
