"""GPU check of the bucketed stage kind: capture per (rows, bucket), replay == eager, padded ==
unpadded, replay vs eager time, capture time and memory. Writes one JSON.

The stage is a stand-in for CosyVoice3's flow solve: a 10-step Euler solve of a small
per-frame MLP velocity field conditioned on a mel-like input, over (rows, 80, frames) float32,
masked so padded frames and rows cannot reach real ones (every op is per frame or per row).
It is built on `voxflow.stages.bucketed.BucketedStage`, so what is checked is the engine's own
capture path (`voxflow.stages.graphs.GraphRunner`), not a copy of it.

Run from the repository root (on a machine with CUDA; on CPU it runs eagerly and says so):

    .venv/bin/python benchmarks/gpu/graph_capture.py --out graph_capture.json

Checks recorded (each true/false with its figures): every shape captured; replay equals eager
(max abs difference per shape); padded rows equal the same rows run alone; replay faster than
eager per shape (median of `--repeats` calls, device-synchronized).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from voxflow.stages.bucketed import BucketedStage  # noqa: E402
from voxflow.stages.items import RequestInfo, StageBatch, StageItem  # noqa: E402
from voxflow.stages.outputs import Audio  # noqa: E402

MELS = 80
STEPS = 10  # CosyVoice3's flow-matching solve takes 10 Euler steps


class FlowLikeStage(BucketedStage):
    """(frames, 80) conditioning -> (frames, 80) output by a fixed-step solve; see above."""

    name = "flow"

    def __init__(self, device: str, capture: bool, buckets, rows, hidden: int = 512):
        super().__init__(buckets, rows, capture_graphs=capture, device=device)
        gen = torch.Generator().manual_seed(0)
        self.w1 = (torch.randn(2 * MELS + 1, hidden, generator=gen) / 13).to(device)
        self.w2 = (torch.randn(hidden, MELS, generator=gen) / 23).to(device)
        self.device = device

    def size(self, item: StageItem) -> int:
        return int(item.payload.shape[0])

    def pack(self, batch: StageBatch, rows: int, bucket: int) -> dict:
        cond = torch.zeros(rows, bucket, MELS)
        mask = torch.zeros(rows, bucket, 1)
        for i, item in enumerate(batch):
            n = item.payload.shape[0]
            cond[i, :n] = torch.from_numpy(item.payload)
            mask[i, :n] = 1.0
        noise = torch.zeros(rows, bucket, MELS)
        for i, item in enumerate(batch):  # per-row noise from the row's own seed
            gen = torch.Generator().manual_seed(item.request.seed)
            n = item.payload.shape[0]
            noise[i, :n] = torch.randn(n, MELS, generator=gen)
        return {k: v.to(self.device) for k, v in
                {"cond": cond, "mask": mask, "x": noise}.items()}

    def forward(self, inputs: dict) -> torch.Tensor:
        x, cond, mask = inputs["x"], inputs["cond"], inputs["mask"]
        dt = 1.0 / STEPS
        for k in range(STEPS):
            t = torch.full_like(mask, k * dt)
            h = torch.tanh(torch.cat([x, cond, t], dim=-1) @ self.w1)
            x = x + dt * (h @ self.w2) * mask
        return x

    def unpack(self, outputs: torch.Tensor, batch: StageBatch) -> list:
        out = outputs.float().cpu().numpy()
        return [Audio(out[i, : item.payload.shape[0]].reshape(-1).copy())
                for i, item in enumerate(batch)]

    def example_inputs(self, rows: int, bucket: int) -> dict:
        return {"cond": torch.zeros(rows, bucket, MELS, device=self.device),
                "mask": torch.ones(rows, bucket, 1, device=self.device),
                "x": torch.zeros(rows, bucket, MELS, device=self.device)}


def _item(seed: int, frames: int) -> StageItem:
    rng = np.random.default_rng(seed)
    info = RequestInfo(f"r{seed}", "flow", "v", None, seed, True)
    return StageItem(info, 0, rng.standard_normal((frames, MELS)).astype(np.float32))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="graph_capture.json")
    parser.add_argument("--buckets", default="64,128,256,512")
    parser.add_argument("--rows", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    buckets = [int(v) for v in args.buckets.split(",")]
    rows = [int(v) for v in args.rows.split(",")]

    captured = FlowLikeStage(device, True, buckets, rows)
    started = time.perf_counter()
    captured.start()
    start_s = time.perf_counter() - started
    eager = FlowLikeStage(device, False, buckets, rows)
    eager.start()

    shapes = []
    for r in rows:
        for b in buckets:
            batch = StageBatch.of([_item(100 * r + i, max(1, b - 3 * i)) for i in range(r)])
            got = captured.run(batch)
            want = eager.run(batch)
            diff = max(float(np.max(np.abs(g.samples - w.samples)))
                       for g, w in zip(got, want, strict=True))
            replay_s = _timed(lambda batch=batch: captured.run(batch), device, args.repeats)
            eager_s = _timed(lambda batch=batch: eager.run(batch), device, args.repeats)
            shapes.append({"rows": r, "bucket": b, "status": captured.graphs.status.get((r, b)),
                           "max_abs_diff_vs_eager": diff, "replay_s": replay_s,
                           "eager_s": eager_s, "speedup": eager_s / replay_s})
    # padded == unpadded: three rows of different lengths (one per bucket, padded to the top
    # one together) vs each alone
    top = buckets[-1]
    items = [_item(1, max(1, top // 3)), _item(2, max(1, top - 28)), _item(3, top)][: rows[-1]]
    together = captured.run(StageBatch.of(items))
    alone = [captured.run(StageBatch.of([i]))[0] for i in items]
    pad_diff = max(float(np.max(np.abs(a.samples - b.samples)))
                   for a, b in zip(together, alone, strict=True))

    all_captured = all(s["status"] == "captured" for s in shapes)
    record = {
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "start_s": start_s,
        "capture_seconds": captured.graphs.capture_seconds,
        "capture_bytes": captured.graphs.capture_bytes,
        "health": captured.health(),
        "shapes": shapes,
        "padded_vs_alone_max_abs_diff": pad_diff,
        "checks": {
            "every_shape_captured": all_captured,
            "replay_equals_eager": all(s["max_abs_diff_vs_eager"] <= 1e-5 for s in shapes),
            "padded_equals_unpadded": pad_diff <= 1e-5,
            "replay_faster_than_eager": all(s["speedup"] > 1 for s in shapes) and all_captured,
        },
        "command": " ".join(sys.argv),
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record["checks"]), f"start {start_s:.1f} s", f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
