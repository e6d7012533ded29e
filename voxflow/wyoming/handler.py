"""One Wyoming connection: ``describe``, one-shot ``synthesize`` and streaming synthesis.

Events (OHF-Voice/wyoming ``README.md``; what Home Assistant's ``wyoming/tts.py`` does with
them is in docs/clients.md):

- ``describe`` -> ``info`` (`voxflow.wyoming.info`).
- ``synthesize`` -> ``audio-start``, ``audio-chunk``s as the audio is synthesized (a Piper
  voice window by window, so the first chunk leaves before the first sentence is done), one
  ``audio-stop`` after the last sentence. One engine request, as ``POST /v1/audio/speech``:
  the same checks, admission and batching. Home Assistant reads until the first
  ``audio-stop`` and builds its WAV from the first chunk's format.
- ``synthesize-start``, ``synthesize-chunk``s, ``synthesize-stop`` -> the same audio events
  sentence by sentence as the text arrives, then ``synthesize-stopped``
  (`voxflow.wyoming.streaming`). A full ``synthesize`` between start and stop is Home
  Assistant's copy of the text for servers without streaming: ignored.
- ``ping`` -> ``pong``.

One request at a time per connection; events are read while it runs, so a client that leaves
cancels its engine work at once. Anything wrong (an unknown voice, empty or too long text, an
event out of order, malformed or over ``wyoming.max_event_bytes``, another domain's event) is
an ``error`` event (``text``: the message; ``code``: voxflow's error code) and the connection
closed: Home Assistant ignores ``error`` and would otherwise wait for audio.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from wyoming.audio import AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from voxflow.audio.encode import pcm_bytes
from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.errors import InvalidRequestError, VoxflowError
from voxflow.server.request_id import AccessRecord, log_access, new_request_id
from voxflow.server.speech import CLIENT_CLOSED, hold_saved_voice
from voxflow.wyoming.info import pick_voice, wyoming_info
from voxflow.wyoming.reader import GuardedReader
from voxflow.wyoming.streaming import SAMPLE_WIDTH, WyomingSocket, audio_chunks, speak_stream

log = logging.getLogger(__name__)


class _Closed(Exception):
    """End the connection (after an ``error`` event, or the client is gone)."""


def _out_of_order(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=None, code="invalid_message")


class VoxflowWyomingHandler(AsyncEventHandler):
    """Serves one connection (module docstring) until the client leaves or an error.

    Args:
        reader, writer: the connection, as `wyoming.server.AsyncTcpServer` gives them.
        engine: the running engine (shared with HTTP).
        settings: the server's settings (``wyoming.max_event_bytes``; the text stream's
            ``server.max_input_chars`` and ``stream_clause_wait_s``).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 engine: Engine, settings: Settings) -> None:
        super().__init__(reader, writer)
        self.engine = engine
        self.settings = settings
        self._guarded = GuardedReader(reader, settings.wyoming.max_event_bytes)
        self._write_lock = asyncio.Lock()
        self._job: asyncio.Task | None = None  # the request being served
        self._socket: WyomingSocket | None = None  # the stream's, while its job runs
        self._taking_text = False  # between synthesize-start and synthesize-stop

    async def run(self) -> None:
        """Read events until the client leaves or an error ends the connection."""
        try:
            while True:
                event = await async_read_event(self._guarded)  # type: ignore[arg-type]
                if event is None:
                    break
                await self._dispatch(event)
        except VoxflowError as exc:
            await self._send_error(exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a bug: the generic message, details in the log
            log.exception("wyoming connection: unexpected error")
            await self._send_error(_server_error())
        finally:
            await self._end_job()
            self.writer.close()

    async def handle_event(self, event: Event) -> bool:
        """`wyoming.server.AsyncEventHandler`'s hook; `run` dispatches itself."""
        await self._dispatch(event)
        return True

    # ---- events ------------------------------------------------------------------------------
    async def _dispatch(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self.write_event(wyoming_info(self.engine).event())
        elif Ping.is_type(event.type):
            await self.write_event(Pong(text=Ping.from_event(event).text).event())
        elif Synthesize.is_type(event.type):
            if not self._taking_text:  # within a stream: Home Assistant's copy of the text
                self.engine.drain.check()  # no new request while the server drains
                text, voice = _text(event), _voice(event)
                self._start(self._speak_whole(text, voice))
        elif SynthesizeStart.is_type(event.type):
            self.engine.drain.check()
            self._start_stream(_voice(event))
        elif SynthesizeChunk.is_type(event.type):
            self._stream_or_refuse("synthesize-chunk").put({"type": "text", "text": _text(event)})
        elif SynthesizeStop.is_type(event.type):
            self._stream_or_refuse("synthesize-stop").put({"type": "end"})
            self._taking_text = False  # the session speaks what it has, then synthesize-stopped
        else:
            raise InvalidRequestError(
                f"Unsupported Wyoming event '{event.type[:64]}': this server does text to "
                "speech (describe, synthesize, synthesize-start/-chunk/-stop, ping).",
                param=None, code="unsupported_event")

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        if self._job is not None:
            work.close()
            raise _out_of_order("A new request while one is in progress: one request at a "
                                "time per connection.")
        self._job = asyncio.create_task(self._serve(work))

    def _start_stream(self, voice: SynthesizeVoice | None) -> None:
        picked, language = pick_voice(self.engine, voice.name if voice else None,
                                      voice.language if voice else None)
        _check_speaker(voice.speaker if voice else None, picked.name)
        socket = WyomingSocket(self.write_event)
        config = {"type": "config", "model": picked.model, "voice": picked.voice,
                  "response_format": "pcm", "sample_rate": "native"}
        if language is not None:
            config["language"] = language
        socket.put(config)
        self._start(self._speak_stream(socket))
        self._socket, self._taking_text = socket, True

    def _stream_or_refuse(self, kind: str) -> WyomingSocket:
        if not self._taking_text or self._socket is None:
            raise _out_of_order(f"'{kind}' outside a stream: send 'synthesize-start' first.")
        return self._socket

    # ---- the request -------------------------------------------------------------------------
    async def _serve(self, work: Coroutine[Any, Any, None]) -> None:
        """Run one request; an error is sent as an ``error`` event and ends the connection."""
        try:
            await work
        except VoxflowError as exc:
            await self._send_error(exc)
            self._hang_up()
        except (_Closed, ConnectionError):
            self._hang_up()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: the generic message, details in the log
            log.exception("wyoming request: unexpected error")
            await self._send_error(_server_error())
            self._hang_up()
        finally:
            self._job, self._socket = None, None

    async def _speak_stream(self, socket: WyomingSocket) -> None:
        code = await speak_stream(self.engine, self.settings, socket, new_request_id())
        if code != 1000:
            raise _Closed  # its error event was sent (or the client left)

    async def _speak_whole(self, text: str, voice: SynthesizeVoice | None) -> None:
        """One ``synthesize``: one engine request, its audio as it is made."""
        picked, language = pick_voice(self.engine, voice.name if voice else None,
                                      voice.language if voice else None)
        _check_speaker(voice.speaker if voice else None, picked.name)
        access = AccessRecord(new_request_id(), model=picked.model, voice=picked.voice,
                              chars=len(text), fmt="wyoming", stream=True)
        try:
            request = replace(SpeechRequest(picked.model, text, picked.voice,
                                            language=language),
                              request_id=access.request_id)
            stream = self.engine.submit(request)
            hold_saved_voice(self.engine, stream)
            state = stream.state
            access.audio = lambda: state.audio_samples / state.sample_rate
            async with stream:
                rate = stream.sample_rate
                await self.write_event(AudioStart(rate=rate, width=SAMPLE_WIDTH,
                                                  channels=1).event())
                async for chunk in stream:
                    for event in audio_chunks(pcm_bytes(chunk.samples), rate):
                        if access.first_byte_at is None:
                            access.first_byte_at = time.perf_counter()
                        await self.write_event(event)
                if not stream.done:
                    raise _Closed  # closed under us
            await self.write_event(AudioStop().event())
            access.status, access.complete = 200, True
        except VoxflowError as exc:
            access.status = exc.status
            raise
        finally:
            if access.status is None:
                access.status = CLIENT_CLOSED
            log_access(access)

    def _hang_up(self) -> None:
        """End the connection from the request's side: the reader sees the end at once."""
        self.writer.close()
        self.reader.feed_eof()

    async def _end_job(self) -> None:
        """On the way out: a stream is told the client left, a whole request cancelled."""
        job = self._job
        if job is None:
            return
        if self._socket is not None:
            self._socket.leave()  # the session cancels its engine work and ends
        else:
            job.cancel()
        await asyncio.gather(job, return_exceptions=True)

    # ---- writing -----------------------------------------------------------------------------
    async def write_event(self, event: Event) -> None:
        """Write one event; events of the request task and the reader never interleave."""
        async with self._write_lock:
            await async_write_event(event, self.writer)

    async def _send_error(self, error: VoxflowError) -> None:
        if error.status >= 500:
            log.error("wyoming connection failed: %s", error.message)
        try:
            await self.write_event(Error(text=error.message, code=error.code).event())
        except (ConnectionError, RuntimeError):
            pass


def _server_error() -> VoxflowError:
    return VoxflowError("The server had an error while processing the request.")


def _voice(event: Event) -> SynthesizeVoice | None:
    """The event's ``voice`` (`SynthesizeVoice`), checked to be an object of strings."""
    voice = event.data.get("voice")
    if voice is None:
        return None
    if not isinstance(voice, dict) or not all(
            isinstance(voice.get(k), str | None) for k in ("name", "language", "speaker")):
        raise InvalidRequestError('Malformed Wyoming event: "voice" must be an object with '
                                  'string "name", "language" or "speaker".', param="voice",
                                  code="invalid_event")
    return SynthesizeVoice.from_dict(voice)


def _text(event: Event) -> str:
    text = event.data.get("text")
    if not isinstance(text, str):
        raise InvalidRequestError(f"Malformed Wyoming event: a {event.type}'s \"text\" must be "
                                  "a string.", param="text", code="invalid_event")
    return text


def _check_speaker(speaker: str | None, voice: str) -> None:
    """voxflow's voices have one speaker each: naming one is refused, never ignored."""
    if speaker is not None:
        raise InvalidRequestError(
            f"Voice {voice!r} has no speakers; send the voice's name alone.",
            param="speaker", code="speaker_not_found")
