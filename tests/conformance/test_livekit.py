"""LiveKit Agents' OpenAI TTS plugin (`livekit.plugins.openai.TTS`) against voxflow.

The plugin asks for `stream_format: "sse"` for every model but `tts-1`/`tts-1-hd`. Version 1.7.0
then parses only server-sent events (a server answering raw audio gives "no audio frames were
pushed"); 1.8.x reads the body by the response's Content-Type. Audio is decoded by LiveKit's
`AudioStreamDecoder` into 24 kHz mono frames (mp3 and wav resampled from their header's rate,
`audio/pcm` taken as 24 kHz as it is). The plugin builds its own OpenAI client here
(base_url + api_key), as an agent does.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from audio_checks import CLIENT_DRAWS, MODELS, TEXTS, assert_duration, codec_allowance_s
from livekit.agents import APIStatusError
from livekit.plugins import openai as lk_openai


async def _synthesize(server_url: str, text: str, **options) -> tuple[list, list]:
    tts = lk_openai.TTS(base_url=f"{server_url}/v1", api_key="not-needed", **options)
    exchanges: list = []

    async def on_request(request) -> None:
        exchanges.append([json.loads(request.content), None])

    async def on_response(response) -> None:
        exchanges[-1][1] = response.headers

    http = tts._client._client  # the plugin's own SDK client's HTTP client, observed
    http.event_hooks["request"].append(on_request)
    http.event_hooks["response"].append(on_response)
    frames = []
    try:
        async with tts.synthesize(text) as stream:
            async for event in stream:
                frames.append(event.frame)
    finally:
        await tts.aclose()
    return frames, exchanges


def synthesize(server_url: str, text: str, **options) -> tuple[list, list]:
    """The frames LiveKit yields for `text`, and [(request body, response headers)]."""
    return asyncio.run(_synthesize(server_url, text, **options))


def _speak_and_check(server_url, reference, served: str, model: str, response_format: str,
                     stream_format: str, content_type: str) -> None:
    text = TEXTS[served]
    durations = []
    for _ in range(CLIENT_DRAWS[served]):
        frames, exchanges = synthesize(server_url, text, model=model, voice="alloy",
                                       response_format=response_format)
        assert frames, "no audio frames"
        assert {(f.sample_rate, f.num_channels) for f in frames} == {(24000, 1)}
        assert len(exchanges) == 1, exchanges
        body, headers = exchanges[0]
        assert body == {"input": text, "model": model, "voice": "alloy",
                        "response_format": response_format, "speed": 1.0,
                        "stream_format": stream_format}, body
        # the media type decides how 1.8 reads the body (`text/event-stream; charset=utf-8` is
        # SSE); a pcm body must also say its rate
        assert headers["content-type"].split(";")[0] == content_type.split(";")[0], headers
        if response_format == "pcm" and stream_format == "audio":
            assert headers["content-type"] == content_type
        durations.append(sum(f.samples_per_channel / f.sample_rate for f in frames))
    assert_duration(sum(durations) / len(durations), reference.seconds(served),
                    f"LiveKit {response_format} via {stream_format}, model {model}",
                    codec_allowance_s(response_format, served))


@pytest.mark.parametrize("response_format", ["mp3", "wav", "pcm"])
@pytest.mark.parametrize("model", MODELS)
def test_sse_frames_play_at_their_length(server_url, reference, model, response_format):
    """A voxflow model name: LiveKit asks for SSE, voxflow answers text/event-stream, and the
    decoded frames (24 kHz mono) are as long as the whole WAV."""
    _speak_and_check(server_url, reference, model, model, response_format, "sse",
                     "text/event-stream")


@pytest.mark.parametrize(("response_format", "content_type"),
                         [("pcm", "audio/pcm;rate=24000"), ("mp3", "audio/mpeg")])
def test_tts1_raw_audio_plays_at_its_length(server_url, reference, response_format,
                                           content_type):
    """`tts-1` (an alias of Piper): LiveKit asks for `stream_format: "audio"` and reads the raw
    body; pcm must be 24 kHz since LiveKit assumes it."""
    _speak_and_check(server_url, reference, "piper", "tts-1", response_format, "audio",
                     content_type)


def test_unknown_model_is_api_status_error_404(server_url):
    """A 404 model_not_found is LiveKit's APIStatusError (not retried) with the server's
    message and error body."""
    with pytest.raises(APIStatusError) as caught:
        synthesize(server_url, "Hello there.", model="no-such-model", voice="alloy")
    error = caught.value
    assert error.status_code == 404
    assert error.retryable is False
    assert "The model 'no-such-model' does not exist" in error.message
    assert error.body["code"] == "model_not_found" and error.body["param"] == "model"


@pytest.mark.parametrize("model", MODELS)
def test_unknown_voice_is_api_status_error_400(server_url, model):
    """LiveKit passes any voice name; an unknown one is a 400 voice_not_found that reaches the
    agent as APIStatusError with the server's message."""
    with pytest.raises(APIStatusError) as caught:
        synthesize(server_url, "Hello there.", model=model, voice="no-such-voice")
    error = caught.value
    assert error.status_code == 400
    assert error.retryable is False
    assert f"Voice 'no-such-voice' is not a voice of model '{model}'" in error.message
    assert error.body["code"] == "voice_not_found" and error.body["param"] == "voice"
