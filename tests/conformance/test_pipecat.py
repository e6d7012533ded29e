"""Pipecat's `OpenAITTSService` (PyPI pipecat-ai) against voxflow, driven by Pipecat's own
test helper `pipecat.tests.utils.run_test` (a pipeline source -> service -> sink).

Pipecat asks for `response_format: "pcm"` and labels every chunk with its pipeline's output
rate (24,000 Hz by default) without reading a header or resampling, and accepts only OpenAI's
13 voice names (checked before any request), so these checks use `alloy`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from audio_checks import CLIENT_DRAWS, MODELS, TEXTS, assert_duration
from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.tests.utils import run_test


def _run(server_url: str, text: str, **settings) -> tuple[list, list, list]:
    """Speak `text` through a fresh OpenAITTSService; returns (audio frames, error frames,
    [(request body, response headers)] as the service's HTTP client sent and got them)."""
    tts = OpenAITTSService(api_key="not-needed", base_url=f"{server_url}/v1",
                           settings=OpenAITTSService.Settings(**settings))
    exchanges: list = []

    async def on_request(request) -> None:
        exchanges.append([json.loads(request.content), None])

    async def on_response(response) -> None:
        exchanges[-1][1] = response.headers

    # observe the SDK's own HTTP client (httpx for openai 2.x, httpx2 for 3.x)
    http = tts._client._client
    http.event_hooks["request"].append(on_request)
    http.event_hooks["response"].append(on_response)
    down, up = asyncio.run(run_test(tts, frames_to_send=[TTSSpeakFrame(text=text)]))
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    errors = [f for f in (*down, *up) if isinstance(f, ErrorFrame)]
    return audio, errors, exchanges


def _played_seconds(frames: list) -> float:
    """What Pipecat plays: each frame's bytes as 16-bit mono at the frame's sample_rate."""
    return sum(len(f.audio) / 2 / f.sample_rate for f in frames)


def _speak_and_check(server_url: str, reference, served: str, **settings) -> None:
    text = TEXTS[served]
    durations = []
    for _ in range(CLIENT_DRAWS[served]):
        audio, errors, exchanges = _run(server_url, text, **settings)
        assert not errors, [e.error for e in errors]
        assert audio, "no TTSAudioRawFrame"
        assert {(f.sample_rate, f.num_channels) for f in audio} == {(24000, 1)}
        pcm = b"".join(f.audio for f in audio)
        assert pcm[:4] != b"RIFF" and len(pcm) % 2 == 0
        assert len(exchanges) == 1, exchanges  # the whole text in one request
        body, headers = exchanges[0]
        assert body == {"input": text, "model": settings.get("model", "gpt-4o-mini-tts"),
                        "voice": "alloy", "response_format": "pcm"}, body
        assert headers["content-type"] == "audio/pcm;rate=24000"
        assert headers["x-sample-rate"] == "24000"
        durations.append(_played_seconds(audio))
    assert_duration(sum(durations) / len(durations), reference.seconds(served),
                    f"Pipecat pcm, model {settings.get('model', 'gpt-4o-mini-tts')}")


@pytest.mark.parametrize("model", MODELS)
def test_pcm_plays_at_its_length(server_url, reference, model):
    """Audio frames at 24 kHz mono, raw PCM (no WAV header), as long as the whole WAV."""
    _speak_and_check(server_url, reference, model, model=model, voice="alloy")


def test_default_model_is_piper(server_url, reference):
    """Pipecat's defaults (model gpt-4o-mini-tts, voice alloy) reach Piper through the alias."""
    _speak_and_check(server_url, reference, "piper")


def test_unknown_model_is_an_error_frame(server_url):
    """A 404 model_not_found reaches the pipeline as an ErrorFrame carrying the server's
    message (the SDK's NotFoundError, pushed by Pipecat's base service), and no audio."""
    audio, errors, exchanges = _run(server_url, "Hello there.", model="no-such-model",
                                    voice="alloy")
    assert not audio
    assert len(exchanges) == 1  # the SDK does not retry a 404
    messages = [e.error for e in errors]
    assert any("404" in m and "The model 'no-such-model' does not exist" in m
               for m in messages), messages


@pytest.mark.parametrize("model", MODELS)
def test_bad_request_is_an_error_frame(server_url, model):
    """A 400 (speed 5.0, out of range) is the SDK's BadRequestError, which Pipecat turns into
    an ErrorFrame ("Unknown error occurred: ...") with the server's message."""
    audio, errors, _ = _run(server_url, "Hello there.", model=model, voice="alloy", speed=5.0)
    assert not audio
    messages = [e.error for e in errors]
    assert any(m.startswith("Unknown error occurred: Error code: 400")
               and "speed must be between 0.25 and 4.0, got 5.0" in m for m in messages), messages
