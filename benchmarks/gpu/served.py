"""Serve one config and measure it with voxflow's own bench client: a step of the GPU run
(`benchmarks/gpu/run.py`), usable alone.

The server is `python -m voxflow serve --config CONFIG [--set K=V ...]` in a child process of
the same interpreter (so it runs wherever this script runs: the GPU machine's bare
``python3`` with the carried wheels on ``PYTHONPATH``, or a venv). The step:

1. starts it and polls ``GET /health`` until it answers 200: ``ready_s`` is the start-up time
   in seconds (loading or building the weights, warm-up, and for CosyVoice3 on CUDA the flow
   solve captured as CUDA graphs per (rows, frame bucket));
2. runs ``python -m voxflow bench run`` at each ``--concurrency`` level (closed loop,
   ``per_level x C`` requests a level, pcm, streamed) and keeps, per level, TTFA p50/p95
   (seconds), audio-s/s, RTF p50, stall rate (share of requests whose playback ran dry at
   least once), errors;
3. reads ``/health`` (the model's own report, e.g. ``flow_graphs``: shapes captured, eager
   reasons) and the ``voxflow_graph_runs_total`` lines of ``/metrics`` (replayed vs eager);
4. reads the GPU memory in use while serving (``nvidia-smi``, MiB; null where there is none);
5. stops the server (SIGINT, then SIGKILL after 10 s) whatever happened.

One JSON out (``--out``); a part that failed is recorded as ``{"error": ...}`` and the others
still run. The weights these configs name are random: the audio is noise, only times count.

    python3 benchmarks/gpu/served.py --config configs/cosyvoice3.yaml --model cosyvoice3 \\
        --voice random-tiny --concurrency 1,8,32 --out served.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
SHORT_LINES = ("Hello there.", "Good morning.", "Thank you.", "See you soon.", "Right away.",
               "Not today.", "Very well.", "Come in.", "Of course.", "Welcome back.")
"""Short lines: random weights rarely stop a segment early, so each runs to its length cap;
short inputs keep a request at a few seconds of audio."""


class ServerFailed(RuntimeError):
    """The server exited or did not answer /health in time (the message has its log's tail)."""


@dataclass
class Server:
    """A running server: base URL, start-up seconds, its log file."""

    url: str
    ready_s: float
    log: Path
    process: subprocess.Popen[bytes]


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextmanager
def serving(config: str, port: int, overrides: list[str], ready_timeout_s: float,
            log: Path) -> Iterator[Server]:
    """Run ``voxflow serve`` for the block; yields once ``/health`` answers 200.

    Raises:
        ServerFailed: the process exited, or ``/health`` did not answer within
            ``ready_timeout_s`` seconds.
    """
    cmd = [sys.executable, "-m", "voxflow", "serve", "--config", config,
           "--host", "127.0.0.1", "--port", str(port)]
    for item in overrides:
        cmd += ["--set", item]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "wb") as sink:
        # the same process group as this step: run.py's time limit stops both
        process = subprocess.Popen(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    try:
        ready = wait_ready(process, url, started + ready_timeout_s)
        if ready is None:
            state = "exited" if process.poll() is not None else "did not answer /health"
            raise ServerFailed(f"server {state} within {ready_timeout_s:.0f} s; log tail:\n"
                               f"{log_tail(log)}")
        yield Server(url, ready - started, log, process)
    finally:
        stop(process)


def wait_ready(process: subprocess.Popen[bytes], url: str, deadline: float) -> float | None:
    """The perf_counter time /health first answered 200, or None (exited or out of time)."""
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            return None
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return time.perf_counter()
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    return None


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT (uvicorn's graceful stop), SIGKILL after 10 s."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def bench(url: str, model: str, voice: str, concurrency: str, per_level: int,
          timeout_s: float, workdir: Path) -> dict[str, Any]:
    """`voxflow bench run` against `url`: {concurrency: level record} from its JSON report."""
    lines = workdir / "lines.txt"
    lines.write_text("\n".join(SHORT_LINES) + "\n", encoding="utf-8")
    report = workdir / "bench.json"
    cmd = [sys.executable, "-m", "voxflow", "bench", "run", "--url", url, "--model", model,
           "--voice", voice, "--format", "pcm", "--sentences", str(lines),
           "--concurrency", concurrency, "--per-level", str(per_level), "--warmup", "1",
           "--seed", "7", "--allow-busy", "--timeout", "60", "--out", str(report)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not report.is_file():
        raise RuntimeError(f"bench exited {done.returncode}: {done.stderr[-2000:]}")
    print(done.stdout, flush=True)
    return levels(json.loads(report.read_text(encoding="utf-8")))


def levels(report: dict[str, Any]) -> dict[str, Any]:
    """Per concurrency level, the figures the GPU summary reads, from a bench JSON report."""
    out: dict[str, Any] = {}
    for case_levels in report["cases"].values():
        for level in case_levels:
            run = level["repeats"][0]  # one repeat: --repeats is not passed
            out[f"c{level['concurrency']}"] = {key: run.get(key) for key in (
                "requests", "ok", "errors", "errors_by_kind", "ttfa_p50", "ttfa_p95",
                "audio_s_per_s", "rtf_p50", "stall_rate", "stalls", "audio_s", "wall_s")}
    return out


def graph_runs(metrics_text: str) -> list[str]:
    """The ``voxflow_graph_runs_total`` sample lines of a /metrics page."""
    return [line for line in metrics_text.splitlines()
            if line.startswith("voxflow_graph_runs_total")]


def gpu_memory_mib() -> int | None:
    """Memory in use on GPU 0 (nvidia-smi, MiB), or None without one."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                               "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10)
        return int(done.stdout.split()[0]) if done.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def attempt(record: dict[str, Any], key: str, fn: Any, *args: Any) -> Any:
    """record[key] = fn(*args), or {"error": ...} if it raised; returns the value or None."""
    try:
        record[key] = fn(*args)
        return record[key]
    except Exception as exc:  # noqa: BLE001 (recorded; the step goes on)
        record[key] = {"error": f"{type(exc).__name__}: {exc}"}
        return None


def run_step(args: argparse.Namespace) -> dict[str, Any]:
    """Serve, bench, read /health and /metrics; see the module docstring."""
    record: dict[str, Any] = {"config": args.config, "overrides": args.set,
                              "weights": "random: noise, only times count"}
    workdir = Path(tempfile.mkdtemp(prefix="voxflow-served-"))
    log = Path(args.log) if args.log else workdir / "server.log"
    try:
        with serving(args.config, args.port, args.set, args.ready_timeout, log) as server:
            record["ready_s"] = round(server.ready_s, 2)
            print(f"server ready after {server.ready_s:.1f} s", flush=True)
            attempt(record, "levels", bench, server.url, args.model, args.voice,
                    args.concurrency, args.per_level, args.bench_timeout, workdir)
            record["gpu_memory_used_mib"] = gpu_memory_mib()
            attempt(record, "health", lambda: httpx.get(f"{server.url}/health",
                                                        timeout=10).json())
            attempt(record, "graph_runs", lambda: graph_runs(
                httpx.get(f"{server.url}/metrics", timeout=10).text))
    except Exception as exc:  # noqa: BLE001 (the JSON says why; run.py goes on)
        record["error"] = f"{type(exc).__name__}: {exc}"
    measured = record.get("levels") or {}
    record["ok"] = ("error" not in record and "error" not in measured and bool(measured)
                    and all(level["errors"] == 0 for level in measured.values()))
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a settings override passed to voxflow serve (repeatable)")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--model", required=True)
    parser.add_argument("--voice", required=True)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--per-level", type=int, default=5)
    parser.add_argument("--ready-timeout", type=float, default=150.0, help="seconds")
    parser.add_argument("--bench-timeout", type=float, default=120.0, help="seconds")
    parser.add_argument("--log", help="server log file (default: a temporary folder)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    record = run_step(args)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"served {args.config}: {'ok' if record['ok'] else 'FAILED'} -> {args.out}")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
