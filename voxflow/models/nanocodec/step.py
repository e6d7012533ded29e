"""One batched chunk step of NanoCodec streams: codes of B streams → their audio, with each
stream's caches read from and written back to its `StatePool` row on the decoder's device.

    codes [B, 8, T] int64 (checked) ─FSQ table─▶ latent [B, 32, T] ─decoder(state)─▶ audio
    [B, spf·T] (spf = 1024 full size, 96 tiny), every cache updated in place in its pool row.

Two ways to run a step (spec §6 "Device residency", "Graph capture"):

- eager: the rows' caches are pool views when the rows are adjacent and ascending (always at
  B = 1: no copy at all), else one gather (``index_select``) and one scatter (``index_copy_``)
  per layer by a row index, all on the device;
- a captured CUDA graph per (padded rows, T) for T in ``capture_chunk_frames``
  (`voxflow.stages.graphs.GraphRunner`, captured at `start`, largest first, one pool): the
  forward gathers and scatters by a static row-index tensor, so one graph serves any set of
  slots; rows padded up to the ladder point at the pool's scratch row, whose garbage no real
  row ever reads. Replay is only for T in ``capture_chunk_frames``; other lengths (a short last
  chunk) run eagerly (the spec allows a zero-padded last chunk; not done here).

Per step only the codes go to the device (none if they are there already: row indices are
made on the device once per set of rows); the audio stays on the device for the caller to read
back once. Nothing in the state is copied to the host or
synchronised. Batch rows decode independently (a conv's batch rows never mix), but a batched
conv may round differently from a lone one: rows match their lone decode within the spec's
tolerance, not bit for bit; the same batching twice is bit-identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from voxflow.models.nanocodec.fsq import NUM_GROUPS, codebook, lookup
from voxflow.models.nanocodec.stream import StatePool, StreamState
from voxflow.stages.bucketed import check_ladder, pick_rung
from voxflow.stages.graphs import GraphRunner

INDEX_CACHE = 1024


class ChunkStep:
    """Decodes one chunk for a batch of acquired slots of ``pool``.

    Args:
        pool: the slots (and the decoder) to decode with.
        capture_chunk_frames: chunk lengths (frames) to capture as CUDA graphs at `start`;
            empty = always eager (spec's ``codec_capture_chunk_frames: []``).
        batch_rows: ascending row counts a captured step is padded to (each captured per
            length); at most ``pool``'s slot count is useful.
        pad_to: if set, every step, replayed or eager (a short last chunk too), runs with
            exactly this many rows, the real ones and scratch rows, so a stream's audio never
            depends on how many others share its step: a conv's rows do not mix, but its
            kernel and rounding may change with the batch size (on the first H200 run, 2 of 4
            MagpieTTS requests at concurrency 8 came out up to 3 LSB off their lone decode).
            Must be the ladder's top rung; batches of more rows are refused.
    Raises:
        ValueError: a ladder that is not positive and ascending, or ``pad_to`` that is not
            its top rung.
    """

    def __init__(
        self,
        pool: StatePool,
        capture_chunk_frames: Sequence[int] = (),
        batch_rows: Sequence[int] = (1,),
        pad_to: int | None = None,
    ) -> None:
        self.pool = pool
        self.decoder = pool.decoder
        weight = self.decoder.pre_conv.conv.bias
        self.device = weight.device
        self.table = codebook(weight.dtype, weight.device)  # (2016, 4)
        self.capture_frames = tuple(sorted(set(capture_chunk_frames)))
        self.batch_rows = check_ladder("batch_rows", batch_rows)
        if pad_to is not None and pad_to != self.batch_rows[-1]:
            raise ValueError(f"pad_to {pad_to} must be the top of batch_rows {self.batch_rows}")
        self.pad_to = pad_to
        self.graphs = GraphRunner(self.forward, bool(self.capture_frames), str(self.device))
        self._indices: dict[tuple[int, ...], Tensor] = {}  # row tuples → device index tensors

    def row_index(self, rows: Sequence[int]) -> Tensor:
        """``rows`` as an int64 [R] tensor on the device, made once per distinct tuple (so a
        stream's steps upload nothing but their codes; at most `INDEX_CACHE` kept)."""
        key = tuple(rows)
        index = self._indices.get(key)
        if index is None:
            if len(self._indices) >= INDEX_CACHE:
                self._indices.clear()
            index = self._indices[key] = torch.tensor(key, dtype=torch.int64, device=self.device)
        return index

    def forward(self, inputs: dict[str, Tensor]) -> Tensor:
        """The fixed-shape step (what is captured): ``codes`` [R, 8, T] int64 and ``rows`` [R]
        int64 pool rows, both on the device → audio [R, spf·T] in the decoder's dtype. Gathers
        the rows' caches, decodes, scatters them back; a row listed twice is undefined (only
        the scratch row may repeat)."""
        with torch.inference_mode():
            rows = inputs["rows"]
            latent = lookup(self.table, inputs["codes"])  # (R, 32, T)
            state = [layer.index_select(0, rows) for layer in self.pool.layers]
            audio: Tensor = self.decoder(latent, state=state)
            for layer, cache in zip(self.pool.layers, state, strict=True):
                layer.index_copy_(0, rows, cache)
            return audio

    def start(self) -> None:
        """Capture (rows, T) for every ladder rung and captured length, largest first, on the
        scratch row only (no slot is touched); a no-op off CUDA (`GraphRunner.eager_reason`)."""
        reason = self.graphs.eager_reason()
        keys = [(r, t) for r in reversed(self.batch_rows) for t in reversed(self.capture_frames)]
        for key in keys:
            if reason is not None:
                self.graphs.status[key] = f"eager: {reason}"
            else:
                self.graphs.capture(key, self.example_inputs(*key))
        for layer in self.pool.layers:  # the warm-up calls left garbage there
            layer[self.pool.scratch_row].zero_()

    def example_inputs(self, rows: int, frames: int) -> dict[str, Tensor]:
        """Zero codes [rows, 8, frames] and every row on the scratch row, on the device."""
        return {
            "codes": torch.zeros(rows, NUM_GROUPS, frames, dtype=torch.int64, device=self.device),
            "rows": torch.full((rows,), self.pool.scratch_row, dtype=torch.int64,
                               device=self.device),
        }

    def run(
        self, slots: Sequence[StreamState], codes: Tensor, *, eager: bool = False
    ) -> tuple[Tensor, bool]:
        """Continue each slot's stream by its row of ``codes`` [B, 8, T] int64, already checked
        (fsq.check_tokens), on the host or the device; B = len(slots) distinct acquired slots of
        this pool, T ≥ 1. Returns (audio [B, spf·T] on the device, whether a graph replayed);
        each slot's ``frames`` advances by T. ``eager`` skips any captured graph (checks).

        Raises:
            ValueError: a shape mismatch or a slot repeated (shapes only: no value is read).
        """
        batch, frames = len(slots), codes.shape[-1]
        if codes.dim() != 3 or codes.shape[0] != batch or codes.shape[1] != NUM_GROUPS:
            raise ValueError(f"codes must be [{batch}, {NUM_GROUPS}, T], got {list(codes.shape)}")
        if frames < 1:
            raise ValueError("a chunk needs at least one frame")
        if self.pad_to is not None and batch > self.pad_to:
            raise ValueError(f"a step pads to {self.pad_to} rows: {batch} streams are too many")
        index = [slot.index for slot in slots]
        mine = self.pool.slots
        if len(set(index)) != batch or any(
            not 0 <= i < len(mine) or mine[i] is not slot
            for i, slot in zip(index, slots, strict=True)
        ):
            raise ValueError("a step needs distinct slots of its own pool")
        audio, replayed = self._decode(index, codes.to(torch.int64), eager)
        for slot in slots:
            slot.frames += frames
        return audio, replayed

    def _decode(self, index: list[int], codes: Tensor, eager: bool) -> tuple[Tensor, bool]:
        batch, frames = codes.shape[0], codes.shape[-1]
        rows = pick_rung(self.batch_rows, batch, "row count") if batch <= self.batch_rows[-1] \
            else batch
        captured = not eager and (rows, frames) in self.graphs.graphs
        if captured or self.pad_to is not None:
            padded = index + [self.pool.scratch_row] * (rows - batch)
            inputs: dict[str, Any] = {
                "codes": torch.cat([codes, codes.new_zeros(rows - batch, NUM_GROUPS, frames)]),
                "rows": self.row_index(padded),
            }
            if captured:
                audio, replayed = self.graphs.run((rows, frames), inputs)
                return audio[:batch], replayed
            inputs["codes"] = inputs["codes"].to(self.device)
            return self.forward(inputs)[:batch], False
        codes = codes.to(self.device)
        first = index[0]
        if index == list(range(first, first + batch)):  # adjacent rows: the pool's own views
            with torch.inference_mode():
                latent = lookup(self.table, codes)
                state = [layer[first : first + batch] for layer in self.pool.layers]
                return self.decoder(latent, state=state), False
        return self.forward({"codes": codes, "rows": self.row_index(index)}), False
