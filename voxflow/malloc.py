"""glibc malloc settings for a server with many threads (a no-op where libc is not glibc).

glibc gives each thread that allocates its own malloc arena, up to 8 per core, and an arena
keeps the memory its thread freed for that thread's next allocations; with a dozen worker
threads each arena ends up holding its own peak. `tune_malloc` caps the arenas at
`ARENA_MAX` (``mallopt(M_ARENA_MAX)``, the same as ``MALLOC_ARENA_MAX=2`` in the environment,
but set in code so ``voxflow serve``, ``make serve`` and in-process test servers all get it)
and fixes the size from which a block gets its own mapping (`MMAP_THRESHOLD`). It must run
before the worker threads start: arenas already made are kept. `trim_heap` hands
freed heap pages back to the system (``malloc_trim(0)``), e.g. after a model load, whose
parse-and-copy garbage would otherwise stay resident.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc malloc.h
M_ARENA_MAX = -8
ARENA_MAX = 2
"""Two arenas: the event loop and the workers contend little (the heavy buffers live in ONNX
Runtime's arena, `voxflow.models.onnx_memory`), and each extra arena would hold its own peak."""

MMAP_THRESHOLD = 1 << 20
"""Blocks of 1 MiB or more get their own mapping, returned to the system when freed. ONNX
Runtime's arena regions are such blocks (1 MiB and up): when a run's end shrinks the arena
(`voxflow.models.onnx_memory`), their memory must leave the process. glibc's default threshold
starts at 128 KiB and rises with every larger block freed, up to 32 MiB, after which regions
below it are carved from the malloc heaps, which keep them: after 60 mixed requests 427 MiB
sat in the heaps of an idle server. Fixed at 1 MiB the idle server kept 201 MiB less, for the
same CPU time per run (a page fault per 4 KiB touched, instead of reuse)."""

_lock = threading.Lock()
_tuned: bool | None = None


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


def tune_malloc() -> bool:
    """Cap glibc's malloc arenas at `ARENA_MAX` and fix its mmap threshold at `MMAP_THRESHOLD`,
    once per process (later calls do nothing).

    Returns:
        True when both settings are in effect (glibc accepted them), False elsewhere.
    """
    global _tuned
    with _lock:
        if _tuned is None:
            libc = _glibc()
            _tuned = bool(libc is not None
                          and libc.mallopt(M_ARENA_MAX, ARENA_MAX) == 1
                          and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
            log.debug("malloc: %d arenas, mmap from %d bytes: %s", ARENA_MAX, MMAP_THRESHOLD,
                      _tuned)
        return _tuned


def trim_heap() -> bool:
    """Return free heap memory to the system (glibc ``malloc_trim(0)``).

    Returns:
        True when glibc released something, False when it did not or this is not glibc.
    """
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
