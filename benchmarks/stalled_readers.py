"""Server memory with clients that open long streamed requests and read nothing (issue 40).

Run from the repository root (about two minutes per setting, the default Piper voice):

    .venv/bin/python benchmarks/stalled_readers.py [--readers 32] [--chars 4000] [--seconds 90]
        [--set server.max_buffered_audio_s=3600 ...]

Starts `voxflow serve` (configs/piper.yaml, plus each ``--set``), then opens `readers`
connections that each ask for a `chars`-character input streamed as PCM and never read (a
4 KiB receive buffer). Every second it samples the server's RSS (``/proc/PID/status``); 5 s
after each probe ends, one probe request (a sentence, streamed) measures the time to first
audio of a client that does read. At the end it prints the RSS before, at its peak and at the
end, the process's memory budget (`voxflow_memory_budget_bytes`: the models' memory plus the
400 MB headroom), how many requests were cancelled as stalled, and the probes' TTFA. Linux
only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from voxflow.bench.arms import free_port  # noqa: E402
from voxflow.bench.scrape import metric  # noqa: E402

SENTENCE = "The little red kite circled twice above the harbor before settling on the mast. "
MIB = 1 << 20


def rss(pid: int) -> int:
    """Resident memory of process `pid`, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def open_stalled(port: int, text: str) -> socket.socket:
    """A connection asking for `text` streamed as PCM that then reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"model": "piper", "voice": "joe", "input": text,
                       "response_format": "pcm", "stream": True}).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: voxflow\r\n"
                 b"Content-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def probe_ttfa(url: str) -> float:
    """Seconds to the first audio bytes of a streamed sentence."""
    started = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/audio/speech", timeout=600, json={
            "model": "piper", "voice": "joe", "input": SENTENCE, "response_format": "pcm",
            "stream": True}) as response:
        response.raise_for_status()
        pieces = response.iter_bytes()
        next(pieces)
        ttfa = time.perf_counter() - started
        for _ in pieces:
            pass
    return ttfa


def start_server(sets: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "voxflow", "serve", "--port", str(port)]
    for item in sets:
        argv += ["--set", item]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"voxflow serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("voxflow serve did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", type=int, default=32)
    parser.add_argument("--chars", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--set", action="append", default=[], dest="sets",
                        help="a `voxflow serve --set` (repeatable)")
    args = parser.parse_args()
    text = (SENTENCE * (args.chars // len(SENTENCE) + 1))[:args.chars].rstrip()

    proc, url = start_server(args.sets)
    sockets: list[socket.socket] = []
    try:
        budget = metric(url, "voxflow_memory_budget_bytes")
        before = rss(proc.pid)
        sockets = [open_stalled(int(url.rsplit(":", 1)[1]), text) for _ in range(args.readers)]
        samples: list[int] = []
        probes: list[tuple[float, float]] = []  # (seconds since the readers opened, TTFA)
        started = time.monotonic()
        done = threading.Event()

        def probe_loop() -> None:
            while not done.wait(5.0):
                at = time.monotonic() - started
                probes.append((at, probe_ttfa(url)))

        prober = threading.Thread(target=probe_loop, daemon=True)
        prober.start()
        buffered: list[float] = []
        while time.monotonic() - started < args.seconds:
            samples.append(rss(proc.pid))
            if len(samples) % 10 == 1:
                buffered.append(metric(url, "voxflow_buffered_audio_bytes"))
            time.sleep(1.0)
        done.set()
        stalled = metric(url, "voxflow_cancellations_total", reason="stalled")
        health = httpx.get(f"{url}/health", timeout=10).json()
        inflight = (f"{health['inflight_requests']} in flight, {health['parked_requests']} "
                    "parked")
    finally:
        for sock in sockets:
            sock.close()
        proc.terminate()
        proc.wait(60)

    print(f"settings: {' '.join(args.sets) or '(defaults)'}; {args.readers} readers of "
          f"{len(text)} characters, {args.seconds:g} s")
    print(f"RSS before   {before / MIB:8.0f} MiB")
    print(f"RSS peak     {max(samples) / MIB:8.0f} MiB")
    print(f"RSS at end   {samples[-1] / MIB:8.0f} MiB")
    print(f"budget       {budget / MIB:8.0f} MiB (models + headroom)"
          f"  peak {'within' if max(samples) <= budget else 'OVER'}")
    print(f"stalled      {stalled:8.0f} cancelled; at the end {inflight}")
    print("RSS by 10 s  " + " ".join(f"{x / MIB:.0f}" for x in samples[::10]) + " MiB")
    print("queued audio " + " ".join(f"{x / MIB:.0f}" for x in buffered)
          + " MiB (voxflow_buffered_audio_bytes, by 10 s)")
    print("probe TTFA   " + " ".join(f"{t:.2f}@{at:.0f}s" for at, t in probes)
          + " (seconds, at seconds after the readers opened)")


if __name__ == "__main__":
    main()
