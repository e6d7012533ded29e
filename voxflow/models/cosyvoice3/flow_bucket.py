"""CosyVoice3's flow solve over a (rows, frame bucket) ladder, captured per shape (spec §10).

The token2wav stage keeps the streaming contract of spec §9.7 (each request's hop loop and HiFT
state stay in `Token2WavSegment`), but no longer solves the flow itself: every flow call its
items need is a `FlowSolve` (conditioning built eagerly, spec §10 "prepare_solve"), and the
stage hands all of them, from every request in its batch, to `FlowBucketRunner.solve`. The
runner groups solves by frame bucket (the smallest rung of `flow_capture_frame_buckets` >= the
solve's frames T = prompt + generated), cuts each group into batches of at most
`flow_max_batch_size` rows, and runs each batch as one call of `forward` (10 Euler steps with
CFG over the whole batch, one streaming flag per row; spec §10 "solve_prepared"):

- a (rows, bucket) shape captured at start-up (`start`, CUDA, capture on) replays its graph on
  inputs padded to (smallest captured row count >= rows, bucket): padding frames are masked
  keys, padding rows have zero inputs and valid length 1 (spec §10 "Routing"), so each real
  row's mel equals the row alone (within float tolerance; exactly in exact arithmetic);
- any other call runs eagerly, padded only to the batch's longest row, which for one solve is
  exactly the unbatched solve (the served bytes of a lone request do not change). Why it is
  eager (CPU, capture off, past the ladder, failed capture) is in `status`, /health and the
  `voxflow_graph_runs_total{mode="eager"}` count.

Counts per call go to `stats` (`voxflow_bucket_calls_total{rows,bucket}`, the routed shape).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from voxflow.models.cosyvoice3.flow import N_TIMESTEPS, CausalMaskedDiffWithDiT, FlowConditioning
from voxflow.stages.bucketed import BucketStats, check_ladder
from voxflow.stages.graphs import GraphRunner

log = logging.getLogger(__name__)
CAPTURE_LOG_EVERY = 10  # start-up logs its capture progress every this many shapes


@dataclass
class FlowSolve:
    """One flow call of one segment (spec §9.7 item 3, 4 or 5), ready to solve.

    Attributes:
        cond: the segment's conditioning (`CausalMaskedDiffWithDiT.conditioning`): mu, cond
            float32 [1, 80, T], mask [1, 1, T], spks [1, 80], prompt_frames 2P (T frames, 50 fps).
        streaming: chunk-causal attention (a streamed, not final chunk) or full attention.
    """

    cond: FlowConditioning
    streaming: bool

    @property
    def frames(self) -> int:
        """T: prompt + generated mel frames the solve runs over (50 fps)."""
        return int(self.cond.mu.shape[2])


def _ladder(values: Sequence[int]) -> tuple[int, ...]:
    return check_ladder("ladder", values) if values else ()


class FlowBucketRunner:
    """Batched flow solves over the (rows, frame bucket) ladder (see the module docstring).

    Args:
        flow: the flow module (its `decoder` solves; weights shared, not copied).
        buckets: ascending frame buckets (`flow_capture_frame_buckets`); `()` captures nothing.
        batch_rows: ascending captured row counts (`flow_capture_batch_sizes`).
        max_batch_size: most rows in one call (`flow_max_batch_size`).
        batch_frames: capture only shapes with rows x bucket <= this
            (`flow_capture_batch_frames`; 0 captures nothing).
        capture_graphs: capture at `start` (CUDA only).
        device: the flow's device ("cpu", "cuda", "cuda:N").
    Raises:
        ValueError: a ladder that is not positive and ascending, or max_batch_size < 1.
    """

    def __init__(self, flow: CausalMaskedDiffWithDiT, buckets: Sequence[int],
                 batch_rows: Sequence[int], max_batch_size: int, batch_frames: int,
                 capture_graphs: bool, device: str) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.flow = flow
        self.buckets = _ladder(buckets)
        self.batch_rows = tuple(r for r in _ladder(batch_rows) if r <= max_batch_size)
        self.max_batch_size = max_batch_size
        self.batch_frames = batch_frames
        self.graphs = GraphRunner(self.forward, capture_graphs and bool(self.buckets)
                                  and batch_frames > 0, device)
        self.stats = BucketStats()

    # -- shapes ---------------------------------------------------------------------------

    def shapes(self) -> list[tuple[int, int]]:
        """Every (rows, bucket) to capture, largest first, within the rows x frames budget."""
        return [(r, b) for r in reversed(self.batch_rows) for b in reversed(self.buckets)
                if r * b <= self.batch_frames]

    def bucket(self, frames: int) -> int:
        """The smallest frame bucket >= `frames`; `frames` itself past the ladder (eager)."""
        for rung in self.buckets:
            if rung >= frames:
                return rung
        return frames

    def rows_rung(self, rows: int) -> int:
        """The smallest captured row count >= `rows`; `rows` itself when none is."""
        for rung in self.batch_rows:
            if rung >= rows:
                return rung
        return rows

    # -- start-up -------------------------------------------------------------------------

    def start(self) -> None:
        """Capture every shape of `shapes` (CUDA, capture on), or record why all run eagerly."""
        reason = self.graphs.eager_reason()
        if reason is None and not self.graphs.enabled:
            reason = "capture is off"
        shapes = self.shapes()
        if reason is not None:
            self.graphs.status["all"] = f"eager: {reason}"
            log.info("flow solves run eagerly (%s)", reason)
            return
        started = time.perf_counter()
        captured = 0
        with torch.inference_mode():
            for done, shape in enumerate(shapes, 1):
                captured += self.graphs.capture(shape, self.example_inputs(*shape))
                if done % CAPTURE_LOG_EVERY == 0 and done < len(shapes):
                    log.info("flow: %d of %d (rows, frames) shapes captured, %.1f s", done,
                             len(shapes), time.perf_counter() - started)
        log.info("flow: captured %d of %d (rows, frames) shapes in %.1f s (%d MiB)", captured,
                 len(shapes), self.graphs.capture_seconds, self.graphs.capture_bytes >> 20)

    def example_inputs(self, rows: int, bucket: int) -> dict[str, Tensor]:
        """Padding-only inputs of shape (rows, bucket) on the flow's device (for capture)."""
        return self.pack([], rows, bucket)

    # -- one call -------------------------------------------------------------------------

    def pack(self, solves: Sequence[FlowSolve], rows: int, frames: int) -> dict[str, Tensor]:
        """Inputs of shape (rows, frames): mu, cond float32 [rows, 80, frames], mask [rows, 1,
        frames] (1 on a row's own T frames), spks [rows, 80], streaming bool [rows]. Rows past
        `len(solves)` are padding: zeros, valid length 1.

        Raises:
            ValueError: more solves than rows, or a solve longer than `frames`.
        """
        if len(solves) > rows or any(s.frames > frames for s in solves):
            raise ValueError(f"{len(solves)} solves of up to "
                             f"{max((s.frames for s in solves), default=0)} frames do not fit "
                             f"({rows} rows, {frames} frames)")
        device = self.flow.input_embedding.weight.device
        dtype = torch.float32  # the solver's state, whatever the estimator's compute dtype
        bins = self.flow.output_size
        mu = torch.zeros(rows, bins, frames, device=device, dtype=dtype)
        cond = torch.zeros_like(mu)
        mask = torch.zeros(rows, 1, frames, device=device, dtype=dtype)
        mask[:, :, 0] = 1  # padding rows: valid length 1, so attention stays finite
        spks = torch.zeros(rows, bins, device=device, dtype=dtype)
        streaming = torch.zeros(rows, dtype=torch.bool, device=device)
        for i, s in enumerate(solves):
            t = s.frames
            mu[i, :, :t] = s.cond.mu[0]
            cond[i, :, :t] = s.cond.cond[0]
            mask[i, :, :t] = s.cond.mask[0]
            spks[i] = s.cond.spks[0]
            streaming[i] = s.streaming
        return {"mu": mu, "cond": cond, "mask": mask, "spks": spks, "streaming": streaming}

    @torch.inference_mode()
    def forward(self, inputs: dict[str, Any]) -> Tensor:
        """The fixed-shape solve (what is captured): mel float32 [rows, 80, frames], prompt
        frames included; no host reads of device values."""
        decoder = self.flow.decoder
        out: Tensor = decoder(inputs["mu"], inputs["mask"], inputs["spks"], inputs["cond"],
                              n_timesteps=N_TIMESTEPS, streaming=inputs["streaming"])
        return out

    @torch.inference_mode()
    def solve(self, solves: Sequence[FlowSolve]) -> list[Tensor]:
        """Mels of `solves`, in order: float32 [1, 80, T − 2P] each (prompt frames dropped),
        batched per frame bucket in calls of at most `max_batch_size` rows."""
        out: list[Tensor | None] = [None] * len(solves)
        groups: dict[int, list[int]] = {}
        for index, s in enumerate(solves):
            groups.setdefault(self.bucket(s.frames), []).append(index)
        for bucket, indices in groups.items():
            for start in range(0, len(indices), self.max_batch_size):
                part = indices[start:start + self.max_batch_size]
                mels = self._call([solves[i] for i in part], bucket)
                for i, mel in zip(part, mels, strict=True):
                    out[i] = mel
        return [mel for mel in out if mel is not None]

    def _call(self, solves: Sequence[FlowSolve], bucket: int) -> list[Tensor]:
        rows = self.rows_rung(len(solves))
        key = (rows, bucket)
        if key in self.graphs.graphs:
            mel, replayed = self.graphs.run(key, self.pack(solves, rows, bucket))
        else:  # eager: no padding beyond the batch's longest row (one row = the lone solve)
            frames = max(s.frames for s in solves)
            mel, replayed = self.forward(self.pack(solves, len(solves), frames)), False
        self.stats.record(key, sum(s.frames for s in solves), replayed)
        return [mel[i:i + 1, :, s.cond.prompt_frames:s.frames].float()
                for i, s in enumerate(solves)]

    def health(self) -> dict[str, Any]:
        """Captured shapes and the distinct eager reasons, for /health."""
        status = self.graphs.status
        captured = sum(1 for s in status.values() if s == "captured")
        eager = sorted({s for s in status.values() if s != "captured"})
        return {"captured": captured, "shapes": len(self.shapes()), "eager": eager}
