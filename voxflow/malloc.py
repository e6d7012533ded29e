"""glibc malloc settings for a server with many threads (a no-op where libc is not glibc).

glibc gives each thread that allocates its own malloc arena, up to 8 per core, and an arena
keeps the memory its thread freed for that thread's next allocations; with a dozen worker
threads each arena ends up holding its own peak. `tune_malloc` caps the arenas at
`ARENA_MAX` (``mallopt(M_ARENA_MAX)``, the same as ``MALLOC_ARENA_MAX=2`` in the environment,
but set in code so ``voxflow serve``, ``make serve`` and in-process test servers all get it).
It must run before the worker threads start: arenas already made are kept. `trim_heap` hands
freed heap pages back to the system (``malloc_trim(0)``), e.g. after a model load, whose
parse-and-copy garbage would otherwise stay resident.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc malloc.h
ARENA_MAX = 2
"""Two arenas: the event loop and the workers contend little (the heavy buffers live in ONNX
Runtime's arena, `voxflow.models.onnx_memory`), and each extra arena would hold its own peak."""

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
    """Cap glibc's malloc arenas at `ARENA_MAX`, once per process (later calls do nothing).

    Returns:
        True when the setting is in effect (glibc accepted it), False elsewhere.
    """
    global _tuned
    with _lock:
        if _tuned is None:
            libc = _glibc()
            _tuned = bool(libc is not None and libc.mallopt(M_ARENA_MAX, ARENA_MAX) == 1)
            log.debug("malloc arenas capped at %d: %s", ARENA_MAX, _tuned)
        return _tuned


def trim_heap() -> bool:
    """Return free heap memory to the system (glibc ``malloc_trim(0)``).

    Returns:
        True when glibc released something, False when it did not or this is not glibc.
    """
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
