"""Where a Kokoro run's time goes: ONNX Runtime's profile of one segment, kernel time by op type.

    .venv/bin/python benchmarks/kokoro_profile.py [--threads 1,2] [--text "..."] [--json F]

Runs the served int8 graph (the model cache of configs/multi.yaml's default) on one English
segment (jm_kumo) once to warm up, then once profiled per thread count, and prints the wall
time, the total kernel time and each op type's share of it (issue 17: `ConvInteger` was 69%
on one thread). Kernel times of parallel ops add up beyond the wall time on several threads.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnxruntime as ort

from voxflow.models.kokoro.frontend import KokoroFrontend
from voxflow.models.kokoro.loader import ensure_model, load_vocab
from voxflow.models.kokoro.settings import KokoroSettings
from voxflow.models.kokoro.synth import run_graph
from voxflow.models.kokoro.voices import load_packaged_voices

TEXT = ("Streaming through the official client keeps the first audio quick, and the rest of "
        "the sentence follows while the listener is already hearing it.")


def profile(path: Path, threads: int, tokens, table) -> dict:
    """One warm-up and one profiled run on a fresh `threads`-thread session."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "kokoro")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        run_graph(session, tokens, table, 1.0)
        started = time.perf_counter()
        audio = run_graph(session, tokens, table, 1.0)
        wall = time.perf_counter() - started
        events = json.loads(Path(session.end_profiling()).read_text())
    # both runs are in the profile: keep the second (the last model_run's window)
    runs = [e for e in events if e.get("name") == "model_run"]
    start = runs[-1]["ts"]
    by_op: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= start:
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values())
    return {"threads": threads, "tokens": int(tokens.size), "wall_s": round(wall, 3),
            "audio_s": round(audio.size / 24000, 2), "kernel_s": round(total / 1e6, 3),
            "share": {op: round(d / total, 3) for op, d in by_op.most_common(8)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    path = ensure_model(KokoroSettings().cache_dir)
    table = load_packaged_voices()["jm_kumo"]
    [segment] = KokoroFrontend(load_vocab()).segments(args.text, "en-us", 510, None)
    rows = [profile(path, int(n), segment.token_ids, table) for n in args.threads.split(",")]
    for row in rows:
        shares = ", ".join(f"{op} {share:.0%}" for op, share in row["share"].items())
        print(f"{row['threads']} thread(s), {row['tokens']} tokens, {row['audio_s']} s audio: "
              f"wall {row['wall_s']} s, kernels {row['kernel_s']} s: {shares}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
