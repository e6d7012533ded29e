"""The machine's ceiling: a voice's raw ONNX Runtime throughput, no server (issue 13).

Run from the repository root (the same as `voxflow bench ceiling`):

    .venv/bin/python benchmarks/ceiling.py                         # joe, the default sweep
    .venv/bin/python benchmarks/ceiling.py --model kokoro --json kokoro_ceiling.json
    .venv/bin/python benchmarks/ceiling.py --processes 2 --threads 1 --batch 1,4 --seconds 5

Runs the voice's graph on the texts' segments (voxflow's front end) in each configuration of
processes x threads x batch (P x T at most twice the cores; Kokoro batch 1 only), each for a
warm-up then a common window of --seconds, and prints audio-s/s and RTF per configuration, the
best, and the requests per second that best gives at the texts' mean audio per request. What is
counted and how: `voxflow/bench/ceiling.py`; how to read it: docs/benchmarks-archive.md, "The
machine's ceiling" (the current figures: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from voxflow.bench.ceiling_command import add_arguments, bench_ceiling
    from voxflow.bench.errors import BenchError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    try:
        return bench_ceiling(parser.parse_args())
    except BenchError as exc:
        print(f"ceiling: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
