"""The autoregressive stage kind: continuous batching at every decode step.

An autoregressive stage (a speech-token LLM: CosyVoice3's Qwen2 LM, MagpieTTS's decoder) turns
one segment into a stream of tokens, one step at a time. The engine's loop for it
(`voxflow.engine.ar_loop`) keeps a running set of at most `max_batch_size` segments:

- between two steps, segments waiting in the queue join (earliest playback deadline first) while
  there is room; a step never waits for a batch to fill;
- a joining segment's first step (prefill, ``step == 0``) runs in a batch of its own kind
  before the running set's next decode step, so a long generation cannot starve a new
  request's time to first audio;
- a segment whose step says ``done`` leaves, and its decode state is freed (`end`) after that
  step; a cancelled request's segments leave at the next step boundary, state freed the same way.

Emission follows anchors rec. 3 and 8 (engine-anchors.md): a step may emit a payload part for
the next stage (e.g. a hop of 25 tokens plus lookahead); the emitted parts of a segment reach the
next stage in order, and the step that finishes a segment must emit its last part (a max-length
finish still flushes), which closes the segment downstream.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.stage import Stage

S = TypeVar("S")


@dataclass(frozen=True)
class Step:
    """One item's result of one decode step.

    Attributes:
        emit: a payload part for the next stage (tokens of one hop), or None for nothing yet.
        done: the segment's generation ended (stop token or length cap); `emit` must then hold
            its last part (possibly empty) and the segment's decode state is freed.
    """

    emit: Any = None
    done: bool = False


class AutoregressiveStage(Stage, Generic[S]):
    """A stage run step by step over a running set of segments (see the module docstring).

    Subclasses implement `begin` (per-segment decode state, e.g. a KV cache slot and a sampler
    seeded from ``(request.seed, segment)``), `step` and, if the state holds resources, `end`.
    A decode state belongs to one segment; never share samplers across batch slots.
    """

    kind = "autoregressive"

    def __init__(self, max_batch_size: int, workers: int = 1):
        super().__init__(max_batch_size=max_batch_size, workers=workers)
        self._live: dict[int, S] = {}  # id(state) -> state, for the gauges
        self._live_lock = threading.Lock()

    def open_state(self, item: StageItem) -> S:
        """`begin`, counted in `live_states` (what the engine's loop calls)."""
        state = self.begin(item)
        with self._live_lock:
            self._live[id(state)] = state
        return state

    def close_state(self, state: S) -> None:
        """`end`, counted in `live_states` (what the engine's loop calls, once per state)."""
        with self._live_lock:
            self._live.pop(id(state), None)
        self.end(state)

    def live_states(self) -> int:
        """Segments holding a decode state now."""
        with self._live_lock:
            return len(self._live)

    def state_bytes(self) -> int:
        """Sum of `nbytes` over the live decode states (`voxflow_stage_state_bytes`)."""
        with self._live_lock:
            states = list(self._live.values())
        return sum(self.nbytes(state) for state in states)

    def nbytes(self, state: S) -> int:
        """Bytes one decode state holds (its KV cache, say), read from another thread while
        the stage may be stepping it: an estimate, never a reason to raise. Default: 0."""
        return 0

    @abstractmethod
    def begin(self, item: StageItem) -> S:
        """The decode state of `item`'s segment (called once, before its first step).

        Raises:
            Exception: the item fails alone (bad payload, no free cache slot).
        """

    def ready(self, state: S) -> bool:
        """Whether the segment can take a step now. False parks it: it keeps its decode state
        (a KV cache) and its place in the running set, but no step runs for it and it does not
        count against `max_batch_size`, until this turns True (text arrived for a request fed
        while it runs: `voxflow.stages.text_feed`). Called on the worker thread before every
        step. Default: always."""
        return True

    @abstractmethod
    def step(self, batch: StageBatch, states: Sequence[S]) -> list[Step | BaseException]:
        """Advance every item by one step; `batch.step[i]` is item i's step number (0: its
        first). Returns one `Step` (or an exception: that segment's request fails) per item."""

    def end(self, state: S) -> None:  # noqa: B027 (optional hook)
        """Free a segment's decode state (after its last step, on cancellation, at shutdown).
        Default: nothing."""

    def run(self, batch: StageBatch) -> list:
        raise TypeError(f"stage {self.name} is autoregressive: the engine calls begin/step")
