"""CosyVoice3 fed with streamed text (bistream) against a request per sentence, served: a step
of the GPU run (`benchmarks/gpu/run.py`, ``cv3-bistream``; issue 43 item 4), usable alone.

The server is the one `served.py` starts (``python -m voxflow serve --config CONFIG [--set
K=V ...]``, a child process of this interpreter): on the GPU ``configs/cosyvoice3.yaml``, full
size, random weights, CUDA, with a small flow-graph ladder (`run.py`'s ``BISTREAM_LADDER``: 4
frame buckets x 3 batch sizes, for a short start-up). Then, with voxflow's own bench client for ``WS
/v1/audio/speech/stream`` (`voxflow.bench.ws_client`, what ``voxflow bench run --ws`` runs),
each session sends its text word by word at ``--words-per-s`` (20: an LLM's pace) and times
the audio coming back. The text is the first ``--sentences`` sentences of the bench's
``paragraph`` case (2 by default: two sentences are the least that show a second request per
sentence; the whole paragraph makes a session of over a minute of audio with random weights,
which never stop before the LM's length cap of 20 speech tokens per text token).

Two modes on the same server, both in the config message: ``fed`` (``"bistream": true``: one
generation fed by the text as it arrives, first audio after the first words) and
``per-sentence`` (``"bistream": false``: one engine request per sentence, each known complete
when the next one begins). Per mode one short warm-up session (not measured), then at each
``--concurrency`` level (1 and 4) ``--sessions`` x C sessions, C at a time (a closed loop, as
`voxflow.bench.runner.run_level` runs it). The levels run in the order c1 fed, c1 per-sentence,
c4 fed, c4 per-sentence, so a run cut short keeps the lone comparison.

Per (mode, level), from `voxflow.bench.metrics.level_stats`: TTFA p50 / p95 (s, from the first
word sent to the first audio), audio-s/s (decoded audio seconds of successful sessions per wall
second of the level), RTF p50, stall rate (share of successful sessions whose playback, started
at the first audio, ran dry at least once) and the mean stalled seconds, ok / sessions, errors
by kind. Also the start-up (s to the first 200 of ``/health``), the GPU memory in use after the
bench (``nvidia-smi``, MiB; null without one) and the ``voxflow_graph_runs_total`` lines of
``/metrics`` (flow solves replayed vs eager).

Why not ``voxflow bench run --ws`` itself: it sends at least 5 sessions per unit of
concurrency (``MIN_PER_LEVEL``), 25 sessions per mode at 1 and 4, minutes of GPU time at full
size; this step sends one per unit (5 per mode), the same client and statistics. Single
samples: exploration, not a verdict on speed.

Pass: every level of both modes measured, every session answered audio with no error.
Random weights: the audio is noise; only times, counts and errors mean anything, and the two
modes make different amounts of audio from the same text (a segment runs to its length cap or
a random stop), so audio-s/s compares different amounts of work.

The step checks its own time (``--deadline-s``, under run.py's limit): a level that cannot
start with ``MIN_LEVEL_S`` left is recorded as skipped (the step then fails) and the JSON
(``--out``) is rewritten after every level, so a cut run keeps what it measured.

    python3 benchmarks/gpu/bistream_served.py --config configs/cosyvoice3.yaml \\
        --set models.0.options.flow_capture_frame_buckets=[100,150,200,250] --out bistream.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]

from served import gpu_memory_mib, graph_runs, serving  # noqa: E402

from voxflow.bench.adapters import make_adapter  # noqa: E402
from voxflow.bench.metrics import LevelStats, level_stats  # noqa: E402
from voxflow.bench.options import CASES, DATA_DIR  # noqa: E402
from voxflow.bench.runner import Case, SweepPlan, http_client, run_level  # noqa: E402
from voxflow.bench.target import Target  # noqa: E402

MODES = (("fed", True), ("per-sentence", False))
"""(name, the config message's ``bistream``) of each mode, in the order they run."""

WARMUP_TEXT = "Hello there."
"""One short session per mode before it is measured (a few seconds of audio)."""

MIN_LEVEL_S = 8.0
"""A level with fewer seconds than this left before ``--deadline-s`` is skipped."""

KEPT = ("requests", "ok", "errors", "errors_by_kind", "ttfa_p50", "ttfa_p95", "latency_p50",
        "audio_s_per_s", "rtf_p50", "stall_rate", "stalls", "stall_s_mean", "audio_s", "wall_s")
"""The `LevelStats` fields a level's record keeps."""


def case_text(sentences: int) -> str:
    """The first `sentences` sentences of the bench's ``paragraph`` case (0: all of it).

    Raises:
        ValueError: the case file is missing or empty.
    """
    text = Case.from_file(DATA_DIR / CASES["paragraph"]).texts[0]
    parts = re.split(r"(?<=[.!?])\s+", text)
    return " ".join(parts[:sentences] if sentences > 0 else parts)


def level_record(stats: LevelStats) -> dict[str, Any]:
    """The kept fields of one level, floats rounded to 4 places and NaN as None (strict JSON:
    no successful session leaves the percentiles NaN)."""
    out: dict[str, Any] = {}
    for key in KEPT:
        value = getattr(stats, key)
        if isinstance(value, float):
            value = None if math.isnan(value) else round(value, 4)
        out[key] = value
    return out


def level_ok(record: dict[str, Any]) -> bool:
    """Every session of a measured level answered audio without an error (a session with no
    audio counts as an error, ``no_audio``) and first audio was timed."""
    return (isinstance(record.get("requests"), int) and record["requests"] > 0
            and record.get("errors") == 0 and record.get("ok") == record["requests"]
            and isinstance(record.get("ttfa_p50"), float))


def step_ok(record: dict[str, Any], concurrency: list[int]) -> bool:
    """The step's verdict: no error outside the levels, and every (mode, level) ``level_ok``."""
    modes = record.get("modes") or {}
    return "error" not in record and all(
        level_ok((modes.get(name) or {}).get(f"c{c}") or {})
        for name, _ in MODES for c in concurrency)


def describe(record: dict[str, Any]) -> str:
    """One level as a line: TTFA p50/p95, audio-s/s, stall rate, ok/sessions, errors."""
    if "skipped" in record or "error" in record:
        return str(record.get("skipped") or record.get("error"))

    def secs(key: str) -> str:
        value = record.get(key)
        return f"{value:.3f} s" if isinstance(value, float) else "-"

    rate = record.get("audio_s_per_s")
    stall = record.get("stall_rate")
    return (f"TTFA p50 {secs('ttfa_p50')} p95 {secs('ttfa_p95')}, "
            f"{rate if rate is None else f'{rate:.2f}'} audio-s/s, stall rate "
            f"{stall if stall is None else f'{stall:.2f}'}, ok {record.get('ok')}/"
            f"{record.get('requests')}, errors {record.get('errors_by_kind') or 0}")


async def sessions(url: str, model: str, voice: str, bistream: bool, text: str,
                   concurrency: int, count: int, words_per_s: float,
                   timeout_s: float) -> LevelStats:
    """`count` WS sessions speaking `text`, `concurrency` at a time; their statistics.

    Args:
        words_per_s: words sent per second in each session (> 0).
        timeout_s: seconds one session may take (a longer one is a ``timeout`` error).
    """
    target = Target(engine="openai", url=url, model=model, voice=voice, fmt="pcm",
                    extras={"bistream": bistream})
    plan = SweepPlan(concurrency=(concurrency,), per_level=1, timeout_s=timeout_s,
                     ws_words_per_s=words_per_s)
    async with http_client(concurrency) as client:  # unused by WS sessions; run_level takes one
        done = await run_level(client, make_adapter(target), Case("bistream", (text,)),
                               concurrency, count, plan)
    return level_stats(concurrency, [result.timeline for _, result in done])


def run_levels(args: argparse.Namespace, url: str, text: str, deadline: float,
               record: dict[str, Any], save: Any) -> None:
    """Warm up each mode, then measure every level of each mode (module docstring's order)
    into ``record["modes"]``, calling `save` after each."""
    modes: dict[str, dict[str, Any]] = record.setdefault("modes", {})
    warm: set[str] = set()
    for concurrency in args.concurrency:
        for name, bistream in MODES:
            level: dict[str, Any]
            left = deadline - time.perf_counter()
            if left < MIN_LEVEL_S:
                level = {"skipped": f"{left:.0f} s left of the step's deadline"}
            else:
                try:
                    if name not in warm:
                        warm.add(name)
                        asyncio.run(sessions(url, args.model, args.voice, bistream, WARMUP_TEXT,
                                             1, 1, args.words_per_s, min(30.0, left / 2)))
                    left = deadline - time.perf_counter()
                    level = level_record(asyncio.run(sessions(
                        url, args.model, args.voice, bistream, text, concurrency,
                        args.sessions * concurrency, args.words_per_s,
                        min(args.session_timeout, (left - 1) / args.sessions))))
                except Exception as exc:  # noqa: BLE001 (recorded; the other levels go on)
                    level = {"error": f"{type(exc).__name__}: {exc}"}
            modes.setdefault(name, {})[f"c{concurrency}"] = level
            print(f"{name} c{concurrency}: {describe(level)}", flush=True)
            save()


def run_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Serve, run the levels, read /metrics; see the module docstring."""
    started = time.perf_counter()
    deadline = started + args.deadline_s
    text = case_text(args.sentences)
    record: dict[str, Any] = {
        "config": args.config, "overrides": args.set, "text": text,
        "words": len(text.split()), "words_per_s": args.words_per_s,
        "sessions_per_concurrency": args.sessions, "concurrency": args.concurrency,
        "weights": "random: noise, only times, counts and errors count"}

    def save() -> None:
        out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    workdir = Path(tempfile.mkdtemp(prefix="voxflow-bistream-"))
    log = Path(args.log) if args.log else workdir / "server.log"
    try:
        ready_timeout = min(args.ready_timeout, args.deadline_s - MIN_LEVEL_S)
        with serving(args.config, args.port, args.set, ready_timeout, log) as server:
            record["ready_s"] = round(server.ready_s, 2)
            print(f"server ready after {server.ready_s:.1f} s", flush=True)
            save()
            run_levels(args, server.url, text, deadline, record, save)
            record["gpu_memory_used_mib"] = gpu_memory_mib()
            try:
                record["graph_runs"] = graph_runs(
                    httpx.get(f"{server.url}/metrics", timeout=10).text)
            except httpx.HTTPError as exc:
                record["graph_runs"] = {"error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # noqa: BLE001 (the JSON says why; run.py goes on)
        record["error"] = f"{type(exc).__name__}: {exc}"
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["ok"] = step_ok(record, args.concurrency)
    save()
    return record


def concurrency_list(text: str) -> list[int]:
    """``"1,4"`` -> [1, 4] (each at least 1)."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"levels must be at least 1: {text!r}")
    return levels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a settings override passed to voxflow serve (repeatable)")
    parser.add_argument("--port", type=int, default=8013)
    parser.add_argument("--model", default="cosyvoice3")
    parser.add_argument("--voice", default="random-tiny")
    parser.add_argument("--concurrency", type=concurrency_list, default=[1, 4])
    parser.add_argument("--sessions", type=int, default=1,
                        help="sessions per unit of concurrency at each level (1)")
    parser.add_argument("--sentences", type=int, default=2,
                        help="sentences of the paragraph case each session speaks (2; 0: all)")
    parser.add_argument("--words-per-s", type=float, default=20.0,
                        help="words sent per second (20)")
    parser.add_argument("--session-timeout", type=float, default=60.0,
                        help="seconds one session may take (60)")
    parser.add_argument("--ready-timeout", type=float, default=50.0,
                        help="seconds the server may take to answer /health (50)")
    parser.add_argument("--deadline-s", type=float, default=85.0,
                        help="seconds for the whole step, start-up included (85)")
    parser.add_argument("--log", help="server log file (default: a temporary folder)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.sessions < 1 or args.words_per_s <= 0:
        parser.error("--sessions must be at least 1 and --words-per-s above 0")
    out = Path(args.out)
    record = run_step(args, out)
    print(f"bistream served {args.config} (fed vs per-sentence, c"
          f"{','.join(map(str, args.concurrency))}, {record['words']} words at "
          f"{args.words_per_s:g}/s): {'ok' if record['ok'] else 'FAILED'} "
          f"after {record['seconds']} s -> {out}", flush=True)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
