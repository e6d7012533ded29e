"""The messages of `WS /v1/audio/speech/stream`: each refusal has the code and field the HTTP
route gives for the same mistake, and the events carry what docs/api.md says."""

from __future__ import annotations

import pytest

from voxflow.engine.request import TimedWord
from voxflow.errors import InvalidRequestError, OverloadedError, VoxflowError
from voxflow.server.schemas import StreamConfig
from voxflow.server.stream_protocol import (
    Control,
    TextMessage,
    close_code,
    parse_message,
    stream_word_event,
)
from voxflow.text.incremental import TextSpan


def test_the_four_messages():
    config = parse_message('{"type": "config", "model": "piper", "voice": {"id": "joe"}, '
                           '"seed": 3}', 100)
    assert isinstance(config, StreamConfig)
    assert (config.voice_id, config.seed, config.response_format) == ("joe", 3, "mp3")
    assert parse_message('{"type": "text", "text": "Hi."}', 100) == TextMessage("Hi.")
    assert parse_message('{"type": "flush"}', 100) == Control("flush")
    assert parse_message('{"type": "end"}', 100) == Control("end")


REFUSED = [
    ("{", "invalid_json", None),
    ('"text"', "invalid_json", None),
    ('{"type": 3}', "invalid_message", "type"),
    ('{"type": "config", "model": "piper"}', "missing_required_parameter", "voice"),
    ('{"type": "config", "model": "piper", "voice": "joe", "input": "x"}',
     "unknown_parameter", "input"),
    ('{"type": "config", "model": "piper", "voice": "joe", "speed": "fast"}',
     "invalid_type", "speed"),
    ('{"type": "config", "model": "piper", "voice": "joe", "response_format": "ogg"}',
     "invalid_value", "response_format"),
    ('{"type": "text"}', "missing_required_parameter", "text"),
    ('{"type": "text", "text": "abcd"}', "input_too_long", "text"),
    ('{"type": "text", "text": "a", "voice": "joe"}', "unknown_parameter", "voice"),
    ('{"type": "flush", "x": 1}', "unknown_parameter", "x"),
]


@pytest.mark.parametrize("raw,code,param", REFUSED)
def test_refusals_name_the_field_with_the_http_codes(raw, code, param):
    with pytest.raises(InvalidRequestError) as refused:
        parse_message(raw, 3)
    assert (refused.value.code, refused.value.param, refused.value.status) == (code, param, 400)


def test_a_config_carries_its_instructions_for_the_session_to_check():
    # refused by the session for a model that does not follow them (unsupported_parameter)
    config = parse_message('{"type": "config", "model": "cosyvoice3", "voice": "random-tiny", '
                           '"instructions": "Speak softly."}', 3)
    assert config.instructions == "Speak softly."


def test_close_codes_carry_the_http_status():
    assert close_code(InvalidRequestError("x")) == 4400
    assert close_code(OverloadedError("busy", retry_after=1)) == 4429
    assert close_code(VoxflowError("bug")) == 4500


def test_a_word_event_is_placed_on_the_stream():
    span = TextSpan("Good day.", 20, 29)
    event = stream_word_event(span, TimedWord(0.1, 0.4, 5, 8), offset_s=2.0)
    assert event == {"type": "speech.word", "word": "day", "start": 2.1, "end": 2.4,
                     "text_start": 25, "text_end": 28}
