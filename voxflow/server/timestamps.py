"""`POST /v1/audio/speech/timestamps`: the whole audio and each word's timing, as one JSON.

The body is that of `POST /v1/audio/speech`; the response is never streamed, so
``stream: true`` and ``stream_format: "sse"`` are a 400 naming the field, and `timestamps` is
implied (any value accepted). The answer::

    {"audio": <base64 of the whole file in response_format>, "format": "wav",
     "sample_rate": 22050, "duration": 3.21, "words": [{"word", "start", "end",
     "text_start", "text_end"}, ...]}

`sample_rate` is the rate of `audio` (Hz; as `X-Sample-Rate`: 24000 for pcm unless the body's
`sample_rate` asks otherwise, `voxflow.audio.rates`); `duration` is the audio's length in seconds
(to the millisecond);
words are as in `voxflow.server.words`. A model that cannot time words is a 400 (param
"timestamps") before any synthesis, as on the speech route. Each request leaves an access line
like a speech request's (`voxflow.server.request_id`).
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from voxflow.audio.encode import encode_audio
from voxflow.engine.engine import Engine
from voxflow.errors import InvalidRequestError
from voxflow.server.schemas import SpeechBody
from voxflow.server.speech import (
    CLIENT_CLOSED,
    _close_on_disconnect,
    _first_chunk,
    _headers,
    out_rate,
    submit_speech,
)
from voxflow.server.voice_sync import refresh_if_unknown
from voxflow.server.words import word_json


def _check_not_streamed(body: SpeechBody) -> None:
    for param, streamed in (("stream_format", body.stream_format == "sse"),
                            ("stream", body.stream is True)):
        if streamed:
            raise InvalidRequestError(
                f"/v1/audio/speech/timestamps answers one JSON document: {param} cannot ask "
                'for a stream there (stream words with stream_format "sse" and timestamps '
                "true on /v1/audio/speech).",
                param=param,
                code="stream_not_supported",
            )


async def create_speech_timestamps(body: SpeechBody, request: Request) -> Response:
    """Synthesize `body` whole; answer its audio (base64) and its words (module docstring)."""
    _check_not_streamed(body)
    engine: Engine = request.app.state.engine
    await refresh_if_unknown(request.app.state, body.model, body.voice_id)  # replicas
    stream, ignored = submit_speech(body, request, engine, streams=False, timestamps=True)
    watcher = asyncio.create_task(_close_on_disconnect(request, stream))
    try:
        chunks = [await _first_chunk(stream)]
        async with stream:
            chunks.extend([chunk async for chunk in stream])
    except StopAsyncIteration:
        return Response(status_code=CLIENT_CLOSED)
    finally:
        watcher.cancel()
    if not chunks[-1].is_last:  # closed by the disconnect watcher
        return Response(status_code=CLIENT_CLOSED)
    audio = np.concatenate([c.samples for c in chunks])
    rate = out_rate(body, stream)
    data = await asyncio.to_thread(encode_audio, audio, stream.sample_rate,
                                   body.response_format, rate)
    return JSONResponse(
        {
            "audio": base64.b64encode(data).decode(),
            "format": body.response_format,
            "sample_rate": rate,
            "duration": round(audio.size / stream.sample_rate, 3),
            "words": [word_json(body.input, w) for c in chunks for w in c.words],
        },
        headers=_headers(stream, engine, ignored, rate),
    )
