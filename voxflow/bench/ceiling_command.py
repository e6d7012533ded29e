"""``voxflow bench ceiling`` (and `benchmarks/ceiling.py`): arguments, table and JSON of
`voxflow.bench.ceiling.measure_ceiling`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from voxflow.bench.ceiling import (
    MODELS,
    ConfigResult,
    format_table,
    measure_ceiling,
)
from voxflow.bench.errors import EXIT_USAGE, BenchError
from voxflow.bench.options import DEFAULT_SENTENCES, checked, non_negative_int, number
from voxflow.bench.runner import Case

DEFAULT_BATCHES = {"piper": [1, 2, 4, 8], "kokoro": [1]}


def int_list(value: str) -> list[int]:
    """A comma-separated list of integers of at least 1 ("1,2,4")."""
    try:
        values = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{value}' is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{value}': give integers of at least 1")
    return values


_seconds = checked(number, lambda v: 0 <= v < math.inf, "a number of seconds, at least 0")


def add_arguments(p: argparse.ArgumentParser, texts_default: Path = DEFAULT_SENTENCES) -> None:
    """The ceiling's options on `p`."""
    p.add_argument("--model", choices=MODELS, default="piper", help="voice family (piper)")
    p.add_argument("--voice", help="Piper: a voice .onnx (default: the packaged joe); "
                   "Kokoro: a voice id (default: the family's default, jf_alpha; English)")
    p.add_argument("--graph", choices=("whole", "split"), default="whole",
                   help="Piper: the packaged graph (whole: what piper-tts runs) or voxflow's "
                   "encoder/flow/decoder split (default: whole)")
    p.add_argument("--texts", type=Path, default=texts_default, metavar="FILE",
                   help="one text (request) per non-blank line (the bench's sentences file)")
    p.add_argument("--processes", type=int_list, default=[1, 2], metavar="P,..",
                   help="worker processes (1,2)")
    p.add_argument("--threads", type=int_list, default=[1, 2], metavar="T,..",
                   help="intra-op threads per process (1,2)")
    p.add_argument("--batch", type=int_list, metavar="B,..",
                   help="segments per call (Piper 1,2,4,8; Kokoro 1, its only size)")
    p.add_argument("--seconds", type=_seconds, default=10.0, metavar="S",
                   help="measured window per configuration (10)")
    p.add_argument("--warmup", type=_seconds, default=2.0, metavar="S",
                   help="warm-up per configuration before its window (2)")
    p.add_argument("--confirm", type=non_negative_int, default=0, metavar="N",
                   help="measure the best configuration N more times after the sweep; the "
                   "ceiling is their median (0: the sweep's best figure, which reads high: "
                   "it is the largest of several noisy ones)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the result here")


def add_ceiling(kinds) -> argparse.ArgumentParser:
    """Add the ``ceiling`` parser under ``voxflow bench``; returns it."""
    p = kinds.add_parser(
        "ceiling", help="a voice's raw ONNX Runtime throughput, no server (the machine's "
        "ceiling)",
        description="Run a voice's ONNX graph on the texts' segments in each configuration of "
        "processes x threads x batch and print audio-s/s per configuration and the best. "
        "See docs/benchmarks.md.",
    )
    add_arguments(p)
    return p


def bench_ceiling(args: argparse.Namespace) -> int:
    """Run the sweep, print the table (progress on stderr), write the JSON.

    Raises:
        BenchError: unreadable texts, a bad sweep (usage, exit 2), or a worker failed (1).
    """
    batches = args.batch or DEFAULT_BATCHES[args.model]

    def progress(r: ConfigResult) -> None:
        print(f"  {r.config.label}: {r.audio_s_per_s:.2f} audio-s/s "
              f"(other processes {r.other_cpu_pct:.1f}% CPU)", file=sys.stderr, flush=True)

    try:
        texts = list(Case.from_file(args.texts).texts)
        result = measure_ceiling(args.model, texts, args.processes, args.threads, batches,
                                 args.seconds, args.warmup, args.graph, args.voice,
                                 progress=progress, confirm=args.confirm)
    except (OSError, ValueError) as exc:
        raise BenchError(f"bench ceiling: {exc}", EXIT_USAGE) from None
    except RuntimeError as exc:
        raise BenchError(f"bench ceiling: {exc}") from None
    print(f"{result.model} {result.voice} ({result.graph} graph): {result.texts} texts, "
          f"{result.segments} segments, {result.seconds:g} s per configuration, "
          f"{result.machine.get('cores')} cores")
    print(format_table(result))
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return 0
