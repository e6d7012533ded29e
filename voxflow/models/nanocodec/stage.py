"""The NanoCodec engine stage: chunks of a request's codec codes in, its audio out, streamed
with exact causal state (spec §6, §8.2 "codec", §9).

Payload in: one part of a segment's codes, (8, T) integers (codebook-major, ids 0..2015, T ≥ 0
frames; a numpy array or a torch tensor anywhere). Output: `Audio` of that part, float32 at
22,050 Hz, 1024 samples per decoded frame (tiny fixture: 96), possibly empty.

Chunking is the stage's own and depends only on the codes: a segment's frames queue up and are
decoded ``chunk_frames`` at a time (spec's ``codec_chunk_frames``, default 4); the segment's
final part decodes what is left as one shorter chunk. So however the upstream stage splits a
segment into parts, the same codes give the same chunks and the same bytes (and the HTTP
``stream`` flag cannot change them); a part that completes no chunk returns empty `Audio`.

State (the engine's contract, voxflow/stages/state.py, as CosyVoice3's token2wav stage): per
request a `CodecStream` in a `RequestStates`, created on its first item. Its segment's caches
live in one `StatePool` slot on the decoder's device, taken on the segment's first chunk,
zeroed and returned on the segment's final part and, through `release`, when the request ends
however it ends (finish, failure, timeout, cancel); a run still in flight for a released
request returns the slot when it finishes, never while it writes to it. Between chunks the
caches never leave the device. `live_states` and `state_bytes` (slots in use × 186,816 values ×
4 bytes full size, plus queued codes) feed ``voxflow_stage_states`` and
``voxflow_stage_state_bytes`` and return to 0 when requests end. `events` counts the codec
chunks decoded, the batched steps that decoded them and the steps replayed from a captured
graph (``voxflow_stage_events_total{stage="codec"}``: per-chunk rates in the served path).

Batching: the pool keeps each layer's caches of every slot in one tensor (a row per slot), so
items of different requests (one per request: ``in_order``) whose chunks have the same length
decode as one batched step (`ChunkStep`: views for adjacent rows, else a gather and scatter by
row index on the device; a captured graph per (rows, chunk length) on CUDA). Rows of one batch
differ from a lone decode only by rounding (within 5e-5 on the tiny fixture).

Errors are per item: bad codes (`CodeError`: dtype, shape, ids outside 0..2015, spec §9), a full
pool (`PoolExhausted`), a released request (`StateReleased`), or a failed decode fail only
their own request.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from voxflow.models.nanocodec.fsq import NUM_GROUPS, CodeError, check_tokens
from voxflow.models.nanocodec.step import ChunkStep
from voxflow.models.nanocodec.stream import StatePool, StreamState
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, StageOutput
from voxflow.stages.stage import Stage
from voxflow.stages.state import HoldsRequestStates, RequestStates, StateReleased


@dataclass(eq=False)
class CodecStream:
    """A request's codec state: its open segment (-1: none), that segment's pool slot (None
    until its first chunk), codes queued for the next chunk (8, n) int64 on the host, and
    whether a run is using it (``busy``) or the request ended (``closed``)."""

    segment: int = -1
    slot: StreamState | None = None
    pending: np.ndarray = field(default_factory=lambda: np.zeros((NUM_GROUPS, 0), np.int64))
    busy: bool = False
    closed: bool = False


def check_codes(payload: Any) -> np.ndarray:
    """A part's codes as (8, T) int64 on the host. Raises `CodeError` for anything that is not
    an (8, T) integer array of ids 0..2015 (spec §9)."""
    if isinstance(payload, Tensor):
        tokens = payload.detach().cpu()
    elif isinstance(payload, np.ndarray):
        if payload.dtype.kind not in "iu":
            raise CodeError(f"codec tokens must be integers, got {payload.dtype}")
        tokens = torch.from_numpy(payload.astype(np.int64, copy=False))
    else:
        raise CodeError(f"codec tokens must be an array or a tensor, got {type(payload).__name__}")
    if tokens.dim() != 2:
        raise CodeError(f"a codec part must be ({NUM_GROUPS}, T), got {list(tokens.shape)}")
    check_tokens(tokens[None])
    return np.ascontiguousarray(tokens.to(torch.int64).numpy())


class NanoCodecStage(HoldsRequestStates, Stage):
    """Streams NanoCodec decodes per request (see the module docstring).

    Args:
        pool: the decoder and its preallocated stream slots (``max_streams``: at least the
            engine's ``max_inflight_requests``, or a request past it fails with
            `PoolExhausted`).
        chunk_frames: frames per decoded chunk mid-stream (≥ 1; the spec's default 4).
        capture_chunk_frames: chunk lengths to capture as CUDA graphs at `start` (CUDA only;
            default: ``chunk_frames`` alone, the only mid-stream length).
        max_batch_size: most requests' items in one run.
        batch_invariant: pad every chunk step to ``max_batch_size`` rows, replayed or eager
            (`ChunkStep`'s ``pad_to``), so a request's bytes never depend on what else is
            decoded with it; otherwise a step pads to the ladder 1, 2, 4, ... only when a
            graph replays, and runs its own row count eagerly.
        workers: worker threads.
    Raises:
        ValueError: ``chunk_frames`` < 1, or ladders that are not ascending.
    """

    name = "codec"
    in_order = True

    def __init__(
        self,
        pool: StatePool,
        chunk_frames: int = 4,
        capture_chunk_frames: Sequence[int] | None = None,
        max_batch_size: int = 8,
        batch_invariant: bool = True,
        workers: int = 1,
    ) -> None:
        if chunk_frames < 1:
            raise ValueError(f"chunk_frames must be >= 1, got {chunk_frames}")
        super().__init__(max_batch_size=max_batch_size, workers=workers)
        self.pool = pool
        self.chunk_frames = chunk_frames
        rows = [max_batch_size] if batch_invariant else \
            [r for r in (1, 2, 4, 8, 16, 32, 64) if r < max_batch_size] + [max_batch_size]
        self.step = ChunkStep(pool, (chunk_frames,) if capture_chunk_frames is None
                              else capture_chunk_frames, rows,
                              pad_to=max_batch_size if batch_invariant else None)
        self.states: RequestStates[CodecStream] = RequestStates(lambda _: CodecStream(),
                                                                self._free)
        self._lock = threading.Lock()
        self._counts = {"chunks": 0, "steps": 0, "steps_replayed": 0}

    def start(self) -> None:
        """Capture the chunk step's graphs (CUDA only; elsewhere it runs eagerly)."""
        self.step.start()

    def run(self, batch: StageBatch) -> list[StageOutput]:
        """One output per item: `Audio` of the chunks its part completes (float32 on the host,
        spf samples per frame; empty if none), or that item's exception (`CodeError`,
        `PoolExhausted`, `StateReleased`, a decode error). Never raises for one item."""
        outputs: list[StageOutput | None] = [None] * len(batch)
        streams: dict[int, CodecStream] = {}
        chunks: dict[int, list[np.ndarray]] = {}
        for i, item in enumerate(batch):
            try:
                streams[i], chunks[i] = self._plan(item)
            except Exception as exc:  # noqa: BLE001 (that item's request fails alone)
                outputs[i] = exc
        pieces: dict[int, list[Tensor]] = {i: [] for i in streams}
        try:
            self._decode(streams, chunks, pieces, outputs)
            for i, stream in streams.items():
                if outputs[i] is None:
                    outputs[i] = self._emit(batch[i], stream, pieces[i])
        finally:
            for stream in streams.values():
                self._done(stream)
        return [out if out is not None else Audio.empty() for out in outputs]

    def _plan(self, item: StageItem) -> tuple[CodecStream, list[np.ndarray]]:
        """Queue the item's codes on its stream; the chunks (8, t) it completes, in order."""
        codes = check_codes(item.payload)
        stream = self.states.get_or_create(item.request.request_id)
        with self._lock:
            if stream.closed:
                raise RuntimeError(f"request {item.request.request_id} already ended")
            stream.busy = True
        try:
            if stream.segment != item.segment:  # a new segment starts from zero state
                self._drop_slot(stream)
                stream.segment = item.segment
                stream.pending = np.zeros((NUM_GROUPS, 0), np.int64)
            pending = np.concatenate([stream.pending, codes], axis=1)
            n = self.chunk_frames
            cut = pending.shape[1] if item.final else pending.shape[1] - pending.shape[1] % n
            out = [pending[:, a : min(a + n, cut)] for a in range(0, cut, n)]
            if out and stream.slot is None:
                stream.slot = self.pool.acquire(item.request.request_id, item.segment)
            stream.pending = pending[:, cut:]
        except BaseException:
            self._done(stream)
            raise
        return stream, out

    def _decode(
        self,
        streams: dict[int, CodecStream],
        chunks: dict[int, list[np.ndarray]],
        pieces: dict[int, list[Tensor]],
        outputs: list[StageOutput | None],
    ) -> None:
        """Round r decodes every item's r-th chunk, items of equal chunk length batched."""
        rounds = max((len(c) for c in chunks.values()), default=0)
        for r in range(rounds):
            groups: dict[int, list[int]] = {}
            for i, item_chunks in chunks.items():
                if streams[i].closed and outputs[i] is None:  # its request ended meanwhile
                    outputs[i] = StateReleased(f"request ended after {r} of its chunks")
                if r < len(item_chunks) and outputs[i] is None:
                    groups.setdefault(item_chunks[r].shape[1], []).append(i)
            for members in groups.values():
                slots = [streams[i].slot for i in members]
                codes = torch.from_numpy(np.stack([chunks[i][r] for i in members]))
                try:
                    audio, replayed = self.step.run([s for s in slots if s is not None], codes)
                except Exception as exc:  # noqa: BLE001 (those requests fail, others go on)
                    for i in members:
                        outputs[i] = exc
                    continue
                with self._lock:
                    self._counts["chunks"] += len(members)
                    self._counts["steps"] += 1
                    self._counts["steps_replayed"] += int(replayed)
                for row, i in enumerate(members):
                    pieces[i].append(audio[row])

    def _emit(self, item: StageItem, stream: CodecStream, pieces: list[Tensor]) -> Audio:
        """The item's audio on the host (one read-back); a final part closes its segment."""
        if item.final:
            self._drop_slot(stream)
            stream.segment = -1
        if not pieces:
            return Audio.empty()
        audio = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        return Audio(audio.to(device="cpu", dtype=torch.float32).numpy())

    def _drop_slot(self, stream: CodecStream) -> None:
        if stream.slot is not None:
            slot, stream.slot = stream.slot, None
            self.pool.release(slot)

    def _done(self, stream: CodecStream) -> None:
        """A run ended with ``stream``: free its slot now if its request ended meanwhile."""
        with self._lock:
            stream.busy = False
            closed = stream.closed
        if closed:
            self._drop_slot(stream)

    def _free(self, stream: CodecStream) -> None:
        """`RequestStates`' free: the slot goes back now, or when the run using it ends."""
        with self._lock:
            stream.closed = True
            busy = stream.busy
        if not busy:
            self._drop_slot(stream)

    def state_bytes(self) -> int:
        """Bytes of the stream slots in use (on the decoder's device) and the queued codes."""
        queued = sum(s.pending.nbytes for s in self.states.values())
        return self.pool.in_use * self.pool.slot_bytes + queued

    def events(self) -> dict[str, int]:
        """Codec chunks decoded (one per request per step), the batched chunk steps that
        decoded them, and those of the steps replayed from a captured graph
        (``voxflow_stage_events_total{stage="codec"}``)."""
        with self._lock:
            return dict(self._counts)

    def health(self) -> dict[str, Any]:
        status = self.step.graphs.status
        captured = sum(1 for s in status.values() if s == "captured")
        return {
            "chunk_frames": self.chunk_frames,
            "streams": {"in_use": self.pool.in_use, "max": len(self.pool.slots)},
            "graphs": {"captured": captured, "shapes": len(status),
                       "eager": sorted({s for s in status.values() if s != "captured"})},
        }
