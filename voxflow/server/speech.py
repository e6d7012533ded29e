"""`POST /v1/audio/speech`: validate, submit to the engine, answer whole or streamed.

Every error that can be known before audio exists is answered as a proper 4xx/5xx: the handler
waits for the first chunk before sending headers. A request streams unless it says
``"stream": false`` (or the server's `server.stream_by_default` is off and it does not say
``"stream": true``); SSE always streams. A streamed response then carries audio as each
segment is synthesized: raw bytes of the format (a streamed WAV has a header for unknown length)
or, with ``stream_format: "sse"``, `speech.audio.delta` events with base64 audio and a final
`speech.audio.done`. With ``timestamps: true`` (SSE only) a `speech.word` event per word of the
input is sent before the audio delta that starts it (`voxflow.server.words`). A client that goes
away cancels its request in the engine at once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
from fastapi import Request
from fastapi.responses import Response
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from voxflow.audio.encode import encode_audio
from voxflow.audio.formats import content_type
from voxflow.audio.rates import delivered_rate
from voxflow.audio.stream import open_stream_encoder
from voxflow.engine.checked import CheckedRequest
from voxflow.engine.engine import Engine
from voxflow.engine.request import AudioChunk, SpeechRequest, TimedWord
from voxflow.engine.stream import SpeechStream
from voxflow.errors import InvalidRequestError, VoxflowError
from voxflow.models.cloning import VoiceCloning
from voxflow.server import ignored as ignored_header
from voxflow.server import speech_cache
from voxflow.server.coalesce import coalesced
from voxflow.server.request_id import AccessRecord
from voxflow.server.schemas import SpeechBody
from voxflow.server.stream_protocol import done_event
from voxflow.server.voice_sync import refresh_if_unknown
from voxflow.server.words import word_event

log = logging.getLogger(__name__)


class CancellingStreamingResponse(StreamingResponse):
    """A streaming response that cancels its speech stream when the client disconnects.

    Under ASGI spec < 2.4 (uvicorn today) Starlette listens for `http.disconnect` and cancels
    the response, which lands here in `finally`. Under 2.4 Starlette stops listening, so a
    client that leaves while the engine is between chunks would go unnoticed; then this
    response watches for the disconnect itself. Either way the stream is closed on the way out.
    """

    def __init__(self, content: AsyncIterator[bytes], stream: SpeechStream, **kwargs):
        super().__init__(content, **kwargs)
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        spec = scope.get("asgi", {}).get("spec_version", "2.0")
        watcher = None
        if tuple(map(int, spec.split("."))) >= (2, 4):
            watcher = asyncio.create_task(self._watch_disconnect(receive))
        stall_s = self._stream.stall_s
        try:
            await super().__call__(scope, receive, send if stall_s is None
                                   else _stall_limited(send, stall_s))
        except StreamAborted:
            # Headers are gone, so the status cannot change. Returning without the final empty
            # body message makes the server drop the connection: the client sees an incomplete
            # chunked body (an error), never a clean end of a truncated file.
            pass
        finally:
            if watcher is not None:
                watcher.cancel()
            await self._stream.aclose()
            await self.body_iterator.aclose()  # type: ignore[attr-defined]

    async def _watch_disconnect(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                await self._stream.aclose()
                return


def _stall_limited(send: Send, stall_s: float) -> Send:
    """`send` that gives up (`StreamAborted`) on a message the client has not taken within
    `stall_s` seconds (it reads nothing: the transport's buffer stays full), so the response
    ends instead of waiting on it for good (`server.client_stall_timeout_s`)."""

    async def send_within(message) -> None:
        try:
            await asyncio.wait_for(send(message), stall_s)
        except TimeoutError:
            raise StreamAborted(f"the client read nothing for {stall_s:g} s") from None

    return send_within


def to_engine_request(body: SpeechBody, request_id: str | None = None,
                      streamed: bool = True) -> SpeechRequest:
    """The engine request for `body`, whose id is `request_id` (the HTTP request's
    ``X-Request-Id``) when given, else a new one; `streamed` says whether its response is
    streamed (`SpeechRequest.streamed`). Its fields are checked by the engine
    (`Engine.prepare`, `voxflow.engine.checks`), as for every other entry point."""
    speech = SpeechRequest(
        body.model, body.input, body.voice_id, body.speed, body.seed, language=body.language,
        timestamps=body.timestamps, streamed=streamed, instructions=body.instructions or None,
        lexicon=body.lexicon,
    )
    return replace(speech, request_id=request_id) if request_id else speech


async def _first_chunk(stream: SpeechStream) -> AudioChunk:
    try:
        return await anext(stream)
    except BaseException:
        await stream.aclose()
        raise


async def _close_on_disconnect(request: Request, stream: SpeechStream) -> None:
    """Close `stream` when the client goes away (the body is read: receive() waits for it)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            await stream.aclose()
            return


# Not sent to anyone (the client is gone): nginx's "client closed request".
CLIENT_CLOSED = 499


async def _whole(stream: SpeechStream, first: AudioChunk, fmt: str, rate: int,
                 headers: dict[str, str],
                 recorder: speech_cache.Recorder | None = None) -> Response:
    chunks = [first]
    async with stream:
        chunks.extend([chunk async for chunk in stream])
    if not chunks[-1].is_last:  # closed by the disconnect watcher
        return Response(status_code=CLIENT_CLOSED)
    audio = np.concatenate([c.samples for c in chunks]) if chunks else np.zeros(0, np.float32)
    data = await asyncio.to_thread(encode_audio, audio, stream.sample_rate, fmt, rate)
    if recorder is not None:  # complete audio: kept for the next identical request
        recorder.add(data)
        recorder.complete()
    return Response(data, media_type=content_type(fmt, rate), headers=headers)


def out_rate(body: SpeechBody, stream: SpeechStream) -> int:
    """The rate (Hz) `body`'s audio is delivered at: its `sample_rate`, else OpenAI's 24 kHz
    for pcm and the model's rate for the rest (`voxflow.audio.rates.delivered_rate`)."""
    return delivered_rate(body.response_format, stream.sample_rate, body.sample_rate)


def _headers(stream: SpeechStream, engine: Engine, ignored: list[str],
             rate: int) -> dict[str, str]:
    return {**_audio_headers(stream, engine, rate),
            **_request_headers(stream.request_id, stream.state.request.instructions, ignored)}


def _request_headers(request_id: str, instructions: str | None,
                     ignored: list[str]) -> dict[str, str]:
    """The headers of one request, cached response or not: its id, the fields it sent that
    were not acted on, and whether its `instructions` (as the engine kept them) were
    followed."""
    headers = {"X-Request-Id": request_id}
    if ignored:  # fields sent and not acted on (voxflow.server.ignored)
        headers[ignored_header.HEADER] = ignored_header.header_value(ignored)
    # the engine keeps a request's instructions only where its model follows them
    value = ignored_header.instructions_value(instructions is not None, ignored)
    if value is not None:
        headers[ignored_header.INSTRUCTIONS_HEADER] = value
    return headers


def _audio_headers(stream: SpeechStream, engine: Engine, rate: int) -> dict[str, str]:
    """The headers that describe the audio (stored with a cached response)."""
    headers = {"X-Sample-Rate": str(rate)}
    if engine.family(stream.state.request.model).random_weights_note() is not None:
        headers["X-Voxflow-Weights"] = "random"  # noise, not speech (/v1/models says more)
    if stream.state.unspeakable:  # only punctuation or symbols: the audio is a short silence
        headers["X-Voxflow-Unspeakable"] = "true"
    document = stream.state.document
    if document is not None and document.dropped_letters:
        # Letters of scripts the voice cannot read, removed (docs/api.md, "Scripts").
        headers["X-Dropped-Letters"] = str(document.dropped_letters)
    return headers


class StreamAborted(Exception):
    """A streamed body failed after its headers were sent (timeout, stage error)."""


async def _audio_bytes(stream: SpeechStream, first: AudioChunk, fmt: str, rate: int,
                       min_samples: int,
                       recorder: speech_cache.Recorder | None = None) -> AsyncIterator[bytes]:
    try:
        async for data in _encoded(stream, first, fmt, rate, min_samples):
            yield data
            if recorder is not None:  # resumed: `data` was sent
                recorder.add(data)
        if recorder is not None:  # every piece sent and the audio complete
            recorder.complete()
    except VoxflowError as exc:
        log.error("stream %s ended early: %s", stream.request_id, exc.message)
        raise StreamAborted(exc.message) from exc


def _sse(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


async def _sse_events(
    stream: SpeechStream, first: AudioChunk, fmt: str, rate: int, text: str, min_samples: int,
    recorder: speech_cache.Recorder | None = None,
) -> AsyncIterator[bytes]:
    samples = 0
    n_chars = len(text)

    def sent(event: bytes) -> bytes:
        if recorder is not None:
            recorder.add(event)
        return event

    try:
        async for words, data in _encoded_chunks(stream, first, fmt, rate, min_samples):
            for word in words:  # before the audio that starts them
                yield sent(_sse(word_event(text, word)))
            if data:
                yield sent(_sse({"type": "speech.audio.delta",
                                 "audio": base64.b64encode(data).decode()}))
        samples = stream.state.audio_samples
        yield sent(_sse(done_event(n_chars, samples / stream.sample_rate)))
        if recorder is not None:  # resumed after the done event: all of it was sent
            recorder.complete()
    except VoxflowError as exc:
        yield _sse({"type": "error", **exc.to_dict()})


async def _encoded(stream: SpeechStream, first: AudioChunk, fmt: str, rate: int,
                   min_samples: int) -> AsyncIterator[bytes]:
    """Encoded bytes of each chunk as it arrives; raises the stream's error if it fails."""
    async for _, data in _encoded_chunks(stream, first, fmt, rate, min_samples):
        if data:
            yield data


async def _engine_chunks(stream: SpeechStream, first: AudioChunk) -> AsyncIterator[AudioChunk]:
    """`first`, then the stream's chunks up to its last (or until it is closed)."""
    chunk: AudioChunk | None = first
    while chunk is not None:
        yield chunk
        chunk = None if chunk.is_last else await anext(stream, None)


async def _encoded_chunks(
    stream: SpeechStream, first: AudioChunk, fmt: str, rate: int, min_samples: int = 0
) -> AsyncIterator[tuple[tuple[TimedWord, ...], bytes]]:
    """Per chunk as it arrives (joined to at least `min_samples` samples, `coalesce`), its
    words and its encoded bytes at `rate` Hz (maybe b""), then the encoder's tail; raises the
    stream's error if it fails."""
    encoder = open_stream_encoder(fmt, stream.sample_rate, rate)
    async for chunk in coalesced(_engine_chunks(stream, first), min_samples):
        yield chunk.words, encoder.push(chunk.samples)
    yield (), encoder.finish()


def hold_saved_voice(engine: Engine, stream: SpeechStream) -> None:
    """Hold the voice of a just-submitted `stream` until its request ends, when its model
    clones voices, so deleting the saved voice meanwhile does not pull it from under the
    request (`voxflow.models.cloning`). Call with no await since `Engine.submit`."""
    family = engine.family(stream.state.request.model)
    if isinstance(family, VoiceCloning):
        stream.state.on_end(family.hold_voice(stream.state.request.voice))


def check_speech(body: SpeechBody, request: Request, engine: Engine, streams: bool,
                 timestamps: bool = False) -> CheckedRequest:
    """Check `body` for the speech routes (`Engine.check`: aliases resolved, input parsed),
    the request's access record filled with the names asked for, then the served ones.

    Raises:
        InvalidRequestError: an unknown field under ``server.unknown_fields: refuse``.
        what `Engine.check` raises (a 4xx for bad input).
    """
    ignored_header.refuse_unknown(body, request.app.state.settings.server.unknown_fields)
    access: AccessRecord | None = getattr(request.state, "access", None)
    if access is not None:
        access.model, access.voice, access.chars = body.model, body.voice_id, len(body.input)
        access.fmt, access.stream = body.response_format, streams
    speech = to_engine_request(body, getattr(request.state, "request_id", None), streams)
    if timestamps:
        speech = replace(speech, timestamps=True)
    checked = engine.check(speech)  # resolves model and voice aliases
    if access is not None:
        access.model, access.voice = checked.request.model, checked.request.voice  # served
        ignored = ignored_header.ignored_fields(body, checked.family)
        access.ignored = ",".join(ignored) or None
    return checked


def submit_speech(body: SpeechBody, request: Request, engine: Engine, streams: bool,
                  timestamps: bool = False,
                  checked: CheckedRequest | None = None) -> tuple[SpeechStream, list[str]]:
    """Submit `body` to `engine` for the speech routes: the request's access record filled
    (the names asked for, then the served ones, its audio seconds and the fields ignored), and
    a saved voice held until the request ends, so deleting it meanwhile does not pull it from
    under the request (`voxflow.models.cloning`; no await between submit's check and the hold).

    Args:
        streams: whether the response is streamed (the access line says so).
        timestamps: ask for word timings even if the body does not.
        checked: `check_speech`'s result when the caller has it (with no await since).
    Returns:
        The stream, and the fields of `body` the served model does not act on (for the
        ``X-Voxflow-Ignored`` header).
    Raises:
        InvalidRequestError: an unknown field under ``server.unknown_fields: refuse``.
        what `Engine.submit` raises (a 4xx for bad input).
    """
    if checked is None:
        checked = check_speech(body, request, engine, streams, timestamps)
    stream = engine.submit(checked.request, checked=checked)
    hold_saved_voice(engine, stream)
    ignored = ignored_header.ignored_fields(body, checked.family)
    access: AccessRecord | None = getattr(request.state, "access", None)
    if access is not None:
        state = stream.state
        access.audio = lambda: state.audio_samples / state.sample_rate
    return stream, ignored


async def create_speech(body: SpeechBody, request: Request) -> Response:
    """Handle one speech request (see the module docstring)."""
    engine: Engine = request.app.state.engine
    settings = request.app.state.settings
    await refresh_if_unknown(request.app.state, body.model, body.voice_id)  # replicas
    streams = body.streams(settings.server.stream_by_default)
    if body.timestamps and body.stream_format != "sse":
        raise InvalidRequestError(
            'timestamps need stream_format "sse" on /v1/audio/speech (word events between '
            "the audio events); for a whole response with its words, POST "
            "/v1/audio/speech/timestamps.",
            param="timestamps",
            code="timestamps_need_sse",
        )
    checked = check_speech(body, request, engine, streams)  # every 4xx, cache or not
    mode = speech_cache.body_mode(body, streams)
    voice_rate = checked.family.voices[checked.request.voice].sample_rate
    rate = delivered_rate(body.response_format, voice_rate, body.sample_rate)
    cache = getattr(request.app.state, "audio_cache", None)
    found = await speech_cache.lookup(cache, request, body, checked, mode, rate)
    access: AccessRecord | None = getattr(request.state, "access", None)
    if access is not None:
        access.cache = found.outcome
    cache_headers = {} if found.outcome is None else {speech_cache.HEADER: found.outcome}
    if found.entry is not None:
        entry = found.entry
        if access is not None:
            access.audio = lambda: entry.audio_s
        ignored = ignored_header.ignored_fields(body, checked.family)
        own = _request_headers(checked.request.request_id, checked.request.instructions, ignored)
        if mode != "whole":
            own["X-Accel-Buffering"] = "no"
        return speech_cache.hit_response(entry, {**own, **cache_headers})
    stream, ignored = submit_speech(body, request, engine, streams, checked=checked)
    # Until a StreamingResponse takes over (it watches the connection itself), a client that
    # leaves cancels the request here, whether it waits for the first chunk or the whole file.
    watcher = asyncio.create_task(_close_on_disconnect(request, stream))
    try:
        first = await _first_chunk(stream)
        fmt = body.response_format
        audio_headers = _audio_headers(stream, engine, rate)
        headers = {**audio_headers, **cache_headers,
                   **_request_headers(stream.request_id, stream.state.request.instructions,
                                      ignored)}
        recorder = None
        if cache is not None and found.key is not None:
            state = stream.state
            media = "text/event-stream" if mode == "sse" else content_type(fmt, rate)
            recorder = speech_cache.Recorder(
                cache, found.key, media, audio_headers,
                lambda: state.audio_samples / state.sample_rate)
        if not streams:
            return await _whole(stream, first, fmt, rate, headers, recorder)
    except StopAsyncIteration:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        watcher.cancel()
    # behind Ray Serve each streamed piece costs a hop: pieces of at least this much audio
    min_samples = round(request.app.state.min_stream_chunk_s * stream.sample_rate)
    if body.stream_format == "sse":
        content = _sse_events(stream, first, fmt, rate, body.input, min_samples, recorder)
        media = "text/event-stream"
    else:
        content = _audio_bytes(stream, first, fmt, rate, min_samples, recorder)
        media = content_type(fmt, rate)
    # nginx buffers proxied responses by default, which would hold the audio back until the
    # end: this asks it not to (docs/operations.md, "Behind a reverse proxy")
    headers["X-Accel-Buffering"] = "no"
    return CancellingStreamingResponse(content, stream, media_type=media, headers=headers)
