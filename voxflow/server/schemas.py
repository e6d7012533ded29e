"""Request bodies of the OpenAI-compatible speech API.

`SpeechBody` mirrors `POST /v1/audio/speech` of the OpenAI API (`model`, `input`, `voice`,
`response_format`, `speed`, `stream_format`, `instructions`) plus `seed` and `stream` as vLLM-Omni
and M* accept them, `language` (the text's language, for multilingual voices), `sample_rate`
(the rate delivered, `voxflow.audio.rates`) and `timestamps` (word timings), voxflow extensions.
Types are strict: a string `seed` or a numeric `input` is a 400 naming the field, never coerced.
Unknown top-level fields of a speech body are kept aside (`SpeechBody.unknown_fields`): the server's
`server.unknown_fields` setting ignores them (named in a response header) or refuses them.
`instructions` is accepted; a model that cannot follow it ignores it over HTTP, and says so, and
refuses it in a WebSocket stream's config (which has no response header to say so).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)

from voxflow.audio.formats import FORMATS
from voxflow.audio.rates import check_requested_rate

ResponseFormat = Literal[FORMATS]  # type: ignore[valid-type]


class VoiceRef(BaseModel):
    """The object form of `voice` (``{"id": "joe"}``) that newer OpenAI clients send."""

    model_config = ConfigDict(extra="forbid")
    id: StrictStr


class SpeechOptions(BaseModel):
    """The fields of a speech request other than its text: the part `SpeechBody` and the
    WebSocket stream's config message (`StreamConfig`) share, with the same types and
    validators, so both refuse the same values with the same codes."""

    model_config = ConfigDict(extra="forbid")

    # Descriptions and the bounds under json_schema_extra are for /docs only: the engine's
    # checks (voxflow.engine.checks) are the one place that enforces speed, seed and input.
    model: StrictStr = Field(
        description="A served model (`GET /v1/models`), e.g. `piper`, or a model alias such "
        "as `tts-1`."
    )
    voice: StrictStr | VoiceRef = Field(
        description="A voice of the model (`GET /v1/audio/voices`) or a voice alias such as "
        '`alloy`; a string or `{"id": string}`.'
    )
    response_format: ResponseFormat = Field(  # the OpenAI default
        "mp3", description="The audio encoding."
    )
    speed: Annotated[float, Field(strict=True)] = Field(
        1.0, description="0.25 to 4.0; divides the duration, pauses included, pitch kept.",
        json_schema_extra={"minimum": 0.25, "maximum": 4.0},
    )
    instructions: StrictStr | None = Field(
        None, description="How to speak (gpt-4o-mini-tts style). `cosyvoice3` follows them "
        "(its instruct prompt; `X-Voxflow-Instructions: applied`); a model that cannot follow "
        "instructions ignores them (`X-Voxflow-Instructions: ignored`, and `instructions` "
        "named in `X-Voxflow-Ignored`). In a WebSocket stream's config only a model that "
        "follows them takes them."
    )
    seed: StrictInt | None = Field(  # range checked by the engine (voxflow.engine.checks)
        None, description="0 to 2**63-1: the same request and seed give the same bytes.",
        # no "maximum": OpenAPI writes numbers as floats, and 2**63-1 would round up
        json_schema_extra={"minimum": 0},
    )
    sample_rate: int | str | None = Field(  # checked by _rate (voxflow.audio.rates)
        None, description="voxflow extension: the rate of the audio delivered, in Hz (8000 to "
        '48000, one the format\'s encoder takes) or `"native"` (the model\'s own rate). '
        "Absent: 24000 for `pcm` (OpenAI's pcm rate, which clients assume), the model's own "
        "rate for the other formats. `X-Sample-Rate` says the rate delivered.",
        json_schema_extra={"anyOf": [{"type": "integer", "minimum": 8000, "maximum": 48000},
                                     {"type": "string", "enum": ["native"]}]},
    )
    language: Annotated[StrictStr, Field(min_length=1, max_length=35)] | None = Field(
        None, description="The language the whole input is read in (`en`, `en-GB`, `ja`); "
        "one the voice speaks. Absent: decided from the text's scripts."
    )

    lexicon: Annotated[StrictStr, Field(max_length=64)] | None = Field(
        None, description="voxflow extension: a saved pronunciation lexicon "
        "(`GET /v1/audio/lexicons`) applied to the input; `\"\"` for none. Absent: the "
        "voice's or model's configured default, if any."
    )

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_shape(cls, value: object) -> object:
        ok = isinstance(value, str) or (
            isinstance(value, dict) and set(value) == {"id"} and isinstance(value["id"], str)
        )
        if not ok:
            raise ValueError('voice must be a string or an object {"id": string}')
        return value

    @field_validator("sample_rate", mode="before")
    @classmethod
    def _rate(cls, value: object, info: ValidationInfo) -> object:
        # response_format is declared first: its value is here when it was valid
        return check_requested_rate(info.data.get("response_format", "mp3"), value)

    @property
    def voice_id(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id


class SpeechBody(SpeechOptions):
    """Body of `POST /v1/audio/speech`. Unknown top-level fields are kept, not refused here
    (`unknown_fields`); what to do with them is the server's setting."""

    model_config = ConfigDict(extra="allow")

    input: StrictStr = Field(
        description="The text (or SSML starting with `<speak>`) to speak: 1 to "
        "`server.max_input_chars` (4,096 by default) characters, not only whitespace.",
        json_schema_extra={"minLength": 1, "maxLength": 4096},
    )
    stream_format: Literal["audio", "sse"] = Field(
        "audio", description="`sse`: server-sent events with base64 audio (implies streaming)."
    )
    # None: the server's `server.stream_by_default` decides (true unless configured otherwise).
    stream: StrictBool | None = Field(
        None, description="`true`: audio as it is produced (chunked); `false`: the whole file "
        "with Content-Length. Absent: `server.stream_by_default` (true unless configured)."
    )
    timestamps: StrictBool = Field(
        False, description="voxflow extension: `true` adds `speech.word` events (each word's "
        "start and end in seconds and its span of `input`) to an SSE stream; needs "
        '`stream_format: "sse"` and a model that times words (Piper). For a whole response, '
        "`POST /v1/audio/speech/timestamps`."
    )

    @property
    def unknown_fields(self) -> list[str]:
        """The top-level field names the body holds that are not fields of the API, in the
        order sent."""
        return list(self.model_extra or {})

    def streams(self, default: bool) -> bool:
        """Whether the audio is streamed: SSE always; else `stream`, or `default` (the server's
        `server.stream_by_default`) when the request has no `stream` field."""
        if self.stream_format == "sse":
            return True
        return default if self.stream is None else self.stream


class StreamConfig(SpeechOptions):
    """The first message of `WS /v1/audio/speech/stream` (``"type": "config"`` taken off):
    the speech options of every sentence the stream speaks (docs/api.md)."""

    bistream: StrictBool | None = Field(
        None, description="voxflow extension: `true` feeds all the stream's text into one "
        "running generation, so prosody carries across sentences (a model that can: "
        "`cosyvoice3`, where it is the default); `false` speaks each sentence as a request of "
        "its own."
    )

    timestamps: StrictBool = Field(
        False, description="voxflow extension: `true` adds a `speech.word` event per word "
        "(start and end in seconds of the stream's audio, its span of the text sent); only "
        "for a model that times words (Piper)."
    )
