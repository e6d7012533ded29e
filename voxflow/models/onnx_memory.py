"""How voxflow's ONNX Runtime sessions hold memory: one shared CPU arena, shrunk when over budget.

ONNX Runtime gives every session its own CPU arena by default. An arena grows, in regions
doubling in size, to the largest set of tensors its session ever held at once (two workers
running the longest segments at the same time) and never gives a region back. With three
sessions (Piper's two, Kokoro's one) a server under mixed traffic grew from 0.7 to 2.1 GB and
stayed there. What voxflow does instead, each measured (docs/architecture.md, "Memory"):

- one arena for all sessions (`shared_session_options`): sessions used at different times
  reuse each other's free regions; no cost;
- memory patterns off: with dynamic shapes ONNX Runtime would cache one per input shape; no
  cost;
- a run that starts while the process is over its budget (`voxflow.memory_budget`) ends by
  shrinking the arena (run option
  ``memory.enable_memory_arena_shrinkage``): the regions no run is using go back to the system
  (glibc maps them on their own, `voxflow.malloc`). Under the budget nothing is given back,
  because shrinking costs: the next run page-faults its working set again, +16% CPU for a
  Piper segment that shrinks every time (+5% for Kokoro's longer runs). No arena at all was
  worse: +12% CPU on both, every run;
- `SharedWeights`: the sessions of one graph (Piper's fixed-thread and solo sessions) use one
  copy of its weights, fed as inputs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from voxflow.malloc import trim_heap, tune_malloc
from voxflow.memory_budget import BUDGET, ArenaBudget

SHRINK_ENTRY = ("memory.enable_memory_arena_shrinkage", "cpu:0")
"""Run option: at the end of the run, free the CPU arena's regions that hold no tensor."""
MIN_SHARED_BYTES = 1024
"""Initializers at least this large are shared between sessions; smaller ones are not worth it."""

_arena_lock = threading.Lock()
_arena_registered = False


def _register_shared_arena() -> None:
    """Register one CPU arena in ONNX Runtime's process-wide environment (once)."""
    global _arena_registered
    with _arena_lock:
        if _arena_registered:
            return
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                 ort.OrtMemType.DEFAULT)
        # arena_extend_strategy 0: regions doubling in size (ONNX Runtime's default), so a run
        # extends the arena a few times, not once per tensor; shrinking undoes it after the run.
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({"arena_extend_strategy": 0}))
        _arena_registered = True


def shared_session_options(intra_op_threads: int, inter_op_threads: int,
                           spin: bool = True) -> ort.SessionOptions:
    """CPU session options: the given threads, the shared arena, no memory patterns.

    Args:
        intra_op_threads, inter_op_threads: ONNX Runtime thread counts (>= 1).
        spin: let idle pool threads spin while a run is in progress (ORT's default), and stop
            when it returns (``session.force_spinning_stop``: without it the pool spins on
            after the run and takes the cores of whatever runs next, such as the next part
            of a split graph: a lone Piper stream's windows on two threads took 13.2 s over
            `sentences.txt` with spinning left on, 9.6 s with none, 8.9 s spinning only
            within runs); off for a session that may run beside another one, where spinning
            threads would steal its cores.
    """
    _register_shared_arena()
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = inter_op_threads
    options.enable_mem_pattern = False
    options.add_session_config_entry("session.use_env_allocators", "1")
    if spin:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    else:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def open_session(
    model: bytes | str,
    intra_op_threads: int,
    inter_op_threads: int,
    spin: bool = True,
    weights: SharedWeights | None = None,
) -> ArenaSession:
    """Open a CPU ONNX Runtime session the way every voxflow family does.

    `shared_session_options` (the shared arena, no memory patterns), glibc tuned before the
    load (`voxflow.malloc.tune_malloc`) and the load's garbage handed back after it
    (`trim_heap`), and the session wrapped to shrink the arena when over the process's budget
    (`voxflow.memory_budget`).

    Args:
        model: the graph's serialized bytes, or a path to a `.onnx` file.
        intra_op_threads, inter_op_threads: ONNX Runtime thread counts (>= 1).
        spin: let idle pool threads spin (see `shared_session_options`).
        weights: initializers taken out of the graph (`SharedWeights`), fed to every run.
    Raises:
        onnxruntime errors: an unreadable or invalid graph.
    """
    tune_malloc()
    session = ort.InferenceSession(
        model, providers=["CPUExecutionProvider"],
        sess_options=shared_session_options(intra_op_threads, inter_op_threads, spin),
    )
    trim_heap()
    return ArenaSession(session, weights)


class SharedWeights:
    """A graph's large initializers, taken out of the graph and fed to its sessions as inputs.

    ``SharedWeights(model)`` moves every initializer stored as `min_bytes` or more of raw data
    out of `model` (in place) and declares it a graph input of the same type and shape; the
    arrays are kept here, and `ShrinkingSession` adds them to every run's feed. Sessions of the
    same graph then share one copy of the weights: as initializers each session would hold its
    own (with ``SessionOptions.add_initializer`` too: ~75 MiB per Piper session besides the
    60 MiB of weights, against ~15 MiB this way), and the model bytes to parse shrink from
    60 MB to under 1 MB. The audio is bit-identical (voice joe, tested), and no slower: MLAS
    has nothing to prepack in these graphs.
    """

    def __init__(self, model: onnx.ModelProto, min_bytes: int = MIN_SHARED_BYTES,
                 share: Sequence[SharedWeights] = ()):
        """Args:
            share: weights of other graphs of the same file (another cut of it): an
                initializer of `model` with the name, dtype and values of one of theirs
                uses their array, so the two graphs' sessions hold one copy (equal values
                checked: a rewrite may keep a name for a changed layout).
        """
        graph = model.graph
        moved = [init for init in graph.initializer if len(init.raw_data) >= min_bytes]
        theirs = {name: (a, w.values[name]) for w in share for name, a in w.arrays.items()}
        self.arrays: dict[str, np.ndarray] = {}
        self.values: dict[str, ort.OrtValue] = {}
        for init in moved:
            array = np.ascontiguousarray(numpy_helper.to_array(init))
            known = theirs.get(init.name)
            if known is not None and known[0].dtype == array.dtype and np.array_equal(
                    known[0], array):
                self.arrays[init.name], self.values[init.name] = known
            else:
                self.arrays[init.name] = array
                self.values[init.name] = ort.OrtValue.ortvalue_from_numpy(array)
        kept = [init for init in graph.initializer if init.name not in self.arrays]
        graph.input.extend(helper.make_tensor_value_info(init.name, init.data_type, init.dims)
                           for init in moved)
        del graph.initializer[:]
        graph.initializer.extend(kept)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def feed(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """`inputs` plus the weights (a name in both keeps the value in `inputs`)."""
        return {**self.values, **inputs}


class ArenaSession:
    """An `ort.InferenceSession` whose runs shrink the shared arena when `budget` says so.

    ``run(output_names, input_feed)`` behaves as the session's, with `weights` (if any) added
    to the feed (a `run_options` given is used, with the shrink entry added when over budget);
    other attributes (``get_inputs``, ``get_outputs``, ...) are the session's own.
    """

    def __init__(self, session: ort.InferenceSession, weights: SharedWeights | None = None,
                 budget: ArenaBudget = BUDGET):
        self.session = session
        self.weights = weights
        self.budget = budget

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: ort.RunOptions | None = None) -> list:
        options = run_options
        if self.budget.over():
            options = options or ort.RunOptions()
            options.add_run_config_entry(*SHRINK_ENTRY)
        feed = self.weights.feed(input_feed) if self.weights is not None else input_feed
        return self.session.run(output_names, feed, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)
