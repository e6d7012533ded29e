"""The audio cache's disk tier: one file per response in ``cache.disk_directory``, bounded in
bytes, least recently used out first, read back at start-up (docs/api.md, "Audio cache").

`AudioCache` writes every entry it stores here too (write-through, from a background thread:
`voxflow.server.cache_writer`) and looks here when its memory misses. Writing every entry, not
only those memory evicts, is what lets the cache survive a crash or a kill as well as a clean
stop, and keeps eviction from memory free (no write on the request's path); a write costs one
file per miss, small beside the synthesis that made the miss.

- Files (`voxflow.server.cache_file`) are written with `voxflow.atomic_files.write_atomic`
  (temporary file, fsync, rename), so a crash leaves a whole file or none; temporary files a
  crash left are removed at start-up.
- At start-up the index is rebuilt from the files, least recently used first by modification
  time (a hit touches its file): a file whose prefix or header is unreadable, whose length is
  not what its header says, whose name is not its key's, or that another voxflow version or
  model configuration wrote (`generation`) is deleted. The body's checksum is checked on every
  read: a damaged body is deleted and is a miss, never served.
- Deleting a saved voice or changing a lexicon deletes its files (`drop_voice`,
  `drop_lexicon`, called by `AudioCache`'s).
- A write that fails (disk full, folder gone or read-only) stores nothing and logs one warning
  until a write succeeds again; the request is unaffected (it was already answered).

The index is guarded by a lock (the writer thread, the event loop's reads in a worker thread
and Prometheus's thread all use it); file reads and writes run outside it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from voxflow import __version__
from voxflow.atomic_files import clean_temporary_files, delete_file, write_atomic
from voxflow.config import ModelSettings
from voxflow.server import cache_file
from voxflow.server.cache_entry import CachedResponse, CacheKey

log = logging.getLogger(__name__)

PROBE = "write-check.probe"
"""The file start-up writes and deletes to check that the folder is writable."""


class DiskCacheError(OSError):
    """The disk tier's folder cannot be created, listed or written (at start-up)."""


def generation(models: Sequence[ModelSettings]) -> str:
    """What a cached response's bytes depend on beside its key: the voxflow version and the
    served models' settings (family, files, options), as 16 hex digits. Files of another
    generation are deleted at start-up."""
    data = json.dumps([__version__, [m.model_dump(mode="json") for m in models]],
                      sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DiskItem:
    """One file in the index.

    Attributes:
        nbytes: the file's size in bytes (header and body).
        model, voice, lexicon: its key's, for `drop_voice` and `drop_lexicon`.
    """

    nbytes: int
    model: str
    voice: str
    lexicon: str | None


def _item(header: cache_file.Header, nbytes: int) -> DiskItem:
    fields = header.fields
    return DiskItem(nbytes, str(fields["model"]), str(fields["voice"]), fields.get("lexicon"))


class DiskCache:
    """The disk tier (module docstring): files in `directory`, at most `max_bytes` of them.

    Args:
        directory: the folder (``cache.disk_directory``), created if missing.
        max_bytes: bytes of files held at most (``cache.disk_max_bytes``), >= 1.
        max_entry_bytes: the largest body stored (``cache.max_entry_bytes``).
        generation: `generation` of the served models.
    Raises:
        DiskCacheError: the folder cannot be created, listed or written.
        ValueError: `max_bytes` or `max_entry_bytes` under 1.
    """

    def __init__(self, directory: Path, max_bytes: int, max_entry_bytes: int, generation: str):
        if max_bytes < 1 or max_entry_bytes < 1:
            raise ValueError(f"max_bytes and max_entry_bytes must be >= 1, not {max_bytes} and "
                             f"{max_entry_bytes}")
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.generation = generation
        self._index: OrderedDict[str, DiskItem] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.evictions = 0
        self.write_failures = 0
        self.dropped = 0  # damaged files deleted (start-up or read)
        self._failing = False  # a warning was logged; quiet until a write succeeds
        self._open()

    def __len__(self) -> int:
        return len(self._index)

    # ---- start-up ------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            clean_temporary_files(self.directory)
            probe = write_atomic(self.directory / PROBE, b"voxflow\n")
            delete_file(probe)
            files = sorted(self.directory.glob(f"*{cache_file.SUFFIX}"))
        except OSError as exc:
            raise DiskCacheError(f"{self.directory} cannot be used: {type(exc).__name__}: "
                                 f"{exc.strerror or exc}") from None
        found: list[tuple[float, str, DiskItem]] = []
        damaged = stale = 0
        for path in files:
            try:
                mtime, item = self._scan(path)
            except cache_file.CacheFileError as exc:
                log.debug("audio cache: %s deleted: %s", path.name, exc)
                damaged += self._delete(path)
                continue
            except OSError:
                continue  # gone or unreadable now: not indexed (a later write replaces it)
            if item is None:
                stale += self._delete(path)
            else:
                found.append((mtime, path.name, item))
        self.dropped += damaged
        for _, name, item in sorted(found):
            self._index[name] = item
            self.nbytes += item.nbytes
        self._evict(0)
        if damaged:
            log.warning("audio cache: %d damaged file(s) deleted from %s", damaged,
                        self.directory)
        log.info("audio cache: %d response(s), %d bytes on disk in %s (%d from another "
                 "version or model configuration deleted)", len(self._index), self.nbytes,
                 self.directory, stale)

    def _scan(self, path: Path) -> tuple[float, DiskItem | None]:
        """A file's modification time and index item (None: another generation).

        Raises:
            CacheFileError: damaged (its prefix, header, length or name is wrong).
            OSError: it cannot be read.
        """
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            length = cache_file.header_length(f.read(cache_file.PREFIX_BYTES))
            header = cache_file.decode_header(f.read(length))
        if header.generation != self.generation:
            return stat.st_mtime, None
        expected = cache_file.PREFIX_BYTES + length + header.body_bytes
        if stat.st_size != expected:
            raise cache_file.CacheFileError(f"{stat.st_size} bytes, header says {expected}")
        if path.name != cache_file.file_name(header.key):
            raise cache_file.CacheFileError("its name is not its key's")
        return stat.st_mtime, _item(header, stat.st_size)

    def _delete(self, path: Path) -> int:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("audio cache: cannot delete %s: %s", path, exc)
            return 0
        return 1

    # ---- reads ---------------------------------------------------------------------------
    def holds(self, key: CacheKey) -> bool:
        """Whether the index names a file for `key` (no disk access: a miss needs no read)."""
        name = cache_file.file_name(cache_file.canonical_key(key))
        with self._lock:
            return name in self._index

    def get(self, key: CacheKey) -> CachedResponse | None:
        """The response stored under `key` (its file now the most recently used), or None:
        not stored, or its file is gone, unreadable or damaged (then deleted)."""
        canonical = cache_file.canonical_key(key)
        name = cache_file.file_name(canonical)
        with self._lock:
            if name not in self._index:
                return None
        path = self.directory / name
        try:
            with open(path, "rb") as f:
                data = f.read()
            header, entry = cache_file.decode(data)
            if header.key != canonical or header.generation != self.generation:
                raise cache_file.CacheFileError("another key's file")
        except cache_file.CacheFileError as exc:
            log.warning("audio cache: %s is damaged (%s): deleted, not served", path.name, exc)
            with self._lock:
                self._forget(name, count_dropped=True)
            return None
        except OSError:
            with self._lock:  # deleted or evicted meanwhile: a miss
                self._forget(name, count_dropped=False)
            return None
        with self._lock:
            if name in self._index:
                self._index.move_to_end(name)
        try:
            os.utime(path)  # the order the index is rebuilt in after a restart
        except OSError:
            pass
        return entry

    # ---- writes --------------------------------------------------------------------------
    def put(self, key: CacheKey, entry: CachedResponse,
            current: Callable[[CacheKey], bool] = lambda _key: True) -> bool:
        """Write `entry` under `key` as the most recently used file, deleting the least
        recently used until the files fit in `max_bytes`. Returns whether it was stored: not
        when its body is over `max_entry_bytes`, when the write failed (one warning until a
        write succeeds again), or when `current(key)` is False once written (its voice was
        deleted meanwhile: the file is deleted again). Never raises for a failed write."""
        if entry.nbytes > self.max_entry_bytes:
            return False
        canonical = cache_file.canonical_key(key)
        name = cache_file.file_name(canonical)
        data = cache_file.encode(canonical, self.generation, entry)
        if len(data) > self.max_bytes:
            return False
        try:
            write_atomic(self.directory / name, data)
        except OSError as exc:
            self._write_failed(exc)
            return False
        self._failing = False
        with self._lock:
            if not current(key):  # a drop ran while it was written: it must not stay
                self._forget(name, count_dropped=False)
                return False
            old = self._index.pop(name, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self._evict(len(data))
            self._index[name] = DiskItem(len(data), key.model, key.voice, key.lexicon)
            self.nbytes += len(data)
        return True

    def _write_failed(self, exc: OSError) -> None:
        self.write_failures += 1
        if not self._failing:
            self._failing = True
            log.warning("audio cache: cannot write to %s (%s: %s): responses are not kept on "
                        "disk until a write succeeds; requests are unaffected", self.directory,
                        type(exc).__name__, exc.strerror or exc)

    def note_skipped(self) -> None:
        """An entry was not written because the writer was behind (counted as a failure)."""
        with self._lock:
            self.write_failures += 1

    def _evict(self, incoming: int) -> None:
        """Delete the least recently used files until `incoming` more bytes fit (lock held)."""
        while self._index and self.nbytes + incoming > self.max_bytes:
            name = next(iter(self._index))
            self._forget(name, count_dropped=False)
            self.evictions += 1

    def _forget(self, name: str, count_dropped: bool) -> None:
        """Remove `name` from the index and the folder (lock held)."""
        item = self._index.pop(name, None)
        if item is not None:
            self.nbytes -= item.nbytes
        if self._delete(self.directory / name) and count_dropped:
            self.dropped += 1

    # ---- invalidation --------------------------------------------------------------------
    def _drop(self, doomed: Callable[[DiskItem], bool]) -> int:
        with self._lock:
            names = [name for name, item in self._index.items() if doomed(item)]
            for name in names:
                self._forget(name, count_dropped=False)
        return len(names)

    def drop_voice(self, model: str, voice: str) -> int:
        """Delete every file of `model`'s `voice`; returns how many went."""
        return self._drop(lambda item: (item.model, item.voice) == (model, voice))

    def drop_lexicon(self, name: str) -> int:
        """Delete every file read with lexicon `name`; returns how many went."""
        return self._drop(lambda item: item.lexicon == name)


__all__ = ["PROBE", "DiskCache", "DiskCacheError", "DiskItem", "generation"]
