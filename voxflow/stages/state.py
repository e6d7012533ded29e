"""Per-request state a stage owns, with one lifetime: created on the request's first item,
released through one path when the request ends however it ends.

A streaming stage keeps state between a request's items: an autoregressive stage its KV cache
slot and sampler, a vocoder or codec its overlap tails. `RequestStates` holds it by request id.
The engine calls `Stage.release(request_id)` once when the request finishes, fails, times out
or is cancelled (and `release_all` at shutdown), so no path but success can leak (the leaks
reported in vLLM-Omni, engine-anchors.md (c), all sat on paths only success reached). A run
still in progress for a request that ended may ask for its state afterwards: released ids are
remembered (a bounded set) and `get_or_create` raises `StateReleased` instead of creating a
fresh state that nobody would free.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

S = TypeVar("S")

TOMBSTONES = 4096
"""How many released request ids are remembered to refuse late state creation."""


class StateReleased(Exception):
    """The request's state was released (its request ended); its late work is dropped."""


class RequestStates(Generic[S]):
    """Thread-safe map request id -> state, with creation, release and a live count.

    Args:
        create: builds a state for a request id (called at most once per live id).
        free: called with a state when it is released (return device slots, close files);
            exceptions from it propagate to the releaser after the entry is gone.
    """

    def __init__(self, create: Callable[[str], S], free: Callable[[S], None] | None = None):
        self._create = create
        self._free = free
        self._states: dict[str, S] = {}
        self._released: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Live states."""
        with self._lock:
            return len(self._states)

    def __contains__(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._states

    def values(self) -> list[S]:
        """The live states now (a snapshot: for gauges, not for mutation)."""
        with self._lock:
            return list(self._states.values())

    def get_or_create(self, request_id: str) -> S:
        """The request's state, created on first use.

        Raises:
            StateReleased: the request already ended (its id was released).
        """
        with self._lock:
            state = self._states.get(request_id)
            if state is not None:
                return state
            if request_id in self._released:
                raise StateReleased(request_id)
            state = self._states[request_id] = self._create(request_id)
            return state

    def release(self, request_id: str) -> bool:
        """Free the request's state if it has one and remember the id; True if one was freed.

        Idempotent: later calls (and `get_or_create`) for the id do nothing / raise.
        """
        with self._lock:
            state = self._states.pop(request_id, None)
            self._released[request_id] = None
            self._released.move_to_end(request_id)
            while len(self._released) > TOMBSTONES:
                self._released.popitem(last=False)
        if state is not None and self._free is not None:
            self._free(state)
        return state is not None

    def release_all(self) -> int:
        """Free every live state (shutdown); returns how many."""
        with self._lock:
            ids = list(self._states)
        return sum(self.release(request_id) for request_id in ids)


class HoldsRequestStates:
    """Mixin for a `Stage` whose per-request state lives in ``self.states`` (`RequestStates`):
    the stage hooks `release`, `close` and `live_states` answered from it. List it before
    `Stage` in the bases."""

    states: RequestStates

    def release(self, request_id: str) -> None:
        self.states.release(request_id)

    def close(self) -> None:
        self.states.release_all()

    def live_states(self) -> int:
        return len(self.states)
