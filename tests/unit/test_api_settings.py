"""Settings behind the OpenAI API contract of issue 8: streaming default, CORS, aliases."""

from __future__ import annotations

import pytest

from voxflow.config import ConfigError, load_settings
from voxflow.server.schemas import SpeechBody

BODY = {"model": "piper", "voice": "joe", "input": "Hi."}


def test_item1_streaming_is_the_default_and_a_setting_flips_it():
    assert load_settings(None).server.stream_by_default is True
    off = load_settings(None, {"server.stream_by_default": False})
    assert off.server.stream_by_default is False
    with pytest.raises(ConfigError, match=r"server\.stream_by_default"):
        load_settings(None, {"server.stream_by_default": "sometimes"})


@pytest.mark.parametrize(("extra", "default", "streams"), [
    ({}, True, True), ({}, False, False),
    ({"stream": False}, True, False), ({"stream": True}, False, True),
    ({"stream_format": "sse", "stream": False}, False, True),  # SSE always streams
])
def test_item1_a_request_streams_by_its_field_else_by_the_server_default(extra, default, streams):
    assert SpeechBody.model_validate({**BODY, **extra}).streams(default) is streams
