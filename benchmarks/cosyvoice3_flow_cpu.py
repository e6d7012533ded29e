"""CPU timing of CosyVoice3's flow solve at full size, random weights, batch 1: eager, and the
DiT estimator compiled per frame bucket (`torch.compile`) or traced and frozen (`torch.jit`).

Times the 10-step Euler solve with classifier-free guidance as twin rows (spec §6) on mu/cond/
speaker inputs of T mel frames (50 fps), non-streaming mask, float32, after one warm-up call per
size (for `compile` and `trace` the warm-up is the compile, timed apart); prints and writes the
median of `--repeats` calls per (mode, frames), and for the compiled modes the largest absolute
difference from the eager mel on the same inputs (spec §1: a 10-step solve within 1e-4).
Random weights: only the time means anything (the output is noise). Issue 10 asked for 100, 250
and 500 frames eager, median of 5, as the CPU baseline; issue 11 for eager vs compiled.

    .venv/bin/python benchmarks/cosyvoice3_flow_cpu.py --frames 100,250,500 --repeats 5 \
        --out flow_cpu.json
    .venv/bin/python benchmarks/cosyvoice3_flow_cpu.py --modes eager,compile,trace \
        --frames 100,250 --repeats 3 --out flow_cpu_compile.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig  # noqa: E402

MODES = ("eager", "compile", "trace")


class FixedMask(nn.Module):
    """The estimator with its `streaming` flag fixed (what `torch.jit.trace` can record)."""

    def __init__(self, estimator: nn.Module, streaming: bool = False) -> None:
        super().__init__()
        self.inner = estimator
        self.streaming = streaming

    def forward(self, x: Tensor, mask: Tensor, mu: Tensor, t: Tensor, spks: Tensor,
                cond: Tensor) -> Tensor:
        out: Tensor = self.inner(x, mask, mu, t, spks, cond, streaming=self.streaming)
        return out


class Swapped(nn.Module):
    """Calls `compiled(x, mask, mu, t, spks, cond)`, accepting the `streaming` keyword the
    solve passes (it must equal the one the compiled module was built for)."""

    def __init__(self, compiled: Callable[..., Tensor]) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, x: Tensor, mask: Tensor, mu: Tensor, t: Tensor, spks: Tensor,
                cond: Tensor, streaming: bool = False) -> Tensor:
        return self.compiled(x, mask, mu, t, spks, cond)


def inputs(frames: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """mu [1, 80, T] (random), mask [1, 1, T] ones, spks [1, 80] (random), cond [1, 80, T]
    zeros: the same inputs for every mode at one size."""
    gen = torch.Generator().manual_seed(frames)
    mu = torch.randn(1, 80, frames, generator=gen)
    spks = torch.randn(1, 80, generator=gen)
    return mu, torch.ones(1, 1, frames), spks, torch.zeros(1, 80, frames)


def estimator_for(estimator: nn.Module, mode: str, frames: int) -> nn.Module:
    """The eager DiT `estimator` as `mode` runs it for T = `frames` (compiled for that shape
    only)."""
    if mode == "eager":
        return estimator
    if mode == "compile":
        return Swapped(torch.compile(FixedMask(estimator), dynamic=False))
    # trace: the CFG twin rows are batch 2; t is [2]
    mu, mask, spks, cond = inputs(frames)
    example = (torch.cat((mu, mu)), torch.cat((mask, mask)), torch.cat((mu, mu)),
               torch.full((2,), 0.5), torch.cat((spks, spks)), torch.cat((cond, cond)))
    with torch.no_grad():
        traced = torch.jit.trace(FixedMask(estimator).eval(), example, check_trace=False)
        return Swapped(torch.jit.freeze(traced))


def time_solve(model: CausalMaskedDiffWithDiT, frames: int, repeats: int,
               modes: list[str]) -> dict[str, tuple[list[float], float, Tensor]]:
    """Per mode: (seconds of each of `repeats` solves over `frames` frames, seconds of the
    warm-up call (with the compile for `compile`/`trace`), the mel of the last call
    [1, 80, T]). The modes take turns within each repeat, so a change in machine load hits
    them alike."""
    mu, mask, spks, cond = inputs(frames)
    decoder = model.decoder
    eager = decoder.estimator
    built: dict[str, nn.Module] = {}
    out: dict[str, tuple[list[float], float, Tensor]] = {}
    try:
        with torch.inference_mode():
            for mode in modes:
                started = time.perf_counter()
                decoder.estimator = built[mode] = estimator_for(eager, mode, frames)
                mel = decoder(mu, mask, spks, cond)  # warm-up (and compile)
                out[mode] = ([], time.perf_counter() - started, mel)
            for _ in range(repeats):
                for mode in modes:
                    decoder.estimator = built[mode]
                    started = time.perf_counter()
                    mel = decoder(mu, mask, spks, cond)
                    times, warmup, _ = out[mode]
                    times.append(time.perf_counter() - started)
                    out[mode] = (times, warmup, mel)
    finally:
        decoder.estimator = eager
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", default="100,250,500")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="eager", help=f"comma-separated, of {MODES}")
    parser.add_argument("--out", default="flow_cpu.json")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        parser.error(f"unknown mode {bad[0]} (choose from {', '.join(MODES)})")
    torch.manual_seed(0)
    model = CausalMaskedDiffWithDiT(FlowConfig()).eval()
    params = sum(p.numel() for p in model.parameters())
    record: dict = {"device": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__, "params": params, "frames": {}, "modes": {},
                    "load_before": os.getloadavg(), "command": " ".join(sys.argv)}
    for frames in (int(v) for v in args.frames.split(",")):
        results = time_solve(model, frames, args.repeats, modes)
        reference = results["eager"][2] if "eager" in results else None
        for mode, (times, warmup, mel) in results.items():
            median = statistics.median(times)
            entry = {"median_s": median, "times_s": times, "warmup_s": warmup,
                     "audio_s": frames / 50, "rtf": median / (frames / 50)}
            if mode != "eager" and reference is not None:
                entry["max_abs_diff_vs_eager"] = float((mel - reference).abs().max())
            record["modes"].setdefault(mode, {})[frames] = entry
            if mode == "eager":
                record["frames"][frames] = entry  # the issue-10 layout, kept
            diff = entry.get("max_abs_diff_vs_eager")
            print(f"{mode} {frames} frames ({frames / 50:.1f} s of mel): median {median:.2f} s "
                  f"of {args.repeats} (min {min(times):.2f}, max {max(times):.2f}), "
                  f"RTF {median / (frames / 50):.2f}, warm-up {warmup:.1f} s"
                  + (f", max |diff| vs eager {diff:.2e}" if diff is not None else ""),
                  flush=True)
        record["load_after"] = os.getloadavg()
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
