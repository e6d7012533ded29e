"""What the audio cache stores and under which key (`voxflow.server.audio_cache`, and its disk
tier `voxflow.server.disk_cache`): `CacheKey`, everything a speech response's bytes depend on,
and `CachedResponse`, the body as it was sent. `KEYED_FIELDS` and `UNKEYED_FIELDS` say, for
every field of a speech request, which key field holds it or why none does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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


__all__ = ["KEYED_FIELDS", "UNKEYED_FIELDS", "CacheKey", "CachedResponse", "Mode"]
