"""Every GPU check in one run (issue 37), called by `benchmarks/gpu/run.sh`: each step a child
process under its own time limit, the whole run under one budget, a failed step never stopping
the others; one summary table printed and one JSON written.

Steps, in order (the limits are seconds of wall time; the run's budget caps each further):

====================  =====  ==============================================================
step                  limit  what it runs
====================  =====  ==============================================================
``torch-api``            15  `torch_api.py`: every torch name the GPU path uses resolves in
                             the torch that runs it (2.11 on the GPU machine)
``cv3-parity``           35  `cosyvoice3.py parity`: the tiny CosyVoice3 fixtures on the
                             device (flow, HiFT, token2wav, LM; spec §1 tolerances)
``cv3-solve``           100  `cosyvoice3.py solve`: the full-size flow solve captured per
                             (rows, frame bucket), replay == eager, eager vs replay time at
                             b1 and b8, float32 then bfloat16 estimator, and the kernels of
                             the eager solve at b1/250 and b8/100 (where the time goes)
``cv3-serve``           170  `served.py`: `configs/cosyvoice3.yaml` (full size, random
                             weights, flow graphs up to 500 frames captured at start-up:
                             `SERVED_LADDER`), bench at concurrency 1, 8, 32: TTFA,
                             audio-s/s, stall rate, start-up time, GPU memory
``cv3-bistream``          90  `bistream_served.py`: `configs/cosyvoice3.yaml` (full size,
                             random weights, 12 small flow graphs: `BISTREAM_LADDER`), text
                             streamed over WS at 20 words/s, fed (bistream) against a
                             request per sentence at concurrency 1 and 4: TTFA, audio-s/s,
                             stall rate per mode; every session audio, no error
``nanocodec``            75  `nanocodec_cpu.py`: the full-size decoder streamed vs one-shot,
                             eager vs CUDA graphs, host copies and syncs per chunk step
``magpie-serve``         95  `magpie_served.py`: MagpieTTS + NanoCodec served on CUDA at
                             concurrency 1 and 8, streamed == whole, host copies per codec
                             chunk in the served path
====================  =====  ==============================================================

``--dry-run`` takes every step on the CPU at tiny sizes (the tiny fixtures' models, two small
buckets, the tiny CosyVoice3 and codec configs), servers and requests included: what
`make gpu-rehearsal` runs in a venv holding only the GPU machine's packages.

Output: ``--out-dir`` (default ``$OUT``, else ``gpu-out``) receives ``gpu.json`` (facts, each
step's status, time and JSON part, and the summary rows), ``summary.txt`` (the table) and
``logs.tar.gz`` (each step's log and the servers' logs): three files, within what the device
tool brings back. Exit status 0 when every step ran and passed its own checks, else 1.

Random weights everywhere: the audio is noise; times, identity and counts are what mean
anything. The anchors the summary compares with are the issue's (seed figures on an H200).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from summary import summary_rows, table  # noqa: E402

GPU = "benchmarks/gpu"
SERVED_LADDER = "models.0.options.flow_capture_frame_buckets=[100,150,200,250,300,400,500]"
"""The served step captures the config's ladder up to 500 frames (42 of its 97 (rows, frames)
graphs; the short lines' solves fit): the whole ladder in float32 took over 140 s to capture
on the first H200 run (2026-12-04), more than the run can give one start-up. Solves past 500
frames run eagerly and are counted so in /metrics."""
BISTREAM_LADDER = ("models.0.options.flow_capture_frame_buckets=[100,150,200,250]",
                   "models.0.options.flow_capture_batch_sizes=[1,2,4]")
"""The bistream step's server captures 12 flow graphs (4 buckets x 3 batch sizes): the short
solves of the first hops, which make first audio, at up to 4 sessions; its step has 90 s,
start-up included. Longer solves run eagerly (a fed segment's too, after its first hops:
`flow_settled_cache` is `auto`, off on CUDA, so its hops solve the whole prefix)."""


@dataclass(frozen=True)
class Step:
    """One check: its name, time limit (s), and argv on the GPU and in a dry run (``{part}``,
    ``{logs}`` and ``{deadline}`` are replaced by its JSON part's path, the logs folder and
    the seconds it may take, `DEADLINE_MARGIN_S` under its limit, for a step that stops itself
    in time)."""

    name: str
    limit_s: int
    gpu: tuple[str, ...]
    dry: tuple[str, ...]


STEPS = (
    Step("torch-api", 15, (f"{GPU}/torch_api.py", "--json", "{part}"),
         (f"{GPU}/torch_api.py", "--json", "{part}")),
    Step("cv3-parity", 35,
         (f"{GPU}/cosyvoice3.py", "parity", "--device", "cuda", "--out", "{part}"),
         (f"{GPU}/cosyvoice3.py", "parity", "--device", "cpu", "--out", "{part}")),
    Step("cv3-solve", 100,
         (f"{GPU}/cosyvoice3.py", "solve", "--device", "cuda", "--batches", "1,8",
          "--buckets", "100,250,1000", "--budget", "2000", "--repeats", "3",
          "--dtypes", "float32,bfloat16", "--profile", "b1/250,b8/100", "--out", "{part}"),
         (f"{GPU}/cosyvoice3.py", "solve", "--device", "cpu", "--tiny", "--batches", "1,2",
          "--buckets", "20,40", "--budget", "80", "--repeats", "1", "--profile", "b1/40",
          "--out", "{part}")),
    Step("cv3-serve", 170,
         (f"{GPU}/served.py", "--config", "configs/cosyvoice3.yaml", "--model", "cosyvoice3",
          "--voice", "random-tiny", "--set", SERVED_LADDER, "--concurrency", "1,8,32",
          "--per-level", "5", "--ready-timeout", "120", "--bench-timeout", "40",
          "--port", "8011",
          "--log", "{logs}/cv3-server.log", "--out", "{part}"),
         (f"{GPU}/served.py", "--config", "configs/cosyvoice3-tiny.yaml", "--model",
          "cosyvoice3", "--voice", "random-tiny", "--concurrency", "1,2", "--per-level", "5",
          "--ready-timeout", "60", "--bench-timeout", "60", "--port", "8011",
          "--log", "{logs}/cv3-server.log", "--out", "{part}")),
    Step("cv3-bistream", 90,
         (f"{GPU}/bistream_served.py", "--config", "configs/cosyvoice3.yaml",
          "--set", BISTREAM_LADDER[0], "--set", BISTREAM_LADDER[1], "--concurrency", "1,4",
          "--sessions", "1", "--sentences", "2", "--words-per-s", "20",
          "--session-timeout", "40", "--ready-timeout", "50", "--deadline-s", "{deadline}",
          "--port", "8013", "--log", "{logs}/cv3-bistream-server.log", "--out", "{part}"),
         (f"{GPU}/bistream_served.py", "--config", "configs/cosyvoice3-tiny.yaml",
          "--concurrency", "1,4", "--sessions", "1", "--sentences", "2", "--words-per-s", "20",
          "--session-timeout", "40", "--ready-timeout", "50", "--deadline-s", "{deadline}",
          "--port", "8013", "--log", "{logs}/cv3-bistream-server.log", "--out", "{part}")),
    Step("nanocodec", 75,
         ("benchmarks/nanocodec_cpu.py", "--device", "cuda", "--graphs", "--check-replay",
          "--chunks", "1,2,4,8", "--batch", "8", "--frames", "32", "--warmup", "1",
          "--repeats", "3", "--out", "{part}"),
         ("benchmarks/nanocodec_cpu.py", "--device", "cpu", "--graphs", "--check-replay",
          "--tiny", "--chunks", "1,2,4,8", "--batch", "2", "--frames", "16", "--warmup", "1",
          "--repeats", "1", "--out", "{part}")),
    Step("magpie-serve", 95,
         (f"{GPU}/magpie_served.py", "--device", "cuda", "--port", "8012",
          "--log", "{logs}/magpie-server.log", "--out", "{part}"),
         (f"{GPU}/magpie_served.py", "--dry-run", "--port", "8012",
          "--log", "{logs}/magpie-server.log", "--out", "{part}")),
)
BUDGET_S = 545  # 465 s (issue 37's 8 minutes less the wheel install, the report and a margin)
# and 80 s for cv3-bistream (issue 43): the device call's timeout is then 600 s, its most
MIN_STEP_S = 10  # a step with less than this left is skipped, not started
DEADLINE_MARGIN_S = 5  # a step's own ``{deadline}`` is this many seconds under its limit


def run_step(step: Step, argv: list[str], limit_s: float, log: Path) -> tuple[int | None, float]:
    """Run one step's argv (this interpreter) in its own process group, output to `log`.

    Returns (exit status, or None if it ran out of time and was killed; seconds taken).
    """
    started = time.perf_counter()
    with open(log, "wb") as sink:
        process = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            rc: int | None = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            rc = None
            stop_group(process)
    return rc, time.perf_counter() - started


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the step's process group (its servers too), SIGKILL after 10 s."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def read_part(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"missing": f"{type(exc).__name__}: {exc}"}


def facts(dry_run: bool) -> dict[str, Any]:
    """What ran where: commit (VOXFLOW_COMMIT, else git), Python, torch, GPU, driver."""
    out: dict[str, Any] = {"dry_run": dry_run, "python": platform.python_version(),
                           "host": platform.node(), "commit": os.environ.get("VOXFLOW_COMMIT")}
    if not out["commit"]:
        try:
            out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                           capture_output=True, timeout=10).stdout.strip()
        except OSError:
            out["commit"] = None
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
            out["torch_cuda"] = torch.version.cuda
    except Exception as exc:  # noqa: BLE001 (recorded; the steps say the rest)
        out["torch"] = f"import failed: {exc}"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10)
        out["nvidia_smi"] = smi.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        out["nvidia_smi"] = None
    return out


def pack_logs(logs: Path, target: Path) -> None:
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(logs.iterdir()):
            tar.add(path, arcname=path.name)


def selected(names: str | None) -> set[str]:
    known = {s.name for s in STEPS}
    chosen = {n for n in (names or "").split(",") if n} or known
    unknown = chosen - known
    if unknown:
        raise SystemExit(f"unknown step(s): {', '.join(sorted(unknown))}; "
                         f"steps: {', '.join(s.name for s in STEPS)}")
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="every step on the CPU at tiny sizes (the rehearsal)")
    parser.add_argument("--only", help="comma-separated steps to run (default: all)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help=f"wall seconds for all steps ({BUDGET_S})")
    parser.add_argument("--out-dir", type=Path,
                        default=Path(os.environ.get("OUT") or ROOT / "gpu-out"))
    args = parser.parse_args()
    chosen = selected(args.only)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="voxflow-gpu-"))
    logs = work / "logs"
    logs.mkdir()
    deadline = time.perf_counter() + args.budget_s
    record: dict[str, Any] = {"facts": facts(args.dry_run), "budget_s": args.budget_s,
                              "steps": {}}
    print(json.dumps(record["facts"]), flush=True)
    for step in STEPS:
        if step.name not in chosen:
            continue
        left = deadline - time.perf_counter()
        if left < MIN_STEP_S:
            record["steps"][step.name] = {"status": "skipped: the run's budget is spent"}
            print(f"[{step.name}] skipped: budget spent", flush=True)
            continue
        part = work / f"{step.name}.json"
        limit = min(step.limit_s, left)
        deadline_s = f"{max(limit - DEADLINE_MARGIN_S, 1):.0f}"
        argv = [a.format(part=part, logs=logs, deadline=deadline_s)
                for a in (step.dry if args.dry_run else step.gpu)]
        print(f"[{step.name}] limit {limit:.0f} s: {' '.join(argv)}", flush=True)
        rc, took = run_step(step, argv, limit, logs / f"{step.name}.log")
        status = "ok" if rc == 0 else ("timed out" if rc is None else f"failed (exit {rc})")
        record["steps"][step.name] = {"status": status, "seconds": round(took, 1),
                                      "limit_s": round(limit), "part": read_part(part)}
        print(f"[{step.name}] {status} after {took:.1f} s", flush=True)
        if rc != 0:
            print((logs / f"{step.name}.log").read_text(errors="replace")[-3000:], flush=True)
    record["summary"] = summary_rows(record["steps"], args.dry_run)
    text = table(record["summary"])
    print(text, flush=True)
    (args.out_dir / "summary.txt").write_text(text + "\n", encoding="utf-8")
    (args.out_dir / "gpu.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    pack_logs(logs, args.out_dir / "logs.tar.gz")
    print(f"wrote {args.out_dir}/gpu.json, summary.txt, logs.tar.gz", flush=True)
    return 0 if all(s["status"] == "ok" for s in record["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
