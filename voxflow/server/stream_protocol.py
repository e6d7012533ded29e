"""The messages of `WS /v1/audio/speech/stream` (docs/api.md, "Streaming text input").

Client to server, JSON text frames, in this order:
- ``{"type": "config", "model", "voice", "response_format", "speed", "seed", "language",
  "timestamps"}``: once, first; the fields of `POST /v1/audio/speech` but `input`, `stream` and
  `stream_format` (`voxflow.server.schemas.StreamConfig`), refused with the same codes;
- ``{"type": "text", "text": "..."}``: any number, each at most `server.max_input_chars`;
- ``{"type": "flush"}``: speak all text received so far now, complete sentence or not;
- ``{"type": "end"}``: no more text: speak the rest, then the server closes.

Server to client: binary frames of audio in `response_format`, and JSON events built here
(`session.created`, `segment.start`, `speech.word`, `segment.end`, `speech.audio.done`,
`error`). An error is answered with an ``error`` event in the OpenAI shape and a close whose
code is 4000 + the HTTP status the same error gets on `POST /v1/audio/speech` (4400, 4404,
4429, 4500, ...) and whose reason is the error's `code`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from voxflow.engine.request import TimedWord
from voxflow.errors import InvalidRequestError, ShuttingDownError, VoxflowError, echo
from voxflow.server.errors import validation_error
from voxflow.server.schemas import StreamConfig
from voxflow.server.words import word_json
from voxflow.text.incremental import TextSpan

MESSAGE_TYPES = ("config", "text", "flush", "end")
"""The `type`s a client may send."""

CONFIG_EXAMPLE = '{"type": "config", "model": "piper", "voice": "joe", "response_format": "pcm"}'

NORMAL_CLOSURE = 1000
"""The close code after ``speech.audio.done``."""


@dataclass(frozen=True)
class TextMessage:
    """A ``text`` message: `text` to append to the stream's text."""

    text: str


@dataclass(frozen=True)
class Control:
    """A ``flush`` or ``end`` message (`kind`)."""

    kind: str


ClientMessage = StreamConfig | TextMessage | Control


def invalid_message(message: str, param: str | None = "type") -> InvalidRequestError:
    """The 400 for a message that is not one of the protocol's, or not in its place
    (code ``invalid_message``)."""
    return InvalidRequestError(message, param=param, code="invalid_message")


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
        error = "not valid JSON"
    else:
        error = "" if isinstance(value, dict) else "not a JSON object"
    if error:
        raise InvalidRequestError(
            f"Message is {error}; send JSON objects like {CONFIG_EXAMPLE}, then "
            '{"type": "text", "text": "Hello."} and {"type": "end"}.',
            code="invalid_json",
        )
    assert isinstance(value, dict)
    return value


def _config(fields: dict[str, Any]) -> StreamConfig:
    try:
        return StreamConfig.model_validate(fields)
    except ValidationError as exc:
        # the HTTP body's wording and codes; validation_error reads FastAPI's "body" location
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise validation_error(RequestValidationError(errors)) from None


def _text(fields: dict[str, Any], max_chars: int) -> TextMessage:
    unknown = sorted(set(fields) - {"text"})
    if unknown:
        raise InvalidRequestError(
            f"Unrecognized argument supplied in a text message: {echo(unknown[0])}.",
            param=unknown[0], code="unknown_parameter",
        )
    if "text" not in fields:
        raise InvalidRequestError("Missing required parameter: 'text'.", param="text",
                                  code="missing_required_parameter")
    text = fields["text"]
    if not isinstance(text, str):
        raise InvalidRequestError("Invalid type for 'text': expected a string.", param="text",
                                  code="invalid_type")
    if len(text) > max_chars:
        raise InvalidRequestError(
            f"text is {len(text)} characters; the limit per message is {max_chars}.",
            param="text", code="input_too_long",
        )
    return TextMessage(text)


def parse_message(raw: str, max_chars: int) -> ClientMessage:
    """One client text frame as its message.

    Args:
        raw: the frame's text.
        max_chars: the longest `text` of a text message (`server.max_input_chars`).
    Raises:
        InvalidRequestError: not a JSON object (``invalid_json``), no or an unknown `type`
            (``invalid_message``), a config refused as `POST /v1/audio/speech` refuses a body
            (``unknown_parameter``, ``invalid_type``, ...), a text message without a string
            `text` or over `max_chars` (``input_too_long``), fields on flush or end.
    """
    fields = _json_object(raw)
    kind = fields.pop("type", None)
    if kind not in MESSAGE_TYPES:
        what = "has no 'type'" if kind is None else f"has an unknown type {echo(kind)}"
        raise invalid_message(f"Message {what}; the types are {', '.join(MESSAGE_TYPES)}.")
    if kind == "config":
        return _config(fields)
    if kind == "text":
        return _text(fields, max_chars)
    if fields:
        name = sorted(fields)[0]
        raise InvalidRequestError(
            f"Unrecognized argument supplied in a {kind} message: {echo(name)}.", param=name,
            code="unknown_parameter",
        )
    return Control(kind)


GOING_AWAY = 1001
"""RFC 6455's close code for a server going down."""


def close_code(error: VoxflowError) -> int:
    """The WebSocket close code for `error`: 4000 + its HTTP status (4400, 4429, 4500...), but
    1001 (going away) for ``shutting_down``, a server that drains before it stops."""
    if isinstance(error, ShuttingDownError):
        return GOING_AWAY
    return 4000 + error.status


def error_event(error: VoxflowError) -> dict[str, Any]:
    """``{"type": "error", "error": {message, type, param, code}}`` (the OpenAI shape)."""
    return {"type": "error", **error.to_dict()}


def session_event(request_id: str, model: str, voice: str, fmt: str,
                  sample_rate: int) -> dict[str, Any]:
    """Sent once the config is accepted: the served model and voice (aliases resolved), the
    format and the sample rate the audio is delivered at (Hz; pcm is 16-bit little-endian mono
    at it: 24000 unless the config's `sample_rate` asks otherwise, `voxflow.audio.rates`)."""
    return {"type": "session.created", "request_id": request_id, "model": model,
            "voice": voice, "response_format": fmt, "sample_rate": sample_rate}


def segment_start_event(index: int, span: TextSpan, audio_start_s: float) -> dict[str, Any]:
    """Before a segment's audio: its text, where it is in the text sent (code point offsets)
    and the second of the stream's audio it starts at."""
    return {"type": "segment.start", "segment": index, "text": span.text,
            "text_start": span.start, "text_end": span.end,
            "audio_start": round(audio_start_s, 3)}


def segment_end_event(index: int, samples: int, audio_end_s: float) -> dict[str, Any]:
    """After a segment's last audio: its samples (at the model's rate, before resampling and
    encoding) and the second of the stream's audio it ends at."""
    return {"type": "segment.end", "segment": index, "samples": samples,
            "audio_end": round(audio_end_s, 3)}


def stream_word_event(span: TextSpan, word: TimedWord, offset_s: float) -> dict[str, Any]:
    """A ``speech.word`` event for `word` of the segment `span` (its times from the segment's
    first sample, its offsets into `span.text`, as the engine gives them): start and end in
    seconds of the stream's audio (the segment starts `offset_s` in), offsets into the whole
    text sent, so ``sent[text_start:text_end] == word``."""
    return {"type": "speech.word", **word_json(span.text, word),
            "start": round(word.start + offset_s, 3), "end": round(word.end + offset_s, 3),
            "text_start": word.text_start + span.start, "text_end": word.text_end + span.start}


AUDIO_TOKEN_S = 0.02
"""Seconds of audio one output token counts in ``usage`` (20 ms, whatever the model's own frame
rate: a figure comparable across models; docs/api.md)."""


def done_event(input_chars: int, audio_s: float) -> dict[str, Any]:
    """The last event of a speech stream (SSE's ``speech.audio.done``, the WebSocket's last
    message): ``usage`` with voxflow's own figures and OpenAI's token fields, an input token
    being one character of the input and an output token `AUDIO_TOKEN_S` of audio (rounded
    up)."""
    output_tokens = math.ceil(round(audio_s / AUDIO_TOKEN_S, 6))
    return {"type": "speech.audio.done",
            "usage": {"input_characters": input_chars, "output_audio_seconds": round(audio_s, 3),
                      "input_tokens": input_chars, "output_tokens": output_tokens,
                      "total_tokens": input_chars + output_tokens}}


__all__ = [
    "MESSAGE_TYPES",
    "NORMAL_CLOSURE",
    "ClientMessage",
    "Control",
    "TextMessage",
    "close_code",
    "done_event",
    "error_event",
    "invalid_message",
    "parse_message",
    "segment_end_event",
    "segment_start_event",
    "session_event",
    "stream_word_event",
]
