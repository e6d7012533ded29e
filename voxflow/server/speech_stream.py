"""`WS /v1/audio/speech/stream`: speech from text that arrives in pieces (docs/api.md,
"Streaming text input"; the messages are in `voxflow.server.stream_protocol`).

A session: the client's config is checked as `POST /v1/audio/speech` checks a body (the same
schema, `Engine.check_options`, the same codes); its text pieces go into a `SentenceBuffer`,
which gives out each sentence once the next has begun (the front end's splitter), the text up
to its last clause once no text came for `server.stream_clause_wait_s`, and everything on
``flush`` or ``end``. Each piece given out is a segment of the stream and one engine request
(its text the piece, the config's seed), spoken strictly in order by one speaker task: the
next segment is submitted when the previous one's audio has all been sent, so a session holds
at most one admission slot and its segments never take the cores from each other (as the
scheduler's rule 6 does for the segments of one request). Synthesis being faster than real
time, each segment is ready long before the client has played the one before.

A model that can feed one running generation from the stream's text (`streams_text_in`:
CosyVoice3; the config's `bistream`, on by default there) gets no sentences: the session submits
one engine request at its first text, carrying a `TextFeed` every later text message is pushed
into, and `end` ends the feed (issue 43 item 2). Its audio is one segment, streamed as the LM
makes it while text still arrives; prosody does not restart at each sentence. Each text message
is checked on its own as a request's input is (`_check_fed`); a refused one is answered with an
``error`` event and left out, and the session goes on (no close). A generation that reaches the
text it may take (CosyVoice3's roll-over, `voxflow.models.cosyvoice3.lm_stream`) ends after
speaking what it took; the rest of the text, and what comes later, goes to a new generation,
the stream's next segment.

The audio of all segments goes through one stream encoder, so the binary frames form one
file of `response_format`. A client that closes the socket cancels its request in the engine
at once (`SpeechStream.aclose`) and the session ends; an error is an ``error`` event and a
close with code 4000 + status, other sessions undisturbed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from voxflow.audio.rates import delivered_rate
from voxflow.audio.stream import StreamEncoder, open_stream_encoder
from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.engine.stream import SpeechStream
from voxflow.errors import InvalidRequestError, ShuttingDownError, VoxflowError
from voxflow.server.request_id import AccessRecord, accepted_request_id, log_access, new_request_id
from voxflow.server.schemas import StreamConfig
from voxflow.server.speech import CLIENT_CLOSED, hold_saved_voice
from voxflow.server.stream_protocol import (
    NORMAL_CLOSURE,
    Control,
    TextMessage,
    close_code,
    done_event,
    error_event,
    invalid_message,
    parse_message,
    segment_end_event,
    segment_start_event,
    session_event,
    stream_word_event,
)
from voxflow.server.voice_sync import refresh_if_unknown
from voxflow.stages.text_feed import TextFeed
from voxflow.text.incremental import SentenceBuffer, TextSpan, speakable
from voxflow.text.normalize import has_speakable_content

log = logging.getLogger(__name__)

STREAM_PATH = "/v1/audio/speech/stream"


FED_TIMEOUT_S = 3600.0
"""Request timeout of a session's fed generation (`StreamConfig.bistream`): it lasts as long
as its text keeps coming (the model's text timeout ends a silent one), up to the text one
generation takes (CosyVoice3: about 750 text ids, then it rolls over to a new one)."""

MAX_UNSPOKEN_INPUTS = 64
"""A session holds at most this many times `server.max_input_chars` of text received and not
yet being spoken (64 x 4,096 characters: about four hours of speech); more is refused
(``input_too_long``), so a client cannot fill the server's memory with text."""


def _server_error() -> VoxflowError:
    """What a session's unexpected error is answered with (500, code server_error)."""
    return VoxflowError("The server had an error while processing the request.")


class _Gone(Exception):
    """The client closed the socket (a send failed or a disconnect arrived)."""


class StreamSession:
    """One WebSocket speech stream (module docstring). `run` serves it to the end.

    Args:
        websocket: the accepted socket.
        engine: the running engine.
        settings: the server's settings (`max_input_chars`, `stream_clause_wait_s`).
        request_id: the session's id; segment ``i``'s engine request is ``{request_id}-{i}``.
    """

    def __init__(self, websocket: WebSocket, engine: Engine, settings: Settings,
                 request_id: str, app_state: Any = None) -> None:
        self.ws = websocket
        self.engine = engine
        # the app's state (`refresh_if_unknown`: saved voices made on another replica); None
        # where the session is not the HTTP app's (Wyoming's streaming synthesis)
        self.app_state = app_state
        self.max_chars = settings.server.max_input_chars
        self.wait_s = settings.server.stream_clause_wait_s
        self.max_unspoken_chars = MAX_UNSPOKEN_INPUTS * self.max_chars
        self._unspoken_chars = 0  # in spans queued, not yet taken by the speaker
        self.access = AccessRecord(request_id, stream=True)
        self._inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._spans: asyncio.Queue[TextSpan | None] = asyncio.Queue()
        self._send_lock = asyncio.Lock()
        self._buffer: SentenceBuffer | None = None
        self._base: SpeechRequest | None = None
        self._encoder: StreamEncoder | None = None
        self._speaker: asyncio.Task | None = None
        self._ended = False  # the client sent "end"
        self._fed: TextFeed | None = None  # the running fed generation's (bistream) text feed
        self._fed_text = ""  # the text of the session so far, in the fed mode
        self._fed_start = 0  # where the running (or next) fed generation's text begins in it
        self.bistream = False  # the session feeds one running generation
        self._closed = False  # a close was sent, or the client is gone
        self.samples = 0  # samples sent so far, at the voice's rate
        self.sample_rate = 0
        self.segments = 0

    @property
    def request_id(self) -> str:
        return self.access.request_id

    # ---- the session -----------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the session until it ends: normal close after ``end``, an error, or the
        client gone. Never raises for anything the client does."""
        reader = asyncio.create_task(self._read())
        try:
            self.engine.drain.check()  # a new session while the server drains: refused
            with self.engine.drain.activity(abort=self.abort):
                await self._control()
        except _Gone:
            self._closed = True
        except VoxflowError as exc:
            await self._fail(exc)
        except Exception:  # a bug: the generic 500, details in the log only
            log.exception("speech stream %s: unexpected error", self.request_id)
            await self._fail(_server_error())
        finally:
            for task in (reader, self._speaker):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(*(t for t in (reader, self._speaker) if t is not None),
                                 return_exceptions=True)
            if self._encoder is not None:
                self._encoder.close()
            self._log()

    def abort(self) -> None:
        """End the session now with ``shutting_down`` (an ``error`` event, close 1001): the
        server's drain timed out (`voxflow.engine.drain`)."""
        self._inbox.put_nowait(("failed", ShuttingDownError(
            retry_after=self.engine.drain.retry_after_s)))

    async def _read(self) -> None:
        """Put each client frame in the inbox, then ("gone", None) when it disconnects."""
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                if message.get("text") is not None:
                    await self._inbox.put(("text", message["text"]))
                else:
                    await self._inbox.put(("bytes", None))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        await self._inbox.put(("gone", None))

    async def _control(self) -> None:
        """Handle frames until the speaker finishes, the client goes, or an error."""
        while True:
            quiet = self._buffer is not None and not self._ended and self._buffer.pending.strip()
            try:
                kind, data = await asyncio.wait_for(self._inbox.get(),
                                                    self.wait_s if quiet else None)
            except TimeoutError:  # no text for a while: speak up to the last clause
                assert self._buffer is not None
                self._queue(self._buffer.take_clause())
                continue
            if kind == "gone":
                raise _Gone
            if kind == "spoken":  # the speaker sent everything and closed
                return
            if kind == "failed":
                raise data
            if kind == "bytes":
                raise invalid_message("Binary frames are not accepted: send JSON text frames.",
                                      param=None)
            await self._handle(parse_message(data, self.max_chars))

    async def _handle(self, message: StreamConfig | TextMessage | Control) -> None:
        if self._ended:
            raise invalid_message("Message after 'end': the stream takes no more messages.")
        if isinstance(message, StreamConfig):
            if self._base is not None:
                raise invalid_message("A second 'config' message: the stream's options are "
                                      "set once, by its first message.")
            await self._configure(message)
            return
        if self._buffer is None:
            raise invalid_message("The first message must be the 'config' message "
                                  '({"type": "config", "model": ..., "voice": ...}).')
        if self.bistream:
            await self._handle_fed(message)
        elif isinstance(message, TextMessage):
            if self.access.first_byte_at is None and self._buffer.received_chars == 0:
                self.access.started_at = time.perf_counter()  # TTFA counts from the first text
            self._queue(self._buffer.add(message.text))
            self.access.chars = self._buffer.received_chars
        elif message.kind == "flush":
            self._queue(self._buffer.take_all())
        else:  # end
            self._ended = True
            self._queue(self._buffer.take_all())
            self._spans.put_nowait(None)

    async def _configure(self, config: StreamConfig) -> None:
        """Check the config as a speech body is checked; start the speaker."""
        self.access.model, self.access.voice = config.model, config.voice_id
        self.access.fmt = config.response_format
        if self.app_state is not None:  # a voice made on another replica a moment ago
            await refresh_if_unknown(self.app_state, config.model, config.voice_id)
        request = self.engine.resolve(SpeechRequest(
            config.model, "", config.voice_id, config.speed, config.seed,
            language=config.language, timestamps=config.timestamps,
            instructions=config.instructions or None, lexicon=config.lexicon))
        family = self.engine.check_options(request)
        if config.bistream and not family.streams_text_in:
            raise InvalidRequestError(
                f"Model '{request.model}' cannot feed a stream's text into one generation (its "
                f"family '{family.family}' speaks each sentence on its own); leave bistream "
                "out or set it false.", param="bistream", code="unsupported_parameter")
        self.bistream = family.streams_text_in if config.bistream is None else config.bistream
        if request.instructions and not family.follows_instructions:
            # a stream has no response header to say they were ignored: refused
            raise InvalidRequestError(
                f"Model '{request.model}' does not follow instructions (its family "
                f"'{family.family}' has no style prompt); leave them out of the config.",
                param="instructions", code="unsupported_parameter")
        self.access.model, self.access.voice = request.model, request.voice  # served names
        voice = family.voices[request.voice]
        self._base = request
        self.sample_rate = voice.sample_rate
        self.access.audio = lambda: self.samples / self.sample_rate
        rate = delivered_rate(config.response_format, voice.sample_rate, config.sample_rate)
        self._encoder = open_stream_encoder(config.response_format, voice.sample_rate, rate)
        self._buffer = SentenceBuffer(self.max_chars, request.language or voice.language)
        await self._send_json(session_event(self.request_id, request.model, request.voice,
                                            config.response_format, rate))
        if not self.bistream:  # the fed generation's speaker starts with its first text
            self._speaker = asyncio.create_task(self._speak_all())

    # ---- one fed generation (bistream) -------------------------------------------------------
    def _check_fed(self, text: str) -> None:
        """Check one fed text message as `POST /v1/audio/speech` checks its `input`: the
        engine's own checker (`Engine.prepare`: length, pause markers, SSML, scripts, with the
        session's options), but a message of whitespace only passes (the space between two
        words of a stream). Markup is refused as well: the LM reads fed text as written, so a
        ``[pause:...]`` marker or SSML would be spoken as text.

        Raises:
            InvalidRequestError: param "input": what `Engine.prepare` refuses (its code:
                ``input_too_long``, ``invalid_pause``, ``invalid_ssml``, ``unsupported_script``,
                ...), SSML (``invalid_ssml``) or a valid pause marker (``invalid_pause``).
        """
        if not text.strip():
            return
        assert self._base is not None
        _, document = self.engine.prepare(replace(self._base, text=text, text_feed=None))
        if document.ssml:
            raise InvalidRequestError(
                "SSML is not taken in a stream that feeds one generation (bistream): its text "
                "is read as written. Send plain text, or set bistream false in the config.",
                param="input", code="invalid_ssml")
        if (len(document.runs) > 1 or document.lead_silence_s > 0
                or document.runs[0].break_after_s > 0):
            raise InvalidRequestError(
                "A [pause:...] marker is not taken in a stream that feeds one generation "
                "(bistream): its text is read as written. Leave the marker out, or set "
                "bistream false in the config.", param="input", code="invalid_pause")

    async def _handle_fed(self, message: TextMessage | Control) -> None:
        """The fed mode: every text message is checked (`_check_fed`; a refused one is an
        ``error`` event, left out of the text, and the session goes on) and goes to the running
        generation's `TextFeed` (started by the first text with a letter or digit); ``flush``
        changes nothing (the LM takes text as it comes); ``end`` ends the feed."""
        if isinstance(message, TextMessage):
            try:
                self._check_fed(message.text)
            except InvalidRequestError as exc:  # this message only: the session goes on
                await self._send_json(error_event(exc))
                return
            if self.access.first_byte_at is None and not self._fed_text:
                self.access.started_at = time.perf_counter()  # TTFA counts from the first text
            self._fed_text += message.text
            self.access.chars = len(self._fed_text)
            if len(self._fed_text) > self.max_unspoken_chars:
                raise InvalidRequestError(
                    f"The stream sent {len(self._fed_text)} characters; one session takes "
                    f"at most {self.max_unspoken_chars} (MAX_UNSPOKEN_INPUTS x "
                    "server.max_input_chars).", param="text", code="input_too_long")
            if self._fed is not None:
                self._fed.push(message.text)
            elif (self._speaker is None or self._speaker.done()) and has_speakable_content(
                    self._fed_text[self._fed_start:]):  # starts at the first letter/digit
                self._start_fed(self._fed_text[self._fed_start:])
        elif message.kind == "end":
            self._ended = True
            if self._fed is not None:
                self._fed.end()
            elif self.segments:  # rolled over with nothing speakable left: done
                await self._finish()
                self._inbox.put_nowait(("spoken", None))
            elif self._speaker is None:
                # nothing speakable sent: a plain request, answered as for that input (empty:
                # empty_input; symbols only: a short silence), as on the sentence path
                self._start_fed(self._fed_text, fed=False)

    def _start_fed(self, text: str, fed: bool = True) -> None:
        """Submit the session's next generation (segment `segments`), `text` pushed into a new
        feed (ended too after the client's ``end``), or, `fed` False, as one plain request of
        that text. The request's own `text`, which the engine checks, is its first
        `server.max_input_chars` characters (every message was checked on its own)."""
        assert self._base is not None
        feed = TextFeed()
        feed.push(text)
        if self._ended and fed:
            feed.end()
        index = self.segments
        request = replace(self._base, text=text[:self.max_chars],
                          request_id=f"{self.request_id}-{index}",
                          text_feed=feed if fed else None)
        stream = self.engine.submit(request, timeout_s=FED_TIMEOUT_S)
        hold_saved_voice(self.engine, stream)
        self._fed = feed if fed else None
        self._speaker = asyncio.create_task(self._speak_fed(stream, index, feed))

    async def _speak_fed(self, stream: SpeechStream, index: int, feed: TextFeed) -> None:
        """Send one fed generation's audio as it comes: segment `index`, whose start event
        carries the text received by its first audio (from where the generation began); then,
        if it rolled over (`TextFeed.rolled`), start the next generation with the text it did
        not speak (`_roll_over`), else the done event and the close."""
        assert self._encoder is not None
        start = self._fed_start
        first = self.samples
        rate = self.sample_rate

        async def started_event() -> None:
            text = self._fed_text[start:]
            await self._send_json(segment_start_event(
                index, TextSpan(text, start, start + len(text)), first / rate))

        try:
            started = False
            async with stream:
                async for chunk in stream:
                    if not started:
                        await started_event()
                        started = True
                    data = self._encoder.push(chunk.samples)
                    self.samples += int(chunk.samples.size)
                    if data:
                        await self._send_bytes(data)
                if not stream.done:
                    raise _Gone  # closed under us
            if not started:
                await started_event()
            self.segments = index + 1
            await self._send_json(segment_end_event(index, self.samples - first,
                                                    self.samples / rate))
            if feed.rolled and self._roll_over(feed):
                return
            await self._finish()
            await self._inbox.put(("spoken", None))
        except VoxflowError as exc:
            await self._inbox.put(("failed", exc))
        except _Gone:
            await self._inbox.put(("gone", None))
        except Exception:  # a bug: the generic 500, details in the log only
            log.exception("speech stream %s: unexpected error", self.request_id)
            await self._inbox.put(("failed", _server_error()))

    def _roll_over(self, feed: TextFeed) -> bool:
        """The generation of `feed` rolled over: its unspoken text (and all sent since) starts
        the next one now if it has a letter or digit; else that waits for the next such text,
        or the ``end`` finishes the session. False when the session is to finish now (ended,
        nothing speakable left)."""
        rest, _ = feed.take()
        self._fed = None
        self._fed_start = max(0, len(self._fed_text) - len(rest))  # rest is NFC: near enough
        if has_speakable_content(rest):
            self._start_fed(rest)
            return True
        return not self._ended

    def _queue(self, spans: list[TextSpan]) -> None:
        for span in spans:
            self._unspoken_chars += len(span.text)
            self._spans.put_nowait(span)
        held = self._unspoken_chars + (len(self._buffer.pending) if self._buffer else 0)
        if held > self.max_unspoken_chars:
            raise InvalidRequestError(
                f"The stream holds {held} characters not yet spoken; the limit is "
                f"{self.max_unspoken_chars} (MAX_UNSPOKEN_INPUTS x server.max_input_chars): "
                "send text no faster than it can be spoken.",
                param="text", code="input_too_long",
            )

    # ---- the speaker -------------------------------------------------------------------------
    async def _speak_all(self) -> None:
        """Speak each span in order; after the end, the encoder's tail, the done event and
        the normal close. Reports to the control loop through the inbox."""
        unspoken: list[str] = []
        try:
            while (span := await self._spans.get()) is not None:
                self._unspoken_chars -= len(span.text)
                if speakable(span):
                    await self._speak(span)
                else:  # symbols only: nothing to say, unless nothing else ever is
                    unspoken.append(span.text)
            if self.segments == 0:
                # The engine refuses nothing sent (empty_input); symbols alone: a short silence.
                text = " ".join(unspoken)
                await self._speak(TextSpan(text, 0, len(text)))
            await self._finish()
            await self._inbox.put(("spoken", None))
        except VoxflowError as exc:
            await self._inbox.put(("failed", exc))
        except _Gone:
            await self._inbox.put(("gone", None))
        except Exception:  # a bug: the generic 500, details in the log only
            log.exception("speech stream %s: unexpected error", self.request_id)
            await self._inbox.put(("failed", _server_error()))

    async def _speak(self, span: TextSpan) -> None:
        """One segment: submit it, send its events and audio as they come."""
        assert self._base is not None and self._encoder is not None
        index = self.segments
        request = replace(self._base, text=span.text, request_id=f"{self.request_id}-{index}")
        first = self.access.first_byte_at  # the listener's first audio, if any yet
        ends = None if first is None else first + self.samples / self.sample_rate
        # scheduled as the continuation of the audio sent so far, not as a new arrival
        stream = self.engine.submit(request, listener_ends_at=ends)
        hold_saved_voice(self.engine, stream)
        rate = self.sample_rate
        start = self.samples
        started = False  # segment.start waits for the first chunk: a segment the engine
        async with stream:  # refuses (a script it cannot read) then has only its error event
            async for chunk in stream:
                if not started:
                    await self._send_json(segment_start_event(index, span, start / rate))
                    started = True
                for word in chunk.words:  # before the audio that starts them
                    await self._send_json(stream_word_event(span, word, start / rate))
                data = self._encoder.push(chunk.samples)
                self.samples += int(chunk.samples.size)
                if data:
                    await self._send_bytes(data)
            if not stream.done:
                raise _Gone  # closed under us
        if not started:  # finished without a chunk: its start still precedes its end
            await self._send_json(segment_start_event(index, span, start / rate))
        self.segments += 1
        await self._send_json(segment_end_event(index, self.samples - start, self.samples / rate))

    async def _finish(self) -> None:
        assert self._encoder is not None and self._buffer is not None
        tail = self._encoder.finish()
        if tail:
            await self._send_bytes(tail)
        chars = len(self._fed_text) if self.bistream else self._buffer.received_chars
        await self._send_json(done_event(chars, self.samples / self.sample_rate))
        self.access.status, self.access.complete = 200, True
        await self._close(NORMAL_CLOSURE, "done")

    # ---- sending -----------------------------------------------------------------------------
    async def _send_json(self, event: dict[str, Any]) -> None:
        await self._send({"type": "websocket.send", "text": json.dumps(event)})

    async def _send_bytes(self, data: bytes) -> None:
        if self.access.first_byte_at is None:
            self.access.first_byte_at = time.perf_counter()
        await self._send({"type": "websocket.send", "bytes": data})

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            if self._closed:
                raise _Gone
            try:
                await self.ws.send(message)
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._closed = True
                raise _Gone from None

    async def _close(self, code: int, reason: str) -> None:
        async with self._send_lock:
            if self._closed:
                return
            self._closed = True
            try:
                await self.ws.close(code, reason)
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass

    async def _fail(self, error: VoxflowError) -> None:
        """Send `error` as an ``error`` event, then close with 4000 + its status."""
        self.access.status = error.status
        if error.status >= 500:
            log.error("speech stream %s failed: %s", self.request_id, error.message)
        try:
            await self._send_json(error_event(error))
        except _Gone:
            return
        await self._close(close_code(error), error.code)

    def _log(self) -> None:
        if self.access.status is None:
            self.access.status = CLIENT_CLOSED  # the client left before the end
        log_access(self.access)


async def speech_stream(websocket: WebSocket) -> None:
    """`WS /v1/audio/speech/stream` (module docstring). The session's id is the handshake's
    ``X-Request-Id`` when usable (`accepted_request_id`), else a new one."""
    engine: Engine = websocket.app.state.engine
    settings: Settings = websocket.app.state.settings
    request_id = accepted_request_id(websocket.headers.get("x-request-id")) or new_request_id()
    await websocket.accept(headers=[(b"x-request-id", request_id.encode())])
    gauge = engine.metrics.speech_streams
    gauge.inc()
    try:
        await StreamSession(websocket, engine, settings, request_id,
                            app_state=websocket.app.state).run()
    finally:
        gauge.dec()


__all__ = ["STREAM_PATH", "StreamSession", "speech_stream"]
