"""The audio cache: response bodies of speech requests whose audio is fixed, least recently used
out first, bounded in bytes (docs/api.md, "Audio cache").

`AudioCache` maps a `CacheKey` (everything a response's bytes depend on) to a `CachedResponse`
(the body exactly as it was sent, its media type and audio headers). It holds at most
``cache.max_bytes`` of bodies; an entry over ``cache.max_entry_bytes`` is never stored; storing
past the bound evicts the least recently used entries first (a hit makes an entry the most
recent). Deleting a saved voice drops its entries (`drop_voice`), and a later voice by the same
name has another `voice_version`, so it never gets the old voice's audio, even from a request
that was running while the voice was deleted. A pronunciation lexicon is in the key twice: its
name (`lexicon`), and its entries' effect on the parsed input (`document`: respelled words and
phoneme runs), so a changed lexicon's requests never match the old entries; `drop_lexicon`,
called by the lexicon store on every change or delete, frees those entries at once.

Every call runs on the server's event loop; a lock still guards the table, since Prometheus
collects from its own thread. `AudioCacheCollector` exports the counts on ``/metrics``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from voxflow.config import CacheSettings
from voxflow.text.document import SpeechDocument

Mode = Literal["whole", "stream", "sse"]
"""How the body is framed: a whole file, streamed raw bytes (a streamed WAV's header says
"unknown length"), or SSE events."""


@dataclass(frozen=True)
class CacheKey:
    """Everything a speech response's bytes depend on.

    Attributes:
        model: the served model (aliases resolved).
        voice: the served voice (aliases resolved).
        voice_version: `AudioCache.voice_version` of (model, voice) when the request was
            checked: a voice deleted and created again under the same name has a new one.
        document: the input as parsed (plain text, Markdown or SSML), its language decided:
            inputs that parse alike (extra spaces, say) share an entry.
        raw_input: the input as sent, for SSE only (its done event counts the input's
            characters and word events index it); None otherwise.
        speed: the request's speed.
        seed: the request's seed (None: unseeded, for a family whose audio is fixed anyway).
        response_format: the encoding.
        sample_rate: the rate delivered, Hz (`voxflow.audio.rates.delivered_rate`).
        mode: whole, stream or sse (`Mode`).
        timestamps: word events in the SSE stream.
        instructions: the instructions the model follows (None when it ignores them).
        lexicon: the name of the pronunciation lexicon the request was read with (None: no
            lexicon); what it changed is in `document`. `AudioCache.drop_lexicon` drops a
            lexicon's entries when it changes.
    """

    model: str
    voice: str
    voice_version: int
    document: SpeechDocument
    raw_input: str | None
    speed: float
    seed: int | None
    response_format: str
    sample_rate: int
    mode: Mode
    timestamps: bool
    instructions: str | None
    lexicon: str | None = None


KEYED_FIELDS: dict[str, str] = {
    "model": "model",
    "voice": "voice",
    "input": "document",
    "text": "document",
    "response_format": "response_format",
    "speed": "speed",
    "instructions": "instructions",
    "seed": "seed",
    "sample_rate": "sample_rate",
    "language": "document",  # the one language decided is the document's
    "stream_format": "mode",
    "stream": "mode",
    "streamed": "mode",
    "timestamps": "timestamps",
    "lexicon": "lexicon",  # its name; what its entries change is in the document
}
"""Each field of a speech request (`SpeechBody` and `voxflow.engine.request.SpeechRequest`)
whose value changes the response's bytes -> the `CacheKey` field that holds it."""

UNKEYED_FIELDS: dict[str, str] = {
    "request_id": "a response header, set per request on a hit too",
    "text_feed": "WebSocket sessions only, which are never cached",
}
"""The fields of a speech request that do not change its bytes, and why."""


@dataclass(frozen=True)
class CachedResponse:
    """A response body as it was sent.

    Attributes:
        body: the bytes of the body (a whole file, the streamed bytes, or the SSE events).
        media_type: its ``Content-Type``.
        headers: the audio's headers (``X-Sample-Rate``, ``X-Voxflow-Weights``, ...), without
            the per-request ones (``X-Request-Id``, ``X-Voxflow-Ignored``).
        audio_s: seconds of audio in it (for the access line).
    """

    body: bytes
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)
    audio_s: float = 0.0

    @property
    def nbytes(self) -> int:
        """What the entry counts against ``cache.max_bytes``: its body's length."""
        return len(self.body)


class AudioCache:
    """An LRU of `CachedResponse`s by `CacheKey`, bounded by the bytes of their bodies.

    Args:
        max_bytes: bytes of bodies held at most (0: nothing is stored).
        max_entry_bytes: the largest body stored.
    Raises:
        ValueError: a negative `max_bytes` or a `max_entry_bytes` under 1.
    """

    def __init__(self, max_bytes: int, max_entry_bytes: int):
        if max_bytes < 0 or max_entry_bytes < 1:
            raise ValueError(f"max_bytes must be >= 0 and max_entry_bytes >= 1, not "
                             f"{max_bytes} and {max_entry_bytes}")
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._entries: OrderedDict[CacheKey, CachedResponse] = OrderedDict()
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], int] = {}
        self.nbytes = 0
        self.hits: dict[str, int] = {}  # by model
        self.misses: dict[str, int] = {}
        self.evictions = 0

    @classmethod
    def from_settings(cls, settings: CacheSettings) -> AudioCache | None:
        """The cache ``cache:`` describes, or None when it is off."""
        if not settings.enabled:
            return None
        return cls(settings.max_bytes, settings.max_entry_bytes)

    def __len__(self) -> int:
        return len(self._entries)

    def voice_version(self, model: str, voice: str) -> int:
        """The version of (model, voice) a key built now carries (`CacheKey.voice_version`)."""
        return self._versions.get((model, voice), 0)

    def get(self, key: CacheKey) -> CachedResponse | None:
        """The entry for `key` (now the most recently used), or None; counts a hit or a miss
        for `key.model`."""
        with self._lock:
            entry = self._entries.get(key)
            counts = self.misses if entry is None else self.hits
            counts[key.model] = counts.get(key.model, 0) + 1
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: CacheKey, entry: CachedResponse) -> bool:
        """Store `entry` under `key` as the most recently used, evicting the least recently
        used entries until the bodies fit in `max_bytes`. Returns whether it was stored: not
        when the body is over `max_entry_bytes` or `max_bytes`, or when the key's voice was
        deleted since the key was built (`drop_voice`)."""
        size = entry.nbytes
        if size > self.max_entry_bytes or size > self.max_bytes:
            return False
        with self._lock:
            if key.voice_version != self._versions.get((key.model, key.voice), 0):
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

    def _drop(self, doomed: Iterator[CacheKey]) -> int:
        keys = list(doomed)
        for key in keys:
            self.nbytes -= self._entries.pop(key).nbytes
        return len(keys)

    def drop_voice(self, model: str, voice: str) -> int:
        """Forget every entry of `model`'s `voice` (a saved voice deleted) and give the voice a
        new version, so a response still being made with it is not stored. Returns how many
        entries went."""
        with self._lock:
            self._versions[(model, voice)] = self._versions.get((model, voice), 0) + 1
            return self._drop(k for k in self._entries if (k.model, k.voice) == (model, voice))

    def drop_lexicon(self, name: str) -> int:
        """Forget every entry read with lexicon `name` (changed or deleted). Returns how many
        entries went."""
        with self._lock:
            return self._drop(k for k in self._entries if k.lexicon == name)


class AudioCacheCollector:
    """Prometheus collector of an `AudioCache`: ``voxflow_audio_cache_hits_total`` and
    ``voxflow_audio_cache_misses_total`` {model} (cacheable requests answered from the cache,
    and not), ``voxflow_audio_cache_evictions_total`` (entries pushed out by newer ones),
    ``voxflow_audio_cache_bytes`` and ``voxflow_audio_cache_entries`` (held now) and
    ``voxflow_audio_cache_max_bytes`` (the bound)."""

    def __init__(self, cache: AudioCache):
        self.cache = cache

    def collect(self):
        cache = self.cache
        for name, counts, text in (
                ("hits", cache.hits, "Speech requests answered from the audio cache."),
                ("misses", cache.misses, "Cacheable speech requests not found in the audio "
                 "cache (synthesized, then stored when complete).")):
            family = CounterMetricFamily(f"voxflow_audio_cache_{name}", text, labels=["model"])
            for model, n in sorted(counts.items()):
                family.add_metric([model], n)
            yield family
        yield CounterMetricFamily("voxflow_audio_cache_evictions", "Audio cache entries pushed "
                                  "out, least recently used first, to fit newer ones.",
                                  value=cache.evictions)
        yield GaugeMetricFamily("voxflow_audio_cache_bytes", "Bytes of response bodies the "
                                "audio cache holds.", value=cache.nbytes)
        yield GaugeMetricFamily("voxflow_audio_cache_entries", "Responses the audio cache "
                                "holds.", value=len(cache))
        yield GaugeMetricFamily("voxflow_audio_cache_max_bytes", "Bytes of response bodies "
                                "the audio cache may hold (cache.max_bytes).",
                                value=cache.max_bytes)


__all__ = ["KEYED_FIELDS", "UNKEYED_FIELDS", "AudioCache", "AudioCacheCollector", "CacheKey",
           "CachedResponse", "Mode"]
