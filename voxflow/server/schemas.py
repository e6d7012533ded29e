"""Request bodies of the OpenAI-compatible speech API.

`SpeechBody` mirrors `POST /v1/audio/speech` of the OpenAI API (`model`, `input`, `voice`,
`response_format`, `speed`, `stream_format`, `instructions`) plus `seed` and `stream` as vLLM-Omni
and M* accept them, and `language` (the text's language, for multilingual voices). Types are
strict: a string `seed` or a numeric `input` is a 400 naming the field, never coerced. Unknown
fields are refused rather than silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from voxflow.audio.formats import FORMATS

ResponseFormat = Literal[FORMATS]  # type: ignore[valid-type]


class VoiceRef(BaseModel):
    """The object form of `voice` (``{"id": "joe"}``) that newer OpenAI clients send."""

    model_config = ConfigDict(extra="forbid")
    id: StrictStr


class SpeechBody(BaseModel):
    """Body of `POST /v1/audio/speech`."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr
    input: StrictStr
    voice: StrictStr | VoiceRef
    response_format: ResponseFormat = "mp3"  # the OpenAI default
    speed: Annotated[float, Field(strict=True)] = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    instructions: StrictStr | None = None
    seed: StrictInt | None = None  # range checked by the engine (voxflow.engine.checks)
    # None: the server's `server.stream_by_default` decides (true unless configured otherwise).
    stream: StrictBool | None = None
    language: Annotated[StrictStr, Field(min_length=1, max_length=35)] | None = None

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_shape(cls, value: object) -> object:
        ok = isinstance(value, str) or (
            isinstance(value, dict) and set(value) == {"id"} and isinstance(value["id"], str)
        )
        if not ok:
            raise ValueError('voice must be a string or an object {"id": string}')
        return value

    @field_validator("instructions")
    @classmethod
    def _no_instructions(cls, value: str | None) -> str | None:
        if value:
            raise ValueError("instructions are not supported by the models served here")
        return value

    @property
    def voice_id(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id

    def streams(self, default: bool) -> bool:
        """Whether the audio is streamed: SSE always; else `stream`, or `default` (the server's
        `server.stream_by_default`) when the request has no `stream` field."""
        if self.stream_format == "sse":
            return True
        return default if self.stream is None else self.stream
