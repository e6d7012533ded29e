"""The fault matrix (issue 40 item 5, after vLLM-Omni's weekly one): what clients, `/health`
and the log show when the server is signalled or killed, a stage raises, a worker thread dies,
the memory budget is exhausted, or a client disconnects. Linux only (psutil or ``/proc``).

Run from the repository root (about five minutes on 2 cores; needs the test extras for the
CosyVoice3 tiny model that holds the saved voices):

    .venv/bin/python benchmarks/faults.py [--clients 4] [--only SIGTERM ...]

Each case runs against real `voxflow serve` subprocesses:

- SIGINT, SIGTERM, SIGKILL, each idle and with `clients` streamed Piper requests in flight
  (each past its first audio when the signal is sent): a server of the default Piper voice
  and the tiny CosyVoice3 model with three saved voices; after the process is gone it is
  started again on the same saved-voices folder, and each saved voice must be listed and
  speak (200, audio).
- ``stage_raise`` and ``worker_die`` failpoints (`voxflow.failpoints`): one request whose
  input holds the marker, one ordinary request sent with it.
- the memory budget exhausted: ``engine.memory_headroom_mb=0`` (no room for any run's working
  set: each runs alone), `clients` requests at once.
- a client that disconnects while queued (``engine.max_inflight_requests=1``, another request
  holding the slot), at its first audio, and mid-stream (after 4 s of audio).

For each it measures what the clients in flight saw (status, body complete or cut, error code)
and within how many seconds of the fault, `/health` during (0.3 s after) and after, the log
line the fault left, whether the server process and its children are gone once it exits (the
non-signal cases: at their SIGTERM at the end), and the saved voices after the restart, then
prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voxflow.bench.arms import free_port  # noqa: E402
from voxflow.bench.scrape import metric  # noqa: E402

SENTENCE = "The little red kite circled twice above the harbor before settling on the mast. "
SHORT = SENTENCE * 3  # about 13 s of audio: a few seconds of synthesis
LONG = SENTENCE * 40  # minutes of audio
VOICES = ("ada", "bo", "cy")  # saved CosyVoice3 voices, served as random-NAME
PCM_BYTES_S = 22050 * 2  # joe: 22.05 kHz 16-bit mono


class Serve:
    """`voxflow serve` in a subprocess on a free port, its output in `log`."""

    def __init__(self, folder: Path, name: str, *sets: str, config: Path | None = None,
                 env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / f"{name}.log"
        argv = [sys.executable, "-m", "voxflow", "serve", "--port", str(self.port)]
        if config is not None:
            argv += ["--config", str(config)]
        for item in sets:
            argv += ["--set", item]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"voxflow serve exited {self.proc.returncode}: {self.log}")
            if health(self.url).startswith("200"):
                return
            time.sleep(0.3)
        self.proc.kill()
        raise SystemExit(f"voxflow serve not ready in 240 s: {self.log}")

    def family(self) -> list[int]:
        """The server's pid and its children's (recursively)."""
        try:
            proc = psutil.Process(self.proc.pid)
            return [proc.pid] + [c.pid for c in proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> tuple[int, float, str]:
        """Signal it, wait for its exit: (exit code, seconds to exit, orphans left)."""
        pids = self.family()
        started = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return code, time.monotonic() - started, orphans(pids)

    def line(self, pattern: str, fields: tuple[str, ...] = ()) -> str:
        """The first log line matching `pattern` (its logger's text, cut; with `fields`, only
        those ``key=value`` fields of it), or "(none)"."""
        for text in self.log.read_text(errors="replace").splitlines():
            if re.search(pattern, text):
                body = re.sub(r"^\S+ \S+ +\w+ +[\w.]+: ", "", text)
                if fields:
                    body = " ".join(f for f in body.split() if f.split("=")[0] in fields)
                return body if len(body) <= 90 else body[:87] + "..."
        return "(none)"


def orphans(pids: list[int], wait_s: float = 10) -> str:
    """"none" once every pid of `pids` is gone (zombies reaped count as gone), else the live
    ones after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p)
                 and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return f"none ({len(pids)} pid{'s' if len(pids) > 1 else ''} gone)"
        if time.monotonic() > deadline:
            return "LEFT: " + " ".join(map(str, alive))
        time.sleep(0.2)


def health(url: str) -> str:
    """`/health` as "STATUS status[, restarts]", or "refused"."""
    try:
        r = httpx.get(f"{url}/health", timeout=5)
    except httpx.HTTPError as exc:
        return "refused" if isinstance(exc, httpx.ConnectError) else type(exc).__name__
    body = r.json()
    restarts = [f"{stage} x{d['restarts']}" for m in body.get("models", {}).values()
                for stage, d in m.get("worker_restarts", {}).items()]
    return f"{r.status_code} {body.get('status')}" + (
        f", worker_restarts {' '.join(restarts)}" if restarts else "")


@dataclass
class Outcome:
    """What one client saw: status, body bytes, how it ended and when (monotonic s)."""

    status: int | None = None
    nbytes: int = 0
    ended: str = ""  # "complete", "cut", an error code, or the exception's name
    at: float = 0.0

    def short(self) -> str:
        if self.status is None:
            return self.ended
        return f"{self.status} {self.ended}"


def speech(text: str, **extra: object) -> dict:
    return {"model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
            "stream": True, **extra}


def client(url: str, body: dict, first: threading.Event, out: Outcome) -> None:
    """POST `body` streamed, reading to the end; `first` set at the first audio bytes."""
    try:
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=180) as r:
            out.status = r.status_code
            if r.status_code != 200:
                r.read()
                out.ended = r.json()["error"]["code"]
            else:
                try:
                    for piece in r.iter_raw():
                        out.nbytes += len(piece)
                        first.set()
                    out.ended = "complete"
                except httpx.HTTPError:
                    out.ended = "cut"
    except httpx.HTTPError as exc:
        out.ended = type(exc).__name__
    out.at = time.monotonic()
    first.set()


def launch(url: str, bodies: list[dict]) -> tuple[list[Outcome], list[threading.Event],
                                                  list[threading.Thread]]:
    outs = [Outcome() for _ in bodies]
    firsts = [threading.Event() for _ in bodies]
    threads = [threading.Thread(target=client, args=(url, b, e, o), daemon=True)
               for b, e, o in zip(bodies, firsts, outs, strict=True)]
    for t in threads:
        t.start()
    return outs, firsts, threads


def summary(outs: list[Outcome], label: str = "") -> str:
    """"4/4 200 complete (15.0 s audio each)"-like, by distinct outcome."""
    kinds: dict[str, int] = {}
    for o in outs:
        kinds[o.short()] = kinds.get(o.short(), 0) + 1
    text = ", ".join(f"{n}/{len(outs)} {k}" for k, n in kinds.items())
    return f"{label}{text}"


@dataclass
class Row:
    case: str
    clients: str
    within_s: str
    health: str
    log: str
    orphans: str
    voices: str


def saved_voices_config(folder: Path, voices_dir: Path) -> Path:
    """The default Piper voice and the tiny CosyVoice3 model saving voices in `voices_dir`."""
    path = folder / "faults.yaml"
    path.write_text(yaml.safe_dump({"models": [
        {"name": "piper", "family": "piper",
         "options": {"include_default_voice": True, "default_voice": "joe"}},
        {"name": "cosyvoice3", "family": "cosyvoice3", "voice_aliases": {},
         "options": {"weights": "tiny_fixture", "saved_voices_dir": str(voices_dir)}},
    ]}))
    return path


def create_voices(url: str) -> None:
    """Save `VOICES` from the tiny fixture voice's feature file."""
    from voxflow.models.cosyvoice3.voice_admin import tensor_bytes
    from voxflow.models.cosyvoice3.voices import tiny_voice

    voice = tiny_voice(ROOT / "tests" / "fixtures" / "cosyvoice3")
    features = tensor_bytes(voice.tensors(), voice.metadata())
    for name in VOICES:
        r = httpx.post(f"{url}/v1/audio/voices", data={"name": name, "model": "cosyvoice3"},
                       files={"features": ("v.safetensors", features)}, timeout=60)
        if r.status_code != 200:
            raise SystemExit(f"saving voice {name}: {r.status_code} {r.text}")


def voices_served(url: str) -> str:
    """How many of `VOICES` are listed and speak (200 with audio)."""
    data = httpx.get(f"{url}/v1/audio/voices", params={"model": "cosyvoice3"}, timeout=30)
    ids = {v["id"] for v in data.json()["data"]}
    listed = sum(f"random-{n}" in ids for n in VOICES)
    served = 0
    for name in VOICES:
        r = httpx.post(f"{url}/v1/audio/speech", timeout=120, json={
            "model": "cosyvoice3", "voice": f"random-{name}", "input": "A saved voice.",
            "response_format": "pcm", "stream": False, "seed": 1})
        served += r.status_code == 200 and len(r.content) > 0
    return f"{listed}/{len(VOICES)} listed, {served}/{len(VOICES)} speak"


def signal_case(folder: Path, config: Path, sig: signal.Signals, load: int) -> Row:
    server = Serve(folder, f"{sig.name}-{load}", config=config)
    outs: list[Outcome] = []
    threads: list[threading.Thread] = []
    if load:
        outs, firsts, threads = launch(server.url, [speech(SHORT)] * load)
        for e in firsts:
            e.wait(120)
    pids = server.family()
    t0 = time.monotonic()
    server.proc.send_signal(sig)
    time.sleep(0.3)
    during = health(server.url)
    try:
        code = server.proc.wait(90)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        code = server.proc.wait()
    exit_s = time.monotonic() - t0
    for t in threads:
        t.join(60)
    left = orphans(pids)
    after = Serve(folder, f"{sig.name}-{load}-restart", config=config)
    try:
        voices = voices_served(after.url)
    finally:
        after.stop()
    seen = summary(outs) if outs else "(idle)"
    within = max((o.at - t0 for o in outs), default=exit_s)
    line = "(none: killed)" if sig == signal.SIGKILL else server.line(rf"{sig.name}: draining")
    return Row(f"{sig.name} {'+ ' + str(load) + ' streams' if load else 'idle'}",
               f"{seen}; exit {code} after {exit_s:.1f} s", f"{within:.1f}",
               f"{during} -> restart 200", line, left, voices)


def failpoint_case(server: Serve, name: str, marker: str, pattern: str) -> Row:
    bad = speech(f"{marker} {SENTENCE}")
    outs, _, threads = launch(server.url, [speech(SHORT), bad])
    t0 = time.monotonic()
    time.sleep(0.3)
    during = health(server.url)
    for t in threads:
        t.join(120)
    other, faulty = outs
    return Row(name, f"marked: {faulty.short()}; other: {other.short()} "
               f"({other.nbytes / PCM_BYTES_S:.1f} s audio)",
               f"{faulty.at - t0:.2f}", f"{during} -> {health(server.url)}",
               server.line(pattern), "(at stop)", "n/a")


def memory_case(folder: Path, clients: int) -> Row:
    server = Serve(folder, "memory", "engine.memory_headroom_mb=0")
    try:
        outs, _, threads = launch(server.url, [speech(SHORT)] * clients)
        t0 = time.monotonic()
        time.sleep(0.3)
        during = health(server.url)
        for t in threads:
            t.join(180)
        waits = metric(server.url, "voxflow_memory_waits_total")
        shrinks = metric(server.url, "voxflow_arena_shrinks_total")
        seen = summary(outs) + f" ({min(o.nbytes for o in outs) / PCM_BYTES_S:.1f} s audio each)"
        row = Row("memory budget exhausted (headroom 0)", seen,
                  f"{max(o.at for o in outs) - t0:.1f}", f"{during} -> {health(server.url)}",
                  server.line(r"memory: models") + f"; waits {waits:.0f}, shrinks {shrinks:.0f}",
                  "", "n/a")
    finally:
        code, _, left = server.stop()
    row.orphans = f"{left}, exit {code}"
    return row


def raw_stream(port: int, text: str, request_id: str) -> socket.socket:
    """A streamed PCM request on a raw socket (closed to disconnect)."""
    sock = socket.create_connection(("127.0.0.1", port))
    body = json.dumps(speech(text)).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: voxflow\r\n"
                 b"Content-Type: application/json\r\n"
                 + f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    return sock


def read_bytes(sock: socket.socket, nbytes: int, timeout_s: float = 120) -> int:
    """Read until `nbytes` arrived (headers included); returns what was read."""
    sock.settimeout(timeout_s)
    got = 0
    while got < nbytes:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += len(chunk)
    return got


def until(predicate: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until `predicate()` held (polled every 50 ms), None if not within `timeout_s`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if predicate():
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def inflight(url: str) -> tuple[int, int]:
    body = httpx.get(f"{url}/health", timeout=5).json()
    return body["inflight_requests"], body["waiting_requests"]


def disconnect_case(server: Serve, phase: str) -> Row:
    """A client gone while queued, at its first audio, or mid-stream; another one streams
    (it holds the one slot for the queued case)."""
    cancelled = metric(server.url, "voxflow_cancellations_total", reason="client")
    holder, firsts, threads = launch(server.url, [speech(SENTENCE * 8)])
    firsts[0].wait(120)
    rid = f"gone-{phase.replace(' ', '-')}"
    sock = raw_stream(server.port, LONG, rid)
    if phase == "queued":
        until(lambda: inflight(server.url)[1] == 1, 30)
    else:
        read_bytes(sock, 1 if phase == "at first audio" else 4 * PCM_BYTES_S)
    sock.close()
    # freed: nothing of it in flight or waiting (the holder may still be streaming)
    freed = until(lambda: inflight(server.url) == (1 if threads[0].is_alive() else 0, 0), 60)
    during = health(server.url)
    threads[0].join(120)
    cancel = metric(server.url, "voxflow_cancellations_total", reason="client") - cancelled
    return Row(f"client gone {phase}", f"other: {holder[0].short()}; gone one cancelled "
               f"(+{cancel:.0f} reason=client)",
               "never" if freed is None else f"{freed:.2f}", f"{during} -> {health(server.url)}",
               server.line(rf"request_id={rid} ", ("status", "audio_s", "complete")),
               "(at stop)", "n/a")


CASES = ("SIGINT", "SIGTERM", "SIGKILL", "stage_raise", "worker_die", "memory", "disconnect")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4, help="streams in flight for load")
    parser.add_argument("--only", nargs="*", choices=CASES, default=list(CASES))
    args = parser.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="voxflow-faults-") as tmp:
        folder = Path(tmp)
        config = saved_voices_config(folder, folder / "voices")
        if any(s in args.only for s in ("SIGINT", "SIGTERM", "SIGKILL")):
            first = Serve(folder, "create-voices", config=config)
            try:
                create_voices(first.url)
            finally:
                first.stop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if sig.name in args.only:
                for load in (0, args.clients):
                    rows.append(signal_case(folder, config, sig, load))
                    print(f"done: {rows[-1].case}", file=sys.stderr)
        if {"stage_raise", "worker_die"} & set(args.only):
            server = Serve(folder, "failpoints", env={
                "VOXFLOW_FAILPOINTS": "stage_raise=FAULT-RAISE@acoustic;worker_die=FAULT-DIE"})
            points = [row for row in (
                failpoint_case(server, "stage raises for one request", "FAULT-RAISE",
                               r"stage acoustic failed on request")
                if "stage_raise" in args.only else None,
                failpoint_case(server, "worker thread dies", "FAULT-DIE",
                               r"worker thread \S+ of model")
                if "worker_die" in args.only else None) if row is not None]
            code, _, left = server.stop()
            for row in points:
                row.orphans = f"{left}, exit {code}"
            rows += points
        if "memory" in args.only:
            rows.append(memory_case(folder, args.clients))
        if "disconnect" in args.only:
            server = Serve(folder, "disconnect", "engine.max_inflight_requests=1")
            gone = [disconnect_case(server, phase)
                    for phase in ("queued", "at first audio", "mid-stream")]
            code, _, left = server.stop()
            for row in gone:
                row.orphans = f"{left}, exit {code}"
            rows += gone
    print_table(rows)


def print_table(rows: list[Row]) -> None:
    head = Row("case", "clients see", "within s", "/health during -> after", "log",
               "orphans", "saved voices after restart")
    cells = [[getattr(r, f) for f in Row.__dataclass_fields__] for r in (head, *rows)]
    print("| " + " | ".join(cells[0]) + " |")
    print("|" + "|".join("---" for _ in cells[0]) + "|")
    for line in cells[1:]:
        print("| " + " | ".join(c.replace("|", "/") for c in line) + " |")


if __name__ == "__main__":
    main()
