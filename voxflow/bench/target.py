"""The server under test and the request options that stay the same for every request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NO_STORE = {"Cache-Control": "no-store"}
"""Sent to a voxflow server unless ``--cache``: the request is synthesized, never answered from
the server's audio cache (so a benchmark measures synthesis, and a determinism check compares
two syntheses)."""

OPENAI_PCM_RATE = 24000
"""Hz of OpenAI's ``pcm`` (16-bit mono), assumed when a server does not say its rate."""


@dataclass(frozen=True)
class Target:
    """The server under test and the request options that do not change per request."""

    engine: str
    url: str
    model: str = "piper"
    voice: str = "joe"
    fmt: str = "pcm"
    stream: bool = True
    stream_field: bool = True
    """Whether the body carries ``stream`` at all (False: the OpenAI client's plain body)."""
    sse: bool = False
    sample_rate: int = OPENAI_PCM_RATE
    extras: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request to the server but its health check (``Authorization: Bearer
    KEY`` for a voxflow server with API keys, `options.target_from`)."""
    text_words_per_s: float | None = None
    """wyoming only: stream the text (``synthesize-start`` and chunks) at this many words per
    second; None: one ``synthesize`` with the whole text."""
