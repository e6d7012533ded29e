"""One request to a Wyoming text-to-speech server (``--engine wyoming``), recorded as a
`Timeline` like an HTTP request's, sent the way Home Assistant's Wyoming integration sends it
(``homeassistant/components/wyoming/tts.py``).

- **One-shot** (`Target.text_words_per_s` None): a ``synthesize`` event with the whole text, then
  audio read until the first ``audio-stop``. `Timeline.sent` is the moment before the event is
  written.
- **Streamed text** (`Target.text_words_per_s` set): ``synthesize-start``, the text word by word
  as ``synthesize-chunk`` events at that pace (an LLM writing its answer), the whole text again
  as ``synthesize`` (Home Assistant sends it for servers without streaming; a streaming server
  ignores it), ``synthesize-stop``; audio read until ``synthesize-stopped``. `Timeline.sent` is
  the moment the last word of the first sentence leaves: first audio counts from when the first
  sentence's text is complete (`first_sentence_end`), so a server that waits for the whole text
  is not flattered by the pace of the words and one that speaks each sentence as it completes is
  not charged for it.

Audio must be 16-bit PCM in one format (rate, width, channels) for the whole response: Home
Assistant writes one WAV header from the first format it sees.

Error kinds (those of `voxflow.bench.client`): ``connect`` (refused or unreachable),
``timeout`` (the whole request took longer than its timeout), ``truncated`` (the server closed
the connection before the end event), ``stream_error`` (an ``error`` event: Home Assistant
ignores those, so servers close after one), ``decode`` (audio that is not 16-bit, or whose
format changes within the response).
"""

from __future__ import annotations

import asyncio
import re
import time
from urllib.parse import urlsplit

import numpy as np
from wyoming.audio import AudioChunk, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from voxflow.bench.decode import DecodeError
from voxflow.bench.target import Target
from voxflow.bench.timeline import Result, Timeline
from voxflow.bench.ws_client import words_of

SAMPLE_WIDTH_BYTES = 2
"""16-bit PCM: what Home Assistant and every Wyoming TTS server send."""
INFO_TIMEOUT_S = 1.0
"""Home Assistant's ``_INFO_TIMEOUT`` (``homeassistant/components/wyoming/data.py``)."""
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*$")


def host_port(url: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (HOST, PORT).

    Raises:
        ValueError: not a tcp:// URL with a host and a port.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "tcp" or not parts.hostname or port is None:
        raise ValueError(f"a Wyoming server is tcp://HOST:PORT, got {url!r}")
    return parts.hostname, port


def first_sentence_end(words: list[str]) -> int:
    """Index of the word that ends the first sentence: the first whose text ends with
    ``. ! ?`` (or their CJK forms), closing quotes and brackets allowed after; the last word if
    none does. 0 for no words."""
    for i, word in enumerate(words):
        if _SENTENCE_END.search(word):
            return i
    return max(len(words) - 1, 0)


def _voice(target: Target) -> SynthesizeVoice | None:
    """The voice to ask for: None (the server's default) when `target.voice` is empty."""
    return SynthesizeVoice(name=target.voice) if target.voice else None


async def describe(url: str, timeout_s: float = INFO_TIMEOUT_S) -> Info | None:
    """The server's ``info`` answer to ``describe``, or None when it does not answer with one
    within `timeout_s` (refused, closed, or too slow)."""
    host, port = host_port(url)
    try:
        async with asyncio.timeout(timeout_s):
            async with AsyncTcpClient(host, port) as client:
                await client.write_event(Describe().event())
                while (event := await client.read_event()) is not None:
                    if Info.is_type(event.type):
                        return Info.from_event(event)
    except (OSError, TimeoutError, ValueError):
        return None
    return None


class _Reader:
    """Reads audio events into a timeline until the end event; see the module docstring."""

    def __init__(self, timeline: Timeline, keep_audio: bool):
        self.timeline = timeline
        self.pieces: list[np.ndarray] | None = [] if keep_audio else None
        self.fmt: tuple[int, int, int] | None = None

    def audio(self) -> np.ndarray:
        return np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)

    def chunk(self, event: Event, now: float) -> None:
        chunk = AudioChunk.from_event(event)
        fmt = (chunk.rate, chunk.width, chunk.channels)
        if chunk.width != SAMPLE_WIDTH_BYTES:
            raise DecodeError(f"audio of {chunk.width} bytes per sample, not 16-bit")
        if self.fmt is not None and fmt != self.fmt:
            raise DecodeError(f"audio format changed from {self.fmt} to {fmt} within a response")
        self.fmt = fmt
        self.timeline.sample_rate = chunk.rate
        frames = np.frombuffer(chunk.audio[:len(chunk.audio) - len(chunk.audio) % (
            SAMPLE_WIDTH_BYTES * chunk.channels)], dtype="<i2").reshape(-1, chunk.channels)
        self.timeline.add(now, frames.shape[0])
        if self.pieces is not None and frames.size:
            self.pieces.append(frames[:, 0].astype(np.float32) / 32768.0)

    async def until(self, client: AsyncTcpClient, end_type: str) -> None:
        """Read events until one of `end_type`; records errors on the timeline."""
        while True:
            event = await client.read_event()
            now = time.perf_counter()
            if event is None:
                self.timeline.error = "truncated"
                return
            if AudioChunk.is_type(event.type):
                self.chunk(event, now)
            elif Error.is_type(event.type):
                self.timeline.error = "stream_error"
                return
            elif event.type == end_type:
                return


async def _send_words(client: AsyncTcpClient, target: Target, text: str,
                      timeline: Timeline) -> None:
    assert target.text_words_per_s is not None
    words = words_of(text)
    mark = first_sentence_end(words)
    voice = _voice(target)
    await client.write_event(SynthesizeStart(voice=voice).event())
    start = time.perf_counter()
    for i, word in enumerate(words):
        due = start + i / target.text_words_per_s  # on a schedule: a slow send keeps the pace
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await client.write_event(SynthesizeChunk(text=word).event())
        if i == mark:
            timeline.sent = time.perf_counter()
    await client.write_event(Synthesize(text=text, voice=voice).event())
    await client.write_event(SynthesizeStop().event())


async def fetch_wyoming(target: Target, text: str, text_index: int, timeout_s: float,
                        keep_audio: bool = False) -> Result:
    """Speak `text` on the Wyoming server at `target.url` (``tcp://HOST:PORT``) as the module
    docstring says; never raises for a failed request: the timeline records its error kind.

    Args:
        target: the server, the voice (empty: the server's default) and, in
            `Target.text_words_per_s`, whether and how fast to stream the text.
        timeout_s: seconds the whole request may take.
    """
    host, port = host_port(target.url)
    timeline = Timeline(text_index, sent=time.perf_counter())
    reader = _Reader(timeline, keep_audio)
    connected = False
    try:
        async with asyncio.timeout(timeout_s):
            async with AsyncTcpClient(host, port) as client:
                connected = True
                if target.text_words_per_s is None:
                    timeline.sent = time.perf_counter()
                    await client.write_event(
                        Synthesize(text=text, voice=_voice(target)).event())
                    await reader.until(client, AudioStop().event().type)
                else:
                    sender = asyncio.create_task(_send_words(client, target, text, timeline))
                    try:
                        await reader.until(client, SynthesizeStopped().event().type)
                    finally:
                        sender.cancel()
                        await asyncio.gather(sender, return_exceptions=True)
    except TimeoutError:
        timeline.error = "timeout"
    except DecodeError:
        timeline.error = "decode"
    except (OSError, asyncio.IncompleteReadError):
        timeline.error = timeline.error or ("truncated" if connected else "connect")
    finally:
        timeline.done = time.perf_counter()
    return Result(timeline, reader.audio() if keep_audio else None)


__all__ = ["INFO_TIMEOUT_S", "describe", "fetch_wyoming", "first_sentence_end", "host_port"]
