"""The audio cache: response bodies of speech requests whose audio is fixed, least recently used
out first, bounded in bytes, in memory and optionally on disk too (docs/api.md, "Audio cache").

`AudioCache` maps a `CacheKey` (everything a response's bytes depend on,
`voxflow.server.cache_entry`) to a `CachedResponse` (the body exactly as it was sent, its media
type and audio headers). Its memory holds at most ``cache.max_bytes`` of bodies; an entry over
``cache.max_entry_bytes`` is never stored; storing past the bound evicts the least recently
used entries first (a hit makes an entry the most recent).

With ``cache.disk_directory`` set, a `DiskCache` (`voxflow.server.disk_cache`) is a second
tier: every entry stored is also written there, by a background thread
(`voxflow.server.cache_writer`); a key memory misses is looked up on disk (in a worker thread
when called through `fetch`), and a disk hit is served and put back in memory. The disk tier
is read back at start-up, so the cache survives a restart.

Deleting a saved voice drops its entries in both tiers (`drop_voice`), and a later voice by
the same name has another `voice_version`, so it never gets the old voice's audio, even from a
request that was running while the voice was deleted (its write to disk is undone too). A
pronunciation lexicon is in the key twice: its name (`lexicon`), and its entries' effect on
the parsed input (`document`: respelled words and phoneme runs), so a changed lexicon's
requests never match the old entries; `drop_lexicon`, called by the lexicon store on every
change or delete, frees those entries at once, in both tiers.

Lookups and stores run on the server's event loop; a lock still guards the memory table, since
Prometheus collects from its own thread and disk hits are promoted from a worker thread.
`AudioCacheCollector` exports the counts on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from voxflow.config import CacheSettings, ModelSettings
from voxflow.server.cache_entry import (
    KEYED_FIELDS,
    UNKEYED_FIELDS,
    CachedResponse,
    CacheKey,
    Mode,
)
from voxflow.server.cache_writer import BackgroundWriter
from voxflow.server.disk_cache import DiskCache, generation

PENDING_ENTRIES = 4
"""Bodies waiting for the disk writer: at most this many times ``cache.max_entry_bytes``."""


class AudioCache:
    """An LRU of `CachedResponse`s by `CacheKey`, bounded by the bytes of their bodies, with
    an optional disk tier (module docstring).

    Args:
        max_bytes: bytes of bodies held in memory at most (0: memory stores nothing; the disk
            tier, if any, still does).
        max_entry_bytes: the largest body stored.
        disk: the disk tier, or None (memory only). The cache writes to it from its own
            thread until `close`.
    Raises:
        ValueError: a negative `max_bytes` or a `max_entry_bytes` under 1.
    """

    def __init__(self, max_bytes: int, max_entry_bytes: int, disk: DiskCache | None = None):
        if max_bytes < 0 or max_entry_bytes < 1:
            raise ValueError(f"max_bytes must be >= 0 and max_entry_bytes >= 1, not "
                             f"{max_bytes} and {max_entry_bytes}")
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._entries: OrderedDict[CacheKey, CachedResponse] = OrderedDict()
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], int] = {}
        self.nbytes = 0
        self.hits: dict[str, int] = {}  # by model, either tier
        self.disk_hits: dict[str, int] = {}  # by model, of those from disk
        self.misses: dict[str, int] = {}
        self.evictions = 0
        self.disk = disk
        self._writer: BackgroundWriter | None = None
        if disk is not None:
            self._writer = BackgroundWriter(
                lambda key, entry: disk.put(key, entry, self.is_current),
                PENDING_ENTRIES * max_entry_bytes, disk.note_skipped)

    @classmethod
    def from_settings(cls, settings: CacheSettings,
                      models: Sequence[ModelSettings] = ()) -> AudioCache | None:
        """The cache ``cache:`` describes, or None when it is off; with
        ``cache.disk_directory``, its disk tier read back from the folder, for `models` (the
        served models' settings: files of other models' settings are deleted,
        `voxflow.server.disk_cache.generation`).

        Raises:
            DiskCacheError: the disk tier's folder cannot be created, listed or written.
        """
        if not settings.enabled:
            return None
        disk = None
        if settings.disk_directory is not None:
            disk = DiskCache(settings.disk_directory, settings.disk_max_bytes,
                             settings.max_entry_bytes, generation(models))
        return cls(settings.max_bytes, settings.max_entry_bytes, disk)

    def __len__(self) -> int:
        return len(self._entries)

    def voice_version(self, model: str, voice: str) -> int:
        """The version of (model, voice) a key built now carries (`CacheKey.voice_version`)."""
        return self._versions.get((model, voice), 0)

    def is_current(self, key: CacheKey) -> bool:
        """Whether `key`'s voice was not deleted since `key` was built."""
        return key.voice_version == self._versions.get((key.model, key.voice), 0)

    # ---- lookups -------------------------------------------------------------------------
    def _from_memory(self, key: CacheKey) -> CachedResponse | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def _count(self, key: CacheKey, entry: CachedResponse | None, disk: bool) -> None:
        with self._lock:
            counts = self.misses if entry is None else self.hits
            counts[key.model] = counts.get(key.model, 0) + 1
            if entry is not None and disk:
                self.disk_hits[key.model] = self.disk_hits.get(key.model, 0) + 1

    def _promoted(self, key: CacheKey, entry: CachedResponse | None) -> CachedResponse | None:
        """A disk hit, put back in memory (not written again)."""
        if entry is not None:
            self._store_in_memory(key, entry)
        return entry

    def get(self, key: CacheKey) -> CachedResponse | None:
        """The entry for `key` (now the most recently used), from memory, else from disk
        (read on this thread, then put in memory), else None; counts a hit or a miss for
        `key.model`."""
        entry = self._from_memory(key)
        from_disk = entry is None and self.disk is not None
        if from_disk and self.disk is not None:
            entry = self._promoted(key, self.disk.get(key))
        self._count(key, entry, from_disk)
        return entry

    async def fetch(self, key: CacheKey) -> CachedResponse | None:
        """`get`, with the disk read in a worker thread, so the event loop never waits on
        the disk (a memory hit, and a key the disk index does not hold, never leave the
        loop)."""
        entry = self._from_memory(key)
        from_disk = entry is None and self.disk is not None
        if from_disk and self.disk is not None and self.disk.holds(key):
            entry = self._promoted(key, await asyncio.to_thread(self.disk.get, key))
        self._count(key, entry, from_disk)
        return entry

    # ---- stores --------------------------------------------------------------------------
    def put(self, key: CacheKey, entry: CachedResponse) -> bool:
        """Store `entry` under `key` as the most recently used, evicting the least recently
        used entries until the bodies fit in `max_bytes`, and queue it for the disk tier.
        Returns whether it was stored in memory or queued for disk: not when the body is over
        `max_entry_bytes`, or when the key's voice was deleted since the key was built
        (`drop_voice`). A disk write that fails later only logs (`DiskCache.put`)."""
        if entry.nbytes > self.max_entry_bytes or not self.is_current(key):
            return False
        stored = self._store_in_memory(key, entry)
        if self._writer is not None:
            stored = self._writer.submit(key, entry) or stored
        return stored

    def _store_in_memory(self, key: CacheKey, entry: CachedResponse) -> bool:
        size = entry.nbytes
        if size > self.max_entry_bytes or size > self.max_bytes:
            return False
        with self._lock:
            if not self.is_current(key):
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            while self._entries and self.nbytes + size > self.max_bytes:
                _, gone = self._entries.popitem(last=False)
                self.nbytes -= gone.nbytes
                self.evictions += 1
            self._entries[key] = entry
            self.nbytes += size
            return True

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until the entries queued for disk are written (True at once without a disk
        tier); False after `timeout_s` seconds with some still waiting."""
        return self._writer is None or self._writer.flush(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write the entries queued for disk (for up to `timeout_s` seconds) and stop the
        writer; later stores stay in memory only."""
        if self._writer is not None:
            self._writer.close(timeout_s)

    # ---- invalidation --------------------------------------------------------------------
    def _drop(self, doomed: Iterator[CacheKey]) -> int:
        keys = list(doomed)
        for key in keys:
            self.nbytes -= self._entries.pop(key).nbytes
        return len(keys)

    def drop_voice(self, model: str, voice: str) -> int:
        """Forget every entry of `model`'s `voice` (a saved voice deleted), in memory and on
        disk, and give the voice a new version, so a response still being made with it is not
        stored (nor left on disk). Returns how many entries went from memory."""
        with self._lock:
            self._versions[(model, voice)] = self._versions.get((model, voice), 0) + 1
            gone = self._drop(k for k in self._entries if (k.model, k.voice) == (model, voice))
        if self.disk is not None:
            self.disk.drop_voice(model, voice)
        return gone

    def drop_lexicon(self, name: str) -> int:
        """Forget every entry read with lexicon `name` (changed or deleted), in memory and on
        disk. Returns how many entries went from memory."""
        with self._lock:
            gone = self._drop(k for k in self._entries if k.lexicon == name)
        if self.disk is not None:
            self.disk.drop_lexicon(name)
        return gone


class AudioCacheCollector:
    """Prometheus collector of an `AudioCache`: ``voxflow_audio_cache_hits_total`` and
    ``voxflow_audio_cache_misses_total`` {model} (cacheable requests answered from the cache,
    either tier, and not), ``voxflow_audio_cache_evictions_total`` (entries pushed out of memory
    by newer ones), ``voxflow_audio_cache_bytes`` and ``voxflow_audio_cache_entries`` (held in
    memory now) and ``voxflow_audio_cache_max_bytes`` (the memory bound). With a disk tier,
    also ``voxflow_audio_cache_disk_hits_total`` {model} (the hits answered from disk),
    ``voxflow_audio_cache_disk_bytes``, ``_disk_entries``, ``_disk_max_bytes`` (files, their
    bytes counted whole), ``_disk_evictions_total``, ``_disk_write_failures_total`` (entries not
    written: disk full or unwritable, or the writer behind) and ``_disk_dropped_total``
    (damaged files deleted)."""

    def __init__(self, cache: AudioCache):
        self.cache = cache

    def collect(self):
        cache = self.cache
        for name, counts, text in (
                ("hits", cache.hits, "Speech requests answered from the audio cache (memory "
                 "or disk)."),
                ("misses", cache.misses, "Cacheable speech requests not found in the audio "
                 "cache (synthesized, then stored when complete).")):
            family = CounterMetricFamily(f"voxflow_audio_cache_{name}", text, labels=["model"])
            for model, n in sorted(counts.items()):
                family.add_metric([model], n)
            yield family
        yield CounterMetricFamily("voxflow_audio_cache_evictions", "Audio cache entries pushed "
                                  "out of memory, least recently used first, to fit newer ones.",
                                  value=cache.evictions)
        yield GaugeMetricFamily("voxflow_audio_cache_bytes", "Bytes of response bodies the "
                                "audio cache holds in memory.", value=cache.nbytes)
        yield GaugeMetricFamily("voxflow_audio_cache_entries", "Responses the audio cache "
                                "holds in memory.", value=len(cache))
        yield GaugeMetricFamily("voxflow_audio_cache_max_bytes", "Bytes of response bodies "
                                "the audio cache may hold in memory (cache.max_bytes).",
                                value=cache.max_bytes)
        if cache.disk is not None:
            yield from self._disk(cache, cache.disk)

    @staticmethod
    def _disk(cache: AudioCache, disk: DiskCache):
        family = CounterMetricFamily("voxflow_audio_cache_disk_hits", "Speech requests "
                                     "answered from the audio cache's disk tier (of the hits).",
                                     labels=["model"])
        for model, n in sorted(cache.disk_hits.items()):
            family.add_metric([model], n)
        yield family
        yield GaugeMetricFamily("voxflow_audio_cache_disk_bytes", "Bytes of files the audio "
                                "cache's disk tier holds (header and body).", value=disk.nbytes)
        yield GaugeMetricFamily("voxflow_audio_cache_disk_entries", "Responses the audio "
                                "cache's disk tier holds.", value=len(disk))
        yield GaugeMetricFamily("voxflow_audio_cache_disk_max_bytes", "Bytes of files the "
                                "disk tier may hold (cache.disk_max_bytes).", value=disk.max_bytes)
        yield CounterMetricFamily("voxflow_audio_cache_disk_evictions", "Files the disk tier "
                                  "deleted, least recently used first, to fit newer ones.",
                                  value=disk.evictions)
        yield CounterMetricFamily("voxflow_audio_cache_disk_write_failures", "Entries not "
                                  "written to the disk tier (disk full or unwritable, or the "
                                  "writer behind); the requests were unaffected.",
                                  value=disk.write_failures)
        yield CounterMetricFamily("voxflow_audio_cache_disk_dropped", "Damaged disk tier "
                                  "files deleted (at start-up or when read), never served.",
                                  value=disk.dropped)


__all__ = ["KEYED_FIELDS", "PENDING_ENTRIES", "UNKEYED_FIELDS", "AudioCache",
           "AudioCacheCollector", "CacheKey", "CachedResponse", "Mode"]
