"""The machine's ceiling: a voice's raw ONNX Runtime throughput, no server (issue 13).

Run from the repository root:

    .venv/bin/python benchmarks/ceiling.py                         # joe, the default sweep
    .venv/bin/python benchmarks/ceiling.py --model kokoro --json kokoro_ceiling.json
    .venv/bin/python benchmarks/ceiling.py --processes 2 --threads 1 --batch 1,4 --seconds 5

Runs the voice's graph on the texts' segments (voxflow's front end) in each configuration of
processes x threads x batch (P x T at most twice the cores; Kokoro batch 1 only), each for a
warm-up then a common window of --seconds, and prints audio-s/s and RTF per configuration, the
best, and the requests per second that best gives at the texts' mean audio per request. What is
counted and how: `voxflow/bench/ceiling.py`; how to read it: docs/benchmarks.md, "Ceiling".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def int_list(value: str) -> list[int]:
    try:
        values = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{value}' is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{value}': give integers of at least 1")
    return values


def main() -> int:
    from voxflow.bench.ceiling import MODELS, format_table, measure_ceiling, read_texts

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=MODELS, default="piper")
    parser.add_argument("--voice", help="Piper: a voice .onnx (default: the packaged joe); "
                        "Kokoro: a voice id (default: the family's default)")
    parser.add_argument("--graph", choices=("whole", "split"), default="whole",
                        help="Piper: the packaged graph (whole, what piper-tts runs) or "
                        "voxflow's encoder/flow/decoder split (default: whole)")
    parser.add_argument("--texts", type=Path, default=ROOT / "benchmarks/data/sentences.txt")
    parser.add_argument("--processes", type=int_list, default=[1, 2])
    parser.add_argument("--threads", type=int_list, default=[1, 2])
    parser.add_argument("--batch", type=int_list, default=None,
                        help="segments per call (default: 1,2,4,8 for Piper, 1 for Kokoro)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="measured window per configuration (10)")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="warm-up per configuration before the window (2)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the result here")
    args = parser.parse_args()
    batches = args.batch or ([1, 2, 4, 8] if args.model == "piper" else [1])
    texts = read_texts(args.texts)

    def progress(r) -> None:
        print(f"  {r.config.label}: {r.audio_s_per_s:.2f} audio-s/s "
              f"(other processes {r.other_cpu_pct:.1f}% CPU)", file=sys.stderr, flush=True)

    result = measure_ceiling(args.model, texts, args.processes, args.threads, batches,
                             args.seconds, args.warmup, args.graph, args.voice,
                             progress=progress)
    print(f"{result.model} {result.voice} ({result.graph} graph): {result.texts} texts, "
          f"{result.segments} segments, {result.seconds:g} s per configuration, "
          f"{result.machine.get('cores')} cores")
    print(format_table(result))
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
