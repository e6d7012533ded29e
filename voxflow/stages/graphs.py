"""Captured graphs of a fixed-shape computation, one per (rows, bucket), with eager fallback.

`GraphRunner.capture` records `forward` on CUDA with `torch.cuda.CUDAGraph` for one input
layout: warm-up calls on a side stream (two before the runner's first capture, which meets the
lazy set-up of cuBLAS and cuDNN handles and workspaces; one before each later one, which meets
the shape's own kernel choice: a third of the start-up of a 97-shape ladder is saved, where the
first H200 run spent over 140 s capturing the full-size flow), then capture into one memory
pool shared by every
graph of the runner (captured largest first, so smaller graphs reuse the pool; SGLang-Omni and
nano-vllm do the same, engine-anchors.md (a)). `run` copies the inputs into the graph's static
buffers, replays it and returns a copy of the outputs (the static outputs are overwritten by the
next replay). Where no graph exists for a key (CPU, capture off, a failed capture) `run` calls
`forward` eagerly; `status` says which and why, for the start-up log, `/health` and metrics.

Inputs and outputs are dicts of tensors (or a tensor / tuple of tensors for outputs); on CPU
any values work, since nothing is captured.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: dict[str, Any]  # static input buffers
    outputs: Any  # static outputs
    lock: threading.Lock


def _clone(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    return value.clone() if hasattr(value, "clone") else value


class GraphRunner:
    """Replays captured CUDA graphs of `forward` per key; runs it eagerly otherwise.

    Args:
        forward: the fixed-shape computation, ``forward(inputs: dict) -> outputs``.
        enabled: capture at all (the family's ``capture_graphs`` option).
        device: the device the stage runs on ("cpu", "cuda", "cuda:0"); capture needs CUDA.
    """

    def __init__(self, forward: Callable[[dict[str, Any]], Any], enabled: bool, device: str):
        self.forward = forward
        self.enabled = enabled
        self.device = device
        self.graphs: dict[Hashable, _Graph] = {}
        self.status: dict[Hashable, str] = {}
        self.capture_seconds = 0.0
        self.capture_bytes = 0
        self._pool: Any = None

    def eager_reason(self) -> str | None:
        """Why nothing can be captured here (None: capture may be tried)."""
        if not self.enabled:
            return "capture_graphs is off"
        if not self.device.startswith("cuda"):
            return f"device is {self.device}"
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        if not torch.cuda.is_available():
            return "CUDA is not available"
        return None

    def capture(self, key: Hashable, inputs: dict[str, Any]) -> bool:
        """Capture `forward` for `inputs`' layout under `key`; True on success.

        Failure (or no CUDA) is not an error: the key runs eagerly, `status[key]` says why.
        """
        reason = self.eager_reason()
        if reason is not None:
            self.status[key] = f"eager: {reason}"
            return False
        import torch

        started = time.perf_counter()
        before = torch.cuda.memory_reserved(self.device)
        try:
            static = {k: v.clone() for k, v in inputs.items()}
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2 if not self.graphs else 1):
                    self.forward(static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                outputs = self.forward(static)
            self._pool = graph.pool()
            torch.cuda.synchronize(self.device)
        except Exception as exc:  # noqa: BLE001 (any capture failure means eager, logged)
            self.status[key] = f"eager: capture failed: {type(exc).__name__}: {exc}"
            log.warning("graph capture of %s failed; it runs eagerly: %s", key, exc)
            return False
        self.graphs[key] = _Graph(graph, static, outputs, threading.Lock())
        self.capture_seconds += time.perf_counter() - started
        self.capture_bytes += max(torch.cuda.memory_reserved(self.device) - before, 0)
        self.status[key] = "captured"
        return True

    def run(self, key: Hashable, inputs: dict[str, Any]) -> tuple[Any, bool]:
        """`forward(inputs)`: replayed when `key` was captured, else eager.

        Returns:
            (outputs, replayed): the outputs (a copy, safe to keep) and whether a graph ran.
        """
        captured = self.graphs.get(key)
        if captured is None:
            return self.forward(inputs), False
        with captured.lock:
            for name, value in inputs.items():
                captured.inputs[name].copy_(value)
            captured.graph.replay()
            return _clone(captured.outputs), True
