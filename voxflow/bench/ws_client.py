"""One request over `WS /v1/audio/speech/stream` (``voxflow bench run --ws``), recorded as a
`Timeline` like an HTTP request's.

The text is sent word by word (each word with the whitespace before it) at `words_per_s`, then
an end message, while the audio frames are read and timed as they arrive. `Timeline.sent` is
the moment the first word leaves, so TTFA is from the first text piece: it includes the time
the words of the first sentence take to arrive (a sentence is known complete when the next one
begins, or at the end), which is what a listener of an LLM's streamed answer waits for.

Error kinds, besides those of `voxflow.bench.client` (``timeout``, ``connect``, ``truncated``:
the connection broke, ``decode``, ``http_<status>``: the handshake was refused):
``ws_<code>`` for a session closed with another code than 1000 (``ws_4429``: overloaded,
``ws_4400``: refused), ``stream_error`` for an ``error`` event.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus, WebSocketException

from voxflow.bench.decode import DecodeError, make_decoder
from voxflow.bench.target import Target
from voxflow.bench.timeline import Result, Timeline

STREAM_PATH = "/v1/audio/speech/stream"
OWNED = frozenset({"type", "model", "voice", "response_format", "seed"})
"""Config fields the harness sets (an `--extra` of the same name is ignored)."""


def words_of(text: str) -> list[str]:
    """`text`'s words, each with the whitespace before it (joined: `text`, right-stripped)."""
    return re.findall(r"\s*\S+", text)


def stream_url(url: str) -> str:
    """The stream route's ws:// (or wss://) URL on the server at http(s) `url`."""
    return re.sub(r"^http", "ws", url.rstrip("/")) + STREAM_PATH


def config_message(target: Target, seed: int | None) -> dict[str, Any]:
    """The session's first message: the target's model, voice and format, its extras."""
    config: dict[str, Any] = {k: v for k, v in target.extras.items() if k not in OWNED}
    config.update(type="config", model=target.model, voice=target.voice,
                  response_format=target.fmt)
    if seed is not None:
        config["seed"] = seed
    return config


async def _send_words(ws: ClientConnection, words: list[str], words_per_s: float,
                      timeline: Timeline) -> None:
    start = time.perf_counter()
    for i, word in enumerate(words):
        due = start + i / words_per_s  # on a schedule: a slow send does not slow the rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if i == 0:
            timeline.sent = time.perf_counter()
        await ws.send(json.dumps({"type": "text", "text": word}))
    await ws.send(json.dumps({"type": "end"}))


async def _read(ws: ClientConnection, timeline: Timeline, fmt: str,
                pieces: list[np.ndarray] | None) -> None:
    decoder = None
    async for message in ws:
        if isinstance(message, str):
            event = json.loads(message)
            if event["type"] == "session.created":
                decoder = make_decoder(fmt, int(event["sample_rate"]))
                timeline.sample_rate = int(event["sample_rate"])
            elif event["type"] == "error":
                timeline.error = "stream_error"
            continue
        now = time.perf_counter()
        if decoder is None:
            raise DecodeError("audio before session.created")
        samples = decoder.feed(message)
        timeline.add(now, samples.size)
        if pieces is not None and samples.size:
            pieces.append(samples)
    if decoder is not None:
        tail = decoder.finish()
        timeline.add(time.perf_counter(), tail.size)
        if decoder.sample_rate:
            timeline.sample_rate = decoder.sample_rate
    if ws.close_code != 1000 and timeline.error is None:
        timeline.error = f"ws_{ws.close_code}"


async def fetch_ws(target: Target, text: str, text_index: int, seed: int | None,
                   timeout_s: float, words_per_s: float, keep_audio: bool = False) -> Result:
    """Speak `text` over one stream session (module docstring); never raises for a failed
    request: the timeline records its error kind.

    Args:
        target: the server (its url) and the config's model, voice, format and extras.
        words_per_s: words sent per second (> 0).
        timeout_s: seconds the whole session may take.
    """
    timeline = Timeline(text_index, sent=time.perf_counter())
    pieces: list[np.ndarray] | None = [] if keep_audio else None
    try:
        async with asyncio.timeout(timeout_s):
            async with connect(stream_url(target.url), max_size=None,
                               additional_headers=target.headers) as ws:
                await ws.send(json.dumps(config_message(target, seed)))
                reader = asyncio.create_task(_read(ws, timeline, target.fmt, pieces))
                try:
                    await _send_words(ws, words_of(text), words_per_s, timeline)
                except WebSocketException:
                    pass  # closed by the server: the reader records why
                await reader
    except TimeoutError:
        timeline.error = "timeout"
    except InvalidStatus as exc:
        timeline.error = f"http_{exc.response.status_code}"
    except ConnectionClosedError:
        timeline.error = timeline.error or "truncated"
    except (OSError, WebSocketException):
        timeline.error = timeline.error or "connect"
    except DecodeError:
        timeline.error = "decode"
    finally:
        timeline.done = time.perf_counter()
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    return Result(timeline, audio if keep_audio else None)


__all__ = ["config_message", "fetch_ws", "stream_url", "words_of"]
