"""The speech route's use of the audio cache (`voxflow.server.audio_cache`; docs/api.md,
"Audio cache").

After the request is checked (`Engine.check`: every 4xx first, cache or not), `lookup` decides:
``bypass`` when its audio is not fixed (`CheckedRequest.fixed_audio`) or the client sent
``Cache-Control: no-store`` (nothing read, nothing stored); otherwise ``hit`` (the stored body,
from memory or the disk tier, is sent at once, `hit_response`) or ``miss`` (synthesized; a
`Recorder` keeps the body as it is sent and stores it once the response has ended complete).
``X-Voxflow-Cache`` says which; with the cache off (``cache.enabled: false``) there is no
lookup and no header.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Request
from fastapi.responses import Response

from voxflow.engine.checked import CheckedRequest
from voxflow.server.audio_cache import AudioCache, CachedResponse, CacheKey, Mode
from voxflow.server.schemas import SpeechBody

HEADER = "X-Voxflow-Cache"
"""Response header: ``hit``, ``miss`` or ``bypass`` (absent with the cache off)."""

Outcome = Literal["hit", "miss", "bypass"]


def no_store(request: Request) -> bool:
    """Whether the request's ``Cache-Control`` holds the ``no-store`` directive (any case)."""
    value = request.headers.get("cache-control", "")
    return any(part.split("=", 1)[0].strip().lower() == "no-store" for part in value.split(","))


def body_mode(body: SpeechBody, streams: bool) -> Mode:
    """How the response's body is framed: ``sse``, ``stream`` (raw) or ``whole``."""
    if body.stream_format == "sse":
        return "sse"
    return "stream" if streams else "whole"


def cache_key(cache: AudioCache, body: SpeechBody, checked: CheckedRequest, mode: Mode,
              rate: int) -> CacheKey:
    """The key of `body`'s response, checked as `checked`, framed as `mode`, delivered at
    `rate` Hz (`voxflow.server.audio_cache.CacheKey`)."""
    req = checked.request
    return CacheKey(
        model=req.model, voice=req.voice, voice_version=cache.voice_version(req.model, req.voice),
        document=checked.document, raw_input=req.text if mode == "sse" else None,
        speed=req.speed, seed=req.seed, response_format=body.response_format, sample_rate=rate,
        mode=mode, timestamps=req.timestamps, instructions=req.instructions,
        lexicon=checked.lexicon)


@dataclass(frozen=True)
class Lookup:
    """What the cache said of one request.

    Attributes:
        outcome: hit, miss or bypass; None with the cache off (no header sent).
        key: the request's key (hit or miss), else None.
        entry: the stored response on a hit, else None.
    """

    outcome: Outcome | None = None
    key: CacheKey | None = None
    entry: CachedResponse | None = None


async def lookup(cache: AudioCache | None, request: Request, body: SpeechBody,
                 checked: CheckedRequest, mode: Mode, rate: int) -> Lookup:
    """Look `body`'s response up in `cache` (None: the cache is off), unless its audio is not
    fixed or the client said ``no-store`` (then ``bypass``: no read, no write). Memory first,
    then the disk tier if any, read in a worker thread (`AudioCache.fetch`)."""
    if cache is None:
        return Lookup()
    if not checked.fixed_audio or no_store(request):
        return Lookup("bypass")
    key = cache_key(cache, body, checked, mode, rate)
    entry = await cache.fetch(key)
    return Lookup("miss" if entry is None else "hit", key, entry)


def hit_response(entry: CachedResponse, headers: dict[str, str]) -> Response:
    """The stored body, sent whole at once, with its audio headers and `headers` (the
    request's own: id, ignored fields, ``X-Voxflow-Cache``)."""
    return Response(entry.body, media_type=entry.media_type, headers={**entry.headers, **headers})


class Recorder:
    """Keeps a body's bytes as they are sent and stores them in the cache once the response
    ended complete (`complete`); a body over ``cache.max_entry_bytes`` stops being kept.

    Args:
        cache: where to store it.
        key: its key.
        media_type: the body's ``Content-Type``.
        headers: the audio's headers to store with it (not the request's own).
        audio_s: called at the end: seconds of audio in the body.
    """

    def __init__(self, cache: AudioCache, key: CacheKey, media_type: str,
                 headers: dict[str, str], audio_s: Callable[[], float]):
        self._cache, self._key, self._media, self._headers = cache, key, media_type, headers
        self._audio_s = audio_s
        self._parts: list[bytes] | None = []
        self._size = 0

    def add(self, data: bytes) -> None:
        """`data` was sent (the next piece of the body)."""
        if self._parts is None:
            return
        self._size += len(data)
        if self._size > self._cache.max_entry_bytes:
            self._parts = None  # too large to keep: not stored
        else:
            self._parts.append(data)

    def complete(self) -> bool:
        """The whole body was sent and the audio is complete: store it. Returns whether it
        was stored (`AudioCache.put`)."""
        if self._parts is None:
            return False
        entry = CachedResponse(b"".join(self._parts), self._media, dict(self._headers),
                               self._audio_s())
        return self._cache.put(self._key, entry)


__all__ = ["HEADER", "Lookup", "Recorder", "body_mode", "cache_key", "hit_response", "lookup",
           "no_store"]
