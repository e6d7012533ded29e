"""CPU baseline of CosyVoice3's flow solve at full size, random weights, eager, batch 1.

Times `CausalMaskedDiffWithDiT.decoder` (the 10-step Euler solve with classifier-free guidance
as twin rows, spec §6) on mu/cond/speaker inputs of T mel frames (50 fps), non-streaming mask,
float32, after one warm-up call per size; prints and writes the median of `--repeats` calls.
Random weights: only the time means anything (the output is noise). Issue 10 asks for 100,
250 and 500 frames, median of 5, as the CPU baseline for part 2.

    .venv/bin/python benchmarks/cosyvoice3_flow_cpu.py --frames 100,250,500 --repeats 5 \
        --out flow_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig  # noqa: E402


def time_solve(model: CausalMaskedDiffWithDiT, frames: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` solves over `frames` frames (after one warm-up)."""
    gen = torch.Generator().manual_seed(frames)
    mu = torch.randn(1, 80, frames, generator=gen)
    cond = torch.zeros(1, 80, frames)
    mask = torch.ones(1, 1, frames)
    spks = torch.randn(1, 80, generator=gen)
    times = []
    with torch.inference_mode():
        model.decoder(mu, mask, spks, cond)  # warm-up
        for _ in range(repeats):
            started = time.perf_counter()
            model.decoder(mu, mask, spks, cond)
            times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", default="100,250,500")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="flow_cpu.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = CausalMaskedDiffWithDiT(FlowConfig()).eval()
    params = sum(p.numel() for p in model.parameters())
    record: dict = {"device": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "params": params, "frames": {},
                    "command": " ".join(sys.argv)}
    for frames in (int(v) for v in args.frames.split(",")):
        times = time_solve(model, frames, args.repeats)
        median = statistics.median(times)
        record["frames"][frames] = {"median_s": median, "times_s": times,
                                    "audio_s": frames / 50, "rtf": median / (frames / 50)}
        print(f"{frames} frames ({frames / 50:.1f} s of mel): median {median:.2f} s of "
              f"{args.repeats} (min {min(times):.2f}, max {max(times):.2f}), "
              f"RTF {median / (frames / 50):.2f}", flush=True)
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
