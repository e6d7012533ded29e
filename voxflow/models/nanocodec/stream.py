"""Streaming NanoCodec decode with exact causal state held on the model's device (spec §6).

A stream's state is every causal layer's cache (config.cache_inventory: 97 tensors, 186,816
values per item at full size), allocated on the decoder's device and dtype, zero at the start
(zeros are NeMo's padding, not silence codes), and updated in place by each chunk. Per chunk
only the latent goes in and only the audio comes out: nothing in the state is copied to the host
or synchronised (no ``.cpu()``, ``.item()``).

Lifetime (engine contract, voxflow/stages/state.py): a `StatePool` preallocates
``max_streams`` slots at start-up; `StatePool.acquire` hands one to a request (zeroed) and
`StatePool.release` takes it back on its last chunk, cancellation or failure, so
``RequestStates(create=pool.acquire, free=pool.release)`` ties a slot to a request's life.

The pieces of a stream concatenate to the one-shot decode of the whole latent, whatever the
split (fp64 within 1e-11; fp32 within 5e-5 on the tiny decoder); the same split twice is
bit-identical. Never compare hashes across chunk widths (spec §6 "Numerics").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch
from torch import Tensor

from voxflow.models.nanocodec.config import CacheSpec, cache_inventory
from voxflow.models.nanocodec.decoder import NanoCodecDecoder


class PoolExhausted(RuntimeError):
    """Every stream slot is in use (raise it as a retryable overload, not a failure)."""


@dataclass(eq=False)  # identity, not tensor comparison
class StreamState:
    """One stream slot: the caches [B, C, columns] in inventory order, frames decoded so far,
    the owner (request id and segment index) while acquired, and its row in its `StatePool`
    (-1 outside a pool)."""

    caches: list[Tensor]
    frames: int = 0
    owner: tuple[str, int] | None = None
    index: int = field(default=-1)

    @property
    def numel(self) -> int:
        """State values held (per slot, all items): 186,816 per item at full size."""
        return sum(c.numel() for c in self.caches)

    def reset(self) -> None:
        """Zero every cache in place (on its device) and forget frames and owner."""
        for cache in self.caches:
            cache.zero_()
        self.frames = 0
        self.owner = None


def allocate_state(
    inventory: list[CacheSpec], *, batch: int, dtype: torch.dtype, device: torch.device
) -> StreamState:
    """Zeroed caches for ``batch`` streams decoded together, [batch, C, columns] each."""
    # Normal tensors, not inference tensors: `reset` zeroes them outside inference mode too.
    caches = [torch.zeros(batch, s.channels, s.columns, dtype=dtype, device=device)
              for s in inventory]
    return StreamState(caches)


class StatePool:
    """``max_streams`` preallocated `StreamState` slots (batch 1 each) on the decoder's device.

    Layout: one zeroed tensor per causal layer, ``layers[k]`` [max_streams + 1, C_k, P_k]; slot
    i's caches are the row views ``layers[k][i:i+1]`` (in place: a slot's update is the pool's),
    and the last row (`scratch_row`) belongs to no slot: padded rows of a fixed-shape batched step
    read and write it. So a batch of slots is one gather and one scatter per layer by a row index
    (nano-vllm's slot −1, engine-anchors.md (b) 6), or plain views when its rows are adjacent.

    The inventory is computed from the config and checked before anything is allocated
    (config.cache_inventory raises ValueError past its limit). Thread-safe.
    """

    def __init__(self, decoder: NanoCodecDecoder, max_streams: int) -> None:
        if max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {max_streams}")
        self.decoder = decoder
        self.inventory = cache_inventory(decoder.config)
        if len(self.inventory) != decoder.num_slots:
            raise ValueError(f"decoder has {decoder.num_slots} causal layers, the inventory "
                             f"{len(self.inventory)}")
        weight = decoder.pre_conv.conv.bias
        # Normal tensors, not inference tensors: `reset` zeroes them outside inference mode too.
        self.layers = [torch.zeros(max_streams + 1, s.channels, s.columns, dtype=weight.dtype,
                                   device=weight.device) for s in self.inventory]
        self.scratch_row = max_streams
        self.slots = [StreamState([layer[i : i + 1] for layer in self.layers], index=i)
                      for i in range(max_streams)]
        self._free = list(reversed(self.slots))
        self._lock = threading.Lock()

    @property
    def slot_bytes(self) -> int:
        """Bytes of one slot's caches (747,264 full size in float32)."""
        return sum(c.numel() * c.element_size() for c in self.slots[0].caches)

    @property
    def in_use(self) -> int:
        """Slots acquired and not yet released (the gauge's value)."""
        with self._lock:
            return len(self.slots) - len(self._free)

    def acquire(self, request_id: str, segment: int = 0) -> StreamState:
        """A zeroed slot owned by (request_id, segment). Raises `PoolExhausted`."""
        with self._lock:
            if not self._free:
                raise PoolExhausted(f"all {len(self.slots)} codec stream slots are in use")
            state = self._free.pop()
        state.reset()
        state.owner = (request_id, segment)
        return state

    def release(self, state: StreamState) -> None:
        """Return ``state`` to the pool (zeroed now, so a stale slot never leaks audio).
        Raises ValueError if it is not one of this pool's acquired slots."""
        with self._lock:
            if state.index < 0 or self.slots[state.index] is not state or any(
                free is state for free in self._free
            ):
                raise ValueError("this stream state is not an acquired slot of this pool")
            state.reset()
            self._free.append(state)


@torch.inference_mode()
def decode_chunk(decoder: NanoCodecDecoder, state: StreamState, latent: Tensor) -> Tensor:
    """Continue ``state``'s stream by latent [B, 32, T] (on the decoder's device and dtype,
    B equal to the state's) → audio [B, spf·T], also on that device. Updates the caches in place
    and ``state.frames``. T ≥ 1; any T works mid-stream (the eager path has no fixed shape).
    Raises ValueError on a batch or channel mismatch (shapes only: no value is read)."""
    batch = state.caches[0].shape[0]
    if latent.dim() != 3 or latent.shape[0] != batch or latent.shape[1] != decoder.config.input_dim:
        raise ValueError(f"latent must be [{batch}, {decoder.config.input_dim}, T], got "
                         f"{list(latent.shape)}")
    if latent.shape[-1] < 1:
        raise ValueError("a chunk needs at least one frame")
    audio = decoder(latent, state=state.caches)
    state.frames += latent.shape[-1]
    return audio


@torch.inference_mode()
def decode(decoder: NanoCodecDecoder, latent: Tensor, lengths: Tensor | None = None) -> Tensor:
    """One-shot decode: latent [B, 32, T] (lengths [B] frames, optional) → audio [B, spf·T];
    samples past an item's spf·length are exactly 0."""
    if latent.dim() != 3 or latent.shape[1] != decoder.config.input_dim:
        raise ValueError(f"latent must be [B, {decoder.config.input_dim}, T], got "
                         f"{list(latent.shape)}")
    audio: Tensor = decoder(latent, lengths)
    return audio
