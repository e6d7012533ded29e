"""Writes audio cache entries to the disk tier on one background thread, in the order stored,
so a disk write (an fsync, milliseconds or more) never runs on the server's event loop
(`voxflow.server.disk_cache`).

Entries wait in memory until written; at most `max_pending_bytes` of bodies wait at once, and
an entry that would pass that bound is not written (the disk is behind: `on_skipped` is called,
the request is unaffected). `close` writes what waits, then stops the thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from voxflow.server.cache_entry import CachedResponse, CacheKey

log = logging.getLogger(__name__)


class BackgroundWriter:
    """One thread that calls `write(key, entry)` for each submitted entry, in order.

    Args:
        write: stores one entry (`DiskCache.put` with its voice check); an exception it raises
            is logged and the thread goes on.
        max_pending_bytes: bytes of bodies waiting at most, >= 1.
        on_skipped: called (on the submitting thread) for an entry not queued.
    Raises:
        ValueError: `max_pending_bytes` under 1.
    """

    def __init__(self, write: Callable[[CacheKey, CachedResponse], object],
                 max_pending_bytes: int, on_skipped: Callable[[], None] = lambda: None):
        if max_pending_bytes < 1:
            raise ValueError(f"max_pending_bytes must be >= 1, not {max_pending_bytes}")
        self._write = write
        self.max_pending_bytes = max_pending_bytes
        self._on_skipped = on_skipped
        self._queue: deque[tuple[CacheKey, CachedResponse]] = deque()
        self._pending_bytes = 0
        self._busy = False  # an entry is being written
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="audio-cache-writer",
                                        daemon=True)
        self._thread.start()

    def submit(self, key: CacheKey, entry: CachedResponse) -> bool:
        """Queue `entry` to be written; returns False (and calls `on_skipped`) when the
        writer is closed or its bodies would pass `max_pending_bytes`."""
        with self._cond:
            if self._closed or self._pending_bytes + entry.nbytes > self.max_pending_bytes:
                queued = False
            else:
                self._queue.append((key, entry))
                self._pending_bytes += entry.nbytes
                self._cond.notify_all()
                queued = True
        if not queued:
            self._on_skipped()
        return queued

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued entry is written; returns False after `timeout_s` seconds
        with some still waiting."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Write what waits (for up to `timeout_s` seconds), then stop the thread; later
        submits are refused. Returns whether everything was written."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return  # closed and drained
                key, entry = self._queue.popleft()
                self._busy = True
            try:
                self._write(key, entry)
            except Exception:
                log.exception("audio cache: writing an entry to disk failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._pending_bytes -= entry.nbytes
                    self._cond.notify_all()


__all__ = ["BackgroundWriter"]
