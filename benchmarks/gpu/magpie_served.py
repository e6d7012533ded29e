"""MagpieTTS + NanoCodec served on one GPU (issue 37 item 1, the `magpie` part): latency and
throughput at concurrency 1 and 8, streamed vs whole responses byte for byte, and host<->device
copies per codec chunk in the served path. Writes one JSON (``--out``), rewritten after every
part, so a run cut short still leaves what it measured.

Served model: ``configs/magpie-gpu.yaml``: the tiny random MagpieTTS (the acoustic model) and
the full-size NanoCodec decoder with random weights (hop 1024 samples = one codec frame, 46.4 ms
at 22,050 Hz; a codec chunk = ``codec_chunk_frames`` = 4 frames = 186 ms), the chunk step
captured as CUDA graphs at start-up, greedy decoding (the same text gives the same bytes),
segments cut at ``max_frames`` (48 frames = 2.23 s of audio: random weights rarely end one).
The audio is noise: only times, counts and identity mean anything.

Parts (each under its own try/except: a failed part is written as ``{"error": ...}`` and the
others still run):

- ``server``: ``python -m voxflow serve --config configs/magpie-gpu.yaml`` started as a
  subprocess; ``startup_s`` = seconds from launch to the first 200 of ``GET /health`` (model
  load, graph capture, warm-up); ``health`` = the model's ``/health`` entry (graphs captured).
- ``bench``: the project's own client, ``python -m voxflow bench run`` (pcm, streamed, short
  lines, ``--per-level 5``: 5 requests at c=1, 40 at c=8, one warm-up each; idle gate at
  most 2 s, ``--allow-busy``) against that server. Per concurrency (medians of the client's
  summary): TTFA p50 / p95 (s, request sent to its first audio), latency p50 (s), RTF p50
  (request wall s / its audio s), audio-s/s (audio seconds of successful requests per wall
  second), stall rate (share of successful requests whose playback, started at the first
  audio, stalled at least once), ok / requests. ``codec``: the server's codec counters over
  the run (``voxflow_stage_events_total{stage="codec"}``: codec chunks decoded, the batched
  chunk steps that decoded them, and the steps replayed from a captured CUDA graph).
- ``identity``: the same texts with ``"stream": true`` and ``"stream": false`` (pcm, int16)
  must give identical bytes: ``alone`` (one request in flight at a time) and ``c8`` (4 texts
  x both modes = 8 requests in flight at once). Per text: identical, samples of each, and the
  largest sample difference (int16 steps; 0 when identical). ``c8_vs_alone``: the c8
  streamed bytes against the lone ones (codec rows decoded in one batched step may round
  differently from a lone decode: reported, not required).
- ``copies``: the real app (`voxflow.server.app.create_app`) under uvicorn in a thread of this
  process; requests sent with httpx at c=1 (2 requests, one after another) and c=8 (8 at
  once) while ``torch.profiler`` records CPU and CUDA activity of every thread. Segments are
  cut at ``--copies-max-frames`` (16 frames = 4 codec chunks per request: the profiler
  records some 3,500 CPU events per frame, and stopping it and counting them takes seconds).
  Counted: CUDA ``Memcpy HtoD`` / ``Memcpy DtoH`` activities (``Memcpy DtoD`` beside: not a
  host copy) and host synchronisations (``cudaStreamSynchronize`` / ``cudaDeviceSynchronize``
  / ``cudaEventSynchronize`` runtime calls), divided by the codec chunks decoded in the window
  (the codec stage's ``chunks`` counter on ``/metrics``): ``copies_per_chunk``. ``by_stage``
  splits them by the stage whose ``run`` / ``begin`` / ``step`` / ``end`` issued them (each
  wrapped in a ``voxflow::stage::NAME`` profiler range; ``other``: outside every stage, e.g.
  the profiler's own closing synchronisation; ``unattributed``: no recorded CPU op linked).
  On the CPU there is no host<->device copy: ``copies_per_chunk`` is null and only the
  profiler run, its event count, the labelled stage calls and the chunk count are reported.

Run (repository root; the dry run takes well under a minute on 2 CPU cores):

    python benchmarks/gpu/magpie_served.py --out magpie_served.json          # CUDA
    python benchmarks/gpu/magpie_served.py --dry-run --out magpie_dry.json

``--set KEY=VALUE`` (repeatable) overrides a setting of the served config in every part, e.g.
``--set models.0.options.max_frames=32`` (the profiled part's ``max_frames`` is
``--copies-max-frames`` on CUDA). ``--port`` fixes the served subprocess's port (default: a
free one); its log goes to ``--log`` (default ``OUT.server.log``), the in-process app's beside
it (``NAME-app.log``). The JSON's ``summary`` holds the figures as short strings (the GPU
run's summary table shows them), ``failures`` what failed; exit status 1 when a part failed or
streamed != whole (alone or at c=8), else 0. Needs torch, numpy, httpx, uvicorn, fastapi and the
project; never pytest or PyAV.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import logging
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CONFIG = ROOT / "configs" / "magpie-gpu.yaml"
MODEL, VOICE = "magpie", "random-0"
SAMPLE_RATE = 22050  # NanoCodec's output rate (X-Sample-Rate of a magpie pcm asked "native")
TEXTS = (  # short lines: one segment each
    "The kite circled twice.",
    "Rain fell on the quiet harbor.",
    "She opened the blue door slowly.",
    "Seven boats left before dawn.",
    "A small bell rang in the hall.",
    "The bread was still warm.",
    "He counted the stars again.",
    "Wind moved through the tall grass.",
)
DRY_RUN = (  # CPU, the tiny codec fixture (96 samples per frame), short segments
    "models.0.options.device=cpu",
    "models.0.options.codec_weights=tiny_fixture",
    "models.0.options.max_frames=12",
)
COPIES = {"HtoD": "Memcpy HtoD", "DtoH": "Memcpy DtoH", "DtoD": "Memcpy DtoD"}
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
LABEL = "voxflow::stage::"
STAGE_METHODS = ("run", "begin", "step", "end")
PARTS = ("server", "bench", "identity", "copies")
COPIES_MAX_FRAMES = 16  # segments of the profiled part on CUDA: 4 codec chunks each


# ---- shared helpers ---------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def failure(exc: BaseException) -> dict[str, Any]:
    """A part's failure as JSON: the error line and the last frames of its traceback."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": "".join(lines[-6:])}


def wait_health(url: str, timeout_s: float, alive: Callable[[], str | None]) -> float:
    """Seconds until ``GET /health`` answers 200; raises if ``alive()`` reports the server
    gone (its reason) or after ``timeout_s``."""
    start = time.monotonic()
    with httpx.Client(timeout=5.0) as client:
        while True:
            gone = alive()
            if gone:
                raise RuntimeError(gone)
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return time.monotonic() - start
            except httpx.TransportError:
                pass
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"/health not 200 after {timeout_s:.0f} s")
            time.sleep(0.2)


def codec_counts(url: str) -> dict[str, float]:
    """The codec stage's counters from ``/metrics``: chunks, steps, steps_replayed."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=10.0).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "voxflow_stage_events":
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") == MODEL and labels.get("stage") == "codec" \
                    and sample.name.endswith("_total"):
                out[labels["event"]] = sample.value
    if "chunks" not in out:
        raise RuntimeError("no voxflow_stage_events_total{stage=\"codec\",event=\"chunks\"} "
                           "on /metrics")
    return out


def counts_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(after[k] - before.get(k, 0.0)) for k in after}


def health_entry(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/health", timeout=10.0).json()["models"][MODEL]


async def speech(client: httpx.AsyncClient, url: str, text: str, stream: bool) -> bytes:
    """One pcm response's bytes (int16 mono), read as it arrives."""
    body = {"model": MODEL, "input": text, "voice": VOICE, "response_format": "pcm",
            "sample_rate": "native", "stream": stream}  # the codec's own samples, not 24 kHz
    async with client.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
        data = b"".join([piece async for piece in response.aiter_bytes()])
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {data[:300]!r}")
        return data


async def send_all(url: str, jobs: list[tuple[str, bool]], concurrency: int) -> list[bytes]:
    """``jobs`` (text, stream) with at most ``concurrency`` in flight; bytes in job order."""
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        async def one(text: str, stream: bool) -> bytes:
            async with gate:
                return await speech(client, url, text, stream)

        return list(await asyncio.gather(*(one(t, s) for t, s in jobs)))


def compare(a: bytes, b: bytes) -> dict[str, Any]:
    """Byte identity of two int16 pcm bodies and their largest sample difference."""
    x = np.frombuffer(a[: len(a) // 2 * 2], "<i2").astype(np.int32)
    y = np.frombuffer(b[: len(b) // 2 * 2], "<i2").astype(np.int32)
    n = min(len(x), len(y))
    diff = int(np.abs(x[:n] - y[:n]).max()) if n else 0
    return {"identical": a == b and len(a) > 0, "samples": [len(x), len(y)],
            "max_sample_diff": diff}


# ---- part a: the server as a subprocess -------------------------------------------------------

class Server:
    """``python -m voxflow serve`` in a subprocess, stopped (terminate, then kill) by `stop`."""

    def __init__(self, port: int, overrides: list[str], log_path: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        cmd = [sys.executable, "-m", "voxflow", "serve", "--config", str(CONFIG),
               "--port", str(port), "--set", "server.log_level=warning"]
        for text in overrides:
            cmd += ["--set", text]
        self.cmd = cmd
        self.log = open(log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent)

    def gone(self) -> str | None:
        code = self.proc.poll()
        if code is None:
            return None
        return f"server exited with {code}: {self.tail()}"

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode


def die_with_parent() -> None:
    """In a child before exec (Linux): SIGTERM when this script dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def part_bench(url: str, workdir: Path, levels: str, per_level: int) -> dict[str, Any]:
    """`voxflow bench run` at ``levels``; per concurrency the summary's medians."""
    sentences = workdir / "lines.txt"
    sentences.write_text("\n".join(TEXTS) + "\n")
    record = workdir / "bench.json"
    before = codec_counts(url)
    cmd = [sys.executable, "-m", "voxflow", "bench", "run", "--url", url, "--model", MODEL,
           "--voice", VOICE, "--format", "pcm", "--stream", "--sentences", str(sentences),
           "--concurrency", levels, "--per-level", str(per_level), "--warmup", "1",
           "--allow-busy", "--idle-timeout", "2", "--out", str(record)]
    done = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=300, preexec_fn=die_with_parent)
    if done.returncode != 0 or not record.is_file():
        raise RuntimeError(f"bench run exited with {done.returncode}: "
                           f"{(done.stdout + done.stderr)[-1500:]}")
    doc = json.loads(record.read_text())
    keys = ("ttfa_p50", "ttfa_p95", "latency_p50", "rtf_p50", "audio_s_per_s", "stall_rate",
            "requests", "ok", "errors", "audio_s", "wall_s")
    out: dict[str, Any] = {"idle_gate_busy": doc.get("busy"), "levels": {}}
    for case in doc["cases"].values():
        for level in case:
            summary = level["summary"]
            out["levels"][f"c{level['concurrency']}"] = {
                k: summary[k]["median"] for k in keys if k in summary}
    out["codec"] = counts_delta(before, codec_counts(url))
    out["table"] = doc.get("table")
    return out


def part_identity(url: str) -> dict[str, Any]:
    """Streamed vs whole, alone and 8 in flight (see the module docstring)."""
    texts = list(TEXTS[:4])
    out: dict[str, Any] = {}
    alone: dict[str, bytes] = {}
    rows = []
    for text in texts:
        streamed, whole = asyncio.run(send_all(url, [(text, True), (text, False)], 1))
        alone[text] = streamed
        rows.append({"text": text, **compare(streamed, whole)})
    out["alone"] = {"identical": all(r["identical"] for r in rows), "texts": rows}
    jobs = [(t, s) for t in texts for s in (True, False)]
    bodies = asyncio.run(send_all(url, jobs, len(jobs)))
    got = dict(zip(jobs, bodies, strict=True))
    rows = [{"text": t, **compare(got[(t, True)], got[(t, False)])} for t in texts]
    out["c8"] = {"identical": all(r["identical"] for r in rows), "in_flight": len(jobs),
                 "texts": rows}
    rows = [{"text": t, **compare(got[(t, True)], alone[t])} for t in texts]
    out["c8_vs_alone"] = {"identical": all(r["identical"] for r in rows), "texts": rows}
    out["audio_s"] = {t: len(alone[t]) / 2 / SAMPLE_RATE for t in texts}
    return out


# ---- part b: copies per codec chunk, in-process -----------------------------------------------

def label_stages(stages: list[Any]) -> None:
    """Wrap each stage's run / begin / step / end (instance attributes: the engine looks them
    up per call) in a ``voxflow::stage::NAME`` profiler range."""
    from torch.profiler import record_function

    def wrap(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def labelled(*args: Any, **kwargs: Any) -> Any:
            with record_function(name):
                return fn(*args, **kwargs)
        return labelled

    for stage in stages:
        for method in STAGE_METHODS:
            fn = getattr(stage, method, None)
            if callable(fn):
                setattr(stage, method, wrap(fn, LABEL + stage.name))


def profiler_config() -> tuple[Any, bool]:
    """(experimental config recording every thread's CPU ops, whether that is supported)."""
    from torch._C._profiler import _ExperimentalConfig

    try:
        return _ExperimentalConfig(profile_all_threads=True), True
    except TypeError:  # an older torch: CPU ops of the profiling thread only
        return _ExperimentalConfig(), False


class StageRanges:
    """Which stage issued a profiler event: the ``voxflow::stage::NAME`` range, on the same
    thread, around the CPU op the event is linked to by correlation id (a device activity or
    a CUDA runtime call). Built from raw kineto events, without the profiler's event tree."""

    def __init__(self, events: list[Any]):
        from torch.autograd import DeviceType

        self.spans: dict[int, list[tuple[int, int, str]]] = {}  # thread -> (start, end, stage)
        self.ops: dict[int, Any] = {}  # correlation id -> CPU op
        for e in events:
            if e.device_type() != DeviceType.CPU:
                continue
            name = e.name()
            if name.startswith(LABEL):
                self.spans.setdefault(e.start_thread_id(), []).append(
                    (e.start_ns(), e.end_ns(), name[len(LABEL):]))
            if e.linked_correlation_id() == 0 and "::" in name:  # an op, not a CUDA runtime
                self.ops[e.correlation_id()] = e  # call (those ids are CUPTI's own)
        for spans in self.spans.values():
            spans.sort()
        self.starts = {t: [s[0] for s in spans] for t, spans in self.spans.items()}

    def stage_of(self, event: Any) -> str:
        """The stage's name; ``other`` outside every stage range, ``unattributed`` when no
        recorded CPU op is linked to the event."""
        op = self.ops.get(event.linked_correlation_id())
        if op is None:
            return "unattributed"
        thread, at = op.start_thread_id(), op.start_ns()
        spans = self.spans.get(thread, [])
        i = bisect.bisect_right(self.starts.get(thread, []), at) - 1
        for j in range(i, max(i - 4, -1), -1):  # the latest range starting before it
            start, end, stage = spans[j]
            if start <= at <= end:
                return stage
        return "other"

    def calls(self) -> dict[str, int]:
        """Labelled stage calls seen, by stage."""
        out: dict[str, int] = {}
        for spans in self.spans.values():
            for _, _, stage in spans:
                out[stage] = out.get(stage, 0) + 1
        return out


def event_kind(event: Any, cpu: Any) -> str | None:
    """``HtoD`` / ``DtoH`` / ``DtoD`` for a CUDA memcpy activity, ``syncs`` for a host
    synchronisation runtime call, else None."""
    name = event.name()
    for kind, prefix in COPIES.items():
        if name.startswith(prefix):
            return kind
    return "syncs" if event.device_type() == cpu and name in SYNCS else None


def count_events(events: list[Any]) -> dict[str, Any]:
    """Copies and syncs among raw kineto events, in total and by stage (`StageRanges`)."""
    from torch.autograd import DeviceType

    ranges = StageRanges(events)
    total = {k: 0 for k in (*COPIES, "syncs")}
    by_stage: dict[str, dict[str, int]] = {}
    for e in events:
        kind = event_kind(e, DeviceType.CPU)
        if kind is not None:
            total[kind] += 1
            by_stage.setdefault(ranges.stage_of(e), dict.fromkeys(total, 0))[kind] += 1
    return {"total": total, "by_stage": by_stage, "labelled_calls": ranges.calls(),
            "events": len(events)}


def profile_level(url: str, concurrency: int, requests: int, cuda: bool) -> dict[str, Any]:
    """One profiled window: ``requests`` streamed requests, ``concurrency`` in flight."""
    from torch.profiler import ProfilerActivity, profile

    config, all_threads = profiler_config()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    jobs = [(TEXTS[i % len(TEXTS)], True) for i in range(requests)]
    before = codec_counts(url)
    with profile(activities=activities, experimental_config=config) as prof:
        start = time.perf_counter()
        bodies = asyncio.run(send_all(url, jobs, concurrency))
        wall = time.perf_counter() - start
    parse_start = time.perf_counter()
    stop_s = parse_start - start - wall
    events = prof.profiler.kineto_results.events()
    counted = count_events(events)
    parse_s = time.perf_counter() - parse_start
    codec = counts_delta(before, codec_counts(url))
    chunks = codec["chunks"]
    out: dict[str, Any] = {
        "requests": requests, "concurrency": concurrency, "wall_s": wall,
        "audio_s": sum(len(b) for b in bodies) / 2 / SAMPLE_RATE, "codec": codec,
        "profiler": {"ran": True, "all_threads": all_threads, "events": counted["events"],
                     "stop_s": stop_s, "count_s": parse_s,
                     "labelled_calls": counted["labelled_calls"]},
    }
    if not cuda:
        out["copies_per_chunk"] = None
        out["note"] = "CPU: no host<->device copies; counts not applicable"
        return out
    per = max(chunks, 1)
    total = counted["total"]
    out["copies"] = total
    out["copies_per_chunk"] = {"HtoD": total["HtoD"] / per, "DtoH": total["DtoH"] / per,
                               "DtoD": total["DtoD"] / per, "syncs": total["syncs"] / per}
    out["by_stage"] = {stage: {k: v / per for k, v in row.items()}
                       for stage, row in sorted(counted["by_stage"].items())}
    out["by_stage_counts"] = counted["by_stage"]
    return out


def part_copies(overrides: list[str], cuda: bool, log_path: Path) -> dict[str, Any]:
    """The app in-process under uvicorn in a thread; c=1 and c=8 profiled windows."""
    import torch
    import uvicorn

    from voxflow.config import load_settings, parse_override
    from voxflow.server.app import create_app

    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    port = free_port()
    values: dict[str, Any] = {"server.port": port}
    for text in overrides:
        key, value = parse_override(text)
        values[key] = value
    settings = load_settings(CONFIG, values)
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio",
                                           http="h11", log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    start = time.monotonic()
    thread.start()
    url = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"torch": torch.__version__, "overrides": overrides}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name()
    try:
        out["startup_s"] = wait_health(
            url, 300.0, lambda: None if thread.is_alive() else "in-process server stopped "
            f"(see {log_path})")
        label_stages(app.state.engine.metrics.stages.models[MODEL])
        asyncio.run(send_all(url, [(TEXTS[0], True)], 1))  # one unprofiled request first
        for name, concurrency, requests in (("c1", 1, 2), ("c8", 8, 8)):
            try:
                out[name] = profile_level(url, concurrency, requests, cuda)
            except Exception as exc:  # noqa: BLE001 (written into the JSON)
                out[name] = failure(exc)
    finally:
        server.should_exit = True
        thread.join(30)
        out["wall_s"] = time.monotonic() - start
        logging.getLogger().removeHandler(handler)
        handler.close()
    return out


# ---- main ---------------------------------------------------------------------------------------

def environment(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "host": platform.node(),
                            "device": device, "config": str(CONFIG.relative_to(ROOT))}
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                        capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["commit"] = None
    return info


def write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)


def summary(doc: dict[str, Any]) -> dict[str, str]:
    """The figures in a few short strings (`benchmarks/gpu/summary.py` shows each as a row); a
    part that cannot be summarised says so."""
    out: dict[str, str] = {}
    for part in (summary_server, summary_bench, summary_identity, summary_copies):
        try:
            out.update(part(doc))
        except Exception as exc:  # noqa: BLE001 (the JSON holds the whole record anyway)
            out[part.__name__[8:]] = f"no summary ({type(exc).__name__}: {exc})"
    return out


def summary_server(doc: dict[str, Any]) -> dict[str, str]:
    srv = doc.get("server", {})
    if "startup_s" not in srv:
        return {"server": str(srv.get("error"))}
    graphs = srv.get("health", {}).get("stages", {}).get("codec", {}).get("graphs", {})
    return {"start-up": f"{srv['startup_s']:.1f} s to /health 200, codec graphs captured "
                        f"{graphs.get('captured')}/{graphs.get('shapes')}"}


def summary_bench(doc: dict[str, Any]) -> dict[str, str]:
    bench = doc.get("bench", {})
    if "error" in bench:
        return {"bench": bench["error"]}
    out = {}
    for name, r in bench.get("levels", {}).items():
        out[f"bench {name}"] = (f"TTFA p50 {r['ttfa_p50']:.3f} s, {r['audio_s_per_s']:.2f} "
                                f"audio-s/s, RTF {r['rtf_p50']:.3f}, stalls "
                                f"{r['stall_rate']:.2f}, ok {r['ok']:.0f}/{r['requests']:.0f}")
    c = bench["codec"]
    out["bench codec"] = (f"{c.get('chunks')} chunks in {c.get('steps')} steps, "
                          f"{c.get('steps_replayed')} steps replayed from a CUDA graph")
    return out


def summary_identity(doc: dict[str, Any]) -> dict[str, str]:
    ident = doc.get("identity", {})
    if "error" in ident:
        return {"streamed == whole": ident["error"]}
    out = {}
    for case, key in (("alone", "streamed == whole alone"), ("c8", "streamed == whole c8"),
                      ("c8_vs_alone", "c8 == alone (streamed)")):
        r = ident[case]
        worst = max((t["max_sample_diff"] for t in r["texts"]), default=0)
        out[key] = f"identical {r['identical']} (max sample diff {worst})"
    return out


def summary_copies(doc: dict[str, Any]) -> dict[str, str]:
    copies = doc.get("copies", {})
    if "error" in copies:
        return {"copies": copies["error"]}
    out = {}
    for name in ("c1", "c8"):
        r = copies.get(name, {"error": "not run"})
        key = f"copies/chunk {name}"
        if "error" in r:
            out[key] = r["error"]
            continue
        per, chunks = r.get("copies_per_chunk"), r["codec"]["chunks"]
        if per is None:
            out[key] = f"n/a on CPU (profiler ran: {r['profiler']['events']} events, " \
                       f"{chunks} chunks)"
            continue
        codec = r["by_stage"].get("codec", {})
        out[key] = (f"HtoD {per['HtoD']:.2f} DtoH {per['DtoH']:.2f} syncs {per['syncs']:.2f} "
                    f"({chunks} chunks)")
        out[f"codec stage/chunk {name}"] = (f"HtoD {codec.get('HtoD', 0):.2f} DtoH "
                                            f"{codec.get('DtoH', 0):.2f} syncs "
                                            f"{codec.get('syncs', 0):.2f}")
    return out


def failures(doc: dict[str, Any]) -> list[str]:
    """Why the run did not pass its own checks: a part that failed, or streamed != whole."""
    bad = [f"{part}: {doc[part]['error']}" for part in PARTS
           if isinstance(doc.get(part), dict) and "error" in doc[part]]
    bad += [f"{part} {name}: {doc[part][name]['error']}" for part in ("copies",)
            for name in ("c1", "c8") if "error" in doc.get(part, {}).get(name, {})]
    ident = doc.get("identity", {})
    bad += [f"streamed != whole ({case})" for case in ("alone", "c8")
            if case in ident and not ident[case]["identical"]]
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON written here")
    parser.add_argument("--device", default="cuda", help="torch device of the model (cuda)")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny codec, 12-frame segments: checks the script")
    parser.add_argument("--port", type=int, default=0,
                        help="port of the served subprocess (default: a free one)")
    parser.add_argument("--log", type=Path,
                        help="the server's log (default: OUT.server.log); the in-process "
                        "app's goes beside it (NAME-app.log)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a setting of the served config")
    parser.add_argument("--levels", default="1,8", help="bench concurrency levels (1,8)")
    parser.add_argument("--per-level", type=int, default=5,
                        help="bench requests per level = K x concurrency (5, the least)")
    parser.add_argument("--copies-max-frames", type=int, default=COPIES_MAX_FRAMES,
                        help=f"max_frames of the profiled part on CUDA ({COPIES_MAX_FRAMES}; "
                        "the dry run keeps its 12)")
    args = parser.parse_args()
    # `timeout` and run.py send SIGTERM: raise SystemExit so the server is still stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    device = "cpu" if args.dry_run else args.device
    overrides = [*DRY_RUN] if args.dry_run else [f"models.0.options.device={device}"]
    overrides += args.overrides
    cuda = device.startswith("cuda")
    log = args.log or Path(f"{args.out}.server.log")
    for path in (args.out, log):
        path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"what": "MagpieTTS served (issue 37 item 1): bench, streamed == "
                           "whole, host<->device copies per codec chunk; random weights, "
                           "output is noise", "dry_run": args.dry_run,
                           "overrides": overrides, "environment": environment(device)}
    write(args.out, doc)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="magpie_served_") as tmp:
        run_server_parts(doc, args, overrides, log, Path(tmp))
    t0 = time.monotonic()
    try:
        capped = overrides if args.dry_run else \
            [*overrides, f"models.0.options.max_frames={args.copies_max_frames}"]
        doc["copies"] = part_copies(capped, cuda, log.with_name(f"{log.stem}-app{log.suffix}"))
    except Exception as exc:  # noqa: BLE001 (written into the JSON)
        doc["copies"] = failure(exc)
    doc["copies"]["part_s"] = time.monotonic() - t0
    doc["total_s"] = time.monotonic() - started
    doc["summary"] = summary(doc)
    doc["failures"] = failures(doc)
    write(args.out, doc)
    for key, value in doc["summary"].items():
        print(f"{key}: {value}")
    for line in doc["failures"]:
        print(f"FAILED {line}")
    print(f"wrote {args.out} ({doc['total_s']:.1f} s)")
    return 1 if doc["failures"] else 0


def run_server_parts(doc: dict[str, Any], args: argparse.Namespace, overrides: list[str],
                     log: Path, workdir: Path) -> None:
    """Parts on the served subprocess: start-up, bench, identity; the server always stopped
    and the JSON rewritten after each part."""
    server = None
    try:
        try:
            server = Server(args.port or free_port(), overrides, log)
            doc["server"] = {"cmd": server.cmd[1:],
                             "startup_s": wait_health(server.url, 300.0, server.gone)}
            doc["server"]["health"] = health_entry(server.url)
        except Exception as exc:  # noqa: BLE001 (written into the JSON)
            doc["server"] = failure(exc)
            if server is not None:
                doc["server"]["log_tail"] = server.tail()
        write(args.out, doc)
        alive = server is not None and server.gone() is None and "error" not in doc["server"]
        url = server.url if server is not None else ""
        parts = {"bench": lambda: part_bench(url, workdir, args.levels, args.per_level),
                 "identity": lambda: part_identity(url)}
        for part, run in parts.items():
            if not alive:
                doc[part] = {"error": "server did not start"}
                continue
            t0 = time.monotonic()
            try:
                doc[part] = run()
            except Exception as exc:  # noqa: BLE001 (written into the JSON)
                doc[part] = failure(exc)
            doc[part]["part_s"] = time.monotonic() - t0
            write(args.out, doc)
    finally:
        if server is not None:
            doc.setdefault("server", {})["exit_code"] = server.stop()
        write(args.out, doc)


if __name__ == "__main__":
    sys.exit(main())
