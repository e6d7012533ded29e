"""CPU timing of CosyVoice3's served flow solve batched across segments (`FlowBucketRunner`).

With the tiny fixture flow (its weights; the output is noise) on one thread: `--rows` streamed
(chunk-causal) solves of one frame bucket, T = 34..38 mel frames each (P = 7 prompt tokens plus
13..15 target tokens, 3 of them lookahead), solved one call per solve and then all in one
bucketed call; prints the median of `--repeats` of each and the largest difference between the
two (each row's mel should equal the row alone within 1e-4, spec §1 item 7). On the CPU both
run eagerly (nothing is captured): this is the batching's own gain, not a graph's.

    .venv/bin/python benchmarks/cosyvoice3_flow_batch_cpu.py --rows 4,8 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # cosyvoice3_fixtures: reads the fixtures

from cosyvoice3_fixtures import tensors  # noqa: E402

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig  # noqa: E402
from voxflow.models.cosyvoice3.flow_bucket import FlowBucketRunner, FlowSolve  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="4,8", help="solves per batch, comma-separated")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    flow = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    flow.load_state_dict(tensors("flow_tiny_state_dict.safetensors"), strict=True)
    flow.eval()
    fx = tensors("flow_tiny_fixtures.safetensors")
    runner = FlowBucketRunner(flow, (20, 30, 40, 60, 80), (1, 2, 3, 4, 6, 8), 8, 8192, True,
                              "cpu")

    def solve(n: int, seed: int) -> FlowSolve:
        gen = torch.Generator().manual_seed(seed)
        token = torch.randint(0, 81, (1, n), generator=gen, dtype=torch.int32)
        with torch.inference_mode():
            cond = flow.conditioning(token, fx["in.prompt_token"], fx["in.prompt_feat"],
                                     fx["in.embedding"], False)
        return FlowSolve(cond, True)

    for rows in (int(v) for v in args.rows.split(",") if v):
        solves = [solve(13 + i % 3, i) for i in range(rows)]
        alone, together = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            mels_alone = [runner.solve([s])[0] for s in solves]
            alone.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            mels = runner.solve(solves)
            together.append(time.perf_counter() - t0)
        diff = max(float((a - b).abs().max()) for a, b in zip(mels_alone, mels, strict=True))
        print(f"{rows} streamed solves of 34-38 frames: one by one "
              f"{1000 * statistics.median(alone):.1f} ms, one bucketed call "
              f"{1000 * statistics.median(together):.1f} ms, max diff {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
