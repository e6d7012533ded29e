"""Wyoming's streaming synthesis, spoken by the WebSocket route's own session.

Home Assistant streams an LLM's answer as ``synthesize-start``, ``synthesize-chunk``s of text,
a duplicate full ``synthesize`` (for servers without streaming: ignored here), then
``synthesize-stop``, and reads audio until ``synthesize-stopped``. That is what
``WS /v1/audio/speech/stream`` does with ``config``, ``text`` and ``end`` messages, so the same
`StreamSession` speaks it (the sentence buffer, the clause wait, the continuation scheduling,
the unspoken-text limit, cancelling on disconnect, the access line): `WyomingSocket` stands in
for its WebSocket, turning Wyoming events into its messages and its messages into Wyoming
events. Audio is 16-bit mono PCM at the voice's own rate, one ``audio-start`` when the session
is accepted, ``audio-chunk``s as the segments are synthesized and one ``audio-stop`` after the
last, then ``synthesize-stopped``: Home Assistant writes a WAV header from the first
``audio-start`` and appends every chunk, so the format never changes within a response.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.tts import SynthesizeStopped

from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.server.speech_stream import StreamSession

SAMPLE_WIDTH = 2  # bytes: 16-bit PCM
CHUNK_BYTES = 2048 * SAMPLE_WIDTH
"""Largest ``audio-chunk`` payload: 2,048 samples (93 ms at 22,050 Hz; wyoming-piper: 1,024)."""

Send = Callable[[Event], Awaitable[None]]


def audio_chunks(data: bytes, rate: int) -> list[Event]:
    """``audio-chunk`` events carrying `data` (16-bit mono PCM at `rate` Hz) in pieces of at
    most `CHUNK_BYTES`."""
    return [AudioChunk(rate=rate, width=SAMPLE_WIDTH, channels=1,
                       audio=data[i:i + CHUNK_BYTES]).event()
            for i in range(0, len(data), CHUNK_BYTES)]


class WyomingSocket:
    """The three calls `StreamSession` makes of a WebSocket (``receive``, ``send``,
    ``close``), over a Wyoming connection.

    Args:
        send: writes one Wyoming event to the client.
    Attributes:
        closed_code: the close code the session ended with (1000 after a normal end; 4000 +
            status after an error, whose ``error`` event was sent), None while it runs.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._rate = 0
        self.closed_code: int | None = None

    # ---- into the session -------------------------------------------------------------------
    def put(self, message: dict[str, Any]) -> None:
        """Hand the session one client message (``config``, ``text``, ``end``)."""
        self._inbox.put_nowait({"type": "websocket.receive", "text": json.dumps(message)})

    def leave(self) -> None:
        """The client is gone: the session cancels its work."""
        self._inbox.put_nowait({"type": "websocket.disconnect"})

    async def receive(self) -> dict[str, Any]:
        return await self._inbox.get()

    # ---- out of the session -----------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        """A session frame as Wyoming events: audio bytes as ``audio-chunk``s; the events that
        start and end the audio; an ``error``. Segment and word events have no Wyoming form."""
        if message.get("bytes") is not None:
            for event in audio_chunks(message["bytes"], self._rate):
                await self._send(event)
            return
        event = json.loads(message["text"])
        kind = event["type"]
        if kind == "session.created":
            self._rate = event["sample_rate"]
            await self._send(AudioStart(rate=self._rate, width=SAMPLE_WIDTH, channels=1).event())
        elif kind == "speech.audio.done":
            await self._send(AudioStop().event())
            await self._send(SynthesizeStopped().event())
        elif kind == "error":
            error = event["error"]
            await self._send(Error(text=error["message"], code=error["code"]).event())

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed_code = code


async def speak_stream(engine: Engine, settings: Settings, socket: WyomingSocket,
                       request_id: str) -> int:
    """Run one streaming synthesis over `socket` to its end; returns its close code (1000:
    every sentence spoken and ``synthesize-stopped`` sent; else the error was sent)."""
    gauge = engine.metrics.speech_streams
    gauge.inc()
    try:
        await StreamSession(socket, engine, settings, request_id).run()  # type: ignore[arg-type]
    finally:
        gauge.dec()
    return socket.closed_code if socket.closed_code is not None else 4499
