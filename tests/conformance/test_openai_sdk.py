"""The official `openai` Python client (2.x on httpx, 3.x on httpx2) against voxflow.

pcm is read as the SDK's `LocalAudioPlayer` plays it (int16 at its SAMPLE_RATE, 24,000 Hz, no
header); the default format (mp3) and wav by their own headers. Errors are the SDK's exception
classes, built from voxflow's `{"error": {...}}` body.
"""

from __future__ import annotations

import openai
import pytest
from audio_checks import (
    CLIENT_DRAWS,
    MODELS,
    NATIVE_RATES,
    TEXTS,
    assert_duration,
    codec_allowance_s,
    decoded_seconds,
    is_mp3,
    parse_wav,
)
from openai.helpers.local_audio_player import SAMPLE_RATE


@pytest.fixture(scope="module")
def client(server_url):
    """A synchronous OpenAI client on the server, as the README shows it."""
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused") as sdk:
        yield sdk


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


@pytest.mark.parametrize("model", MODELS)
def test_streamed_pcm_plays_at_24k(client, reference, model):
    """`with_streaming_response` pcm: `audio/pcm;rate=24000`, no header, and as long as the
    whole WAV when played at the SDK's LocalAudioPlayer rate."""
    assert SAMPLE_RATE == 24000
    durations = []
    for _ in range(CLIENT_DRAWS[model]):
        with client.audio.speech.with_streaming_response.create(
                model=model, voice="alloy", input=TEXTS[model], response_format="pcm") as r:
            assert r.headers["content-type"] == "audio/pcm;rate=24000"
            assert r.headers["x-sample-rate"] == "24000"
            pcm = b"".join(r.iter_bytes())
        assert pcm[:4] != b"RIFF" and len(pcm) % 2 == 0
        durations.append(len(pcm) / 2 / SAMPLE_RATE)
    assert_duration(_mean(durations), reference.seconds(model), f"openai pcm, model {model}")


@pytest.mark.parametrize("model", MODELS)
def test_default_format_is_mp3(client, reference, model):
    """`audio.speech.create` without response_format: MP3 (`audio/mpeg`, frame sync), decoding
    to the whole WAV's length at the voice's own rate."""
    durations = []
    for _ in range(CLIENT_DRAWS[model]):
        response = client.audio.speech.create(model=model, voice="alloy", input=TEXTS[model])
        assert response.response.headers["content-type"] == "audio/mpeg"
        assert is_mp3(response.content), response.content[:8]
        seconds, rate = decoded_seconds(response.content)
        assert rate == NATIVE_RATES[model]
        durations.append(seconds)
    assert_duration(_mean(durations), reference.seconds(model), f"openai mp3, model {model}",
                    codec_allowance_s("mp3", model))


@pytest.mark.parametrize("model", MODELS)
def test_streamed_wav_header(client, reference, model):
    """A streamed WAV: PCM 16-bit mono at the voice's rate, sizes 0xFFFFFFFF (unknown), the
    data as long as the whole WAV."""
    durations = []
    for _ in range(CLIENT_DRAWS[model]):
        response = client.audio.speech.create(model=model, voice="alloy", input=TEXTS[model],
                                              response_format="wav")
        assert response.response.headers["content-type"] == "audio/wav"
        wav = parse_wav(response.content)
        assert (wav.format_tag, wav.channels, wav.bits) == (1, 1, 16)
        assert wav.rate == NATIVE_RATES[model]
        assert wav.riff_size == wav.data_size_field == 0xFFFFFFFF
        durations.append(wav.seconds)
    assert_duration(_mean(durations), reference.seconds(model), f"openai wav, model {model}")


def test_agents_sdk_call_reaches_piper(client, reference):
    """What the OpenAI Agents SDK sends (gpt-4o-mini-tts, pcm, `instructions` in extra_body):
    served by Piper through the alias, the instructions named as ignored."""
    durations = []
    for _ in range(CLIENT_DRAWS["piper"]):
        with client.audio.speech.with_streaming_response.create(
                model="gpt-4o-mini-tts", voice="ash", input=TEXTS["piper"],
                response_format="pcm",
                extra_body={"instructions": "You will receive partial sentences."}) as r:
            assert r.headers["content-type"] == "audio/pcm;rate=24000"
            assert r.headers["x-voxflow-ignored"] == "instructions"
            durations.append(len(b"".join(r.iter_bytes())) / 2 / SAMPLE_RATE)
    assert_duration(_mean(durations), reference.seconds("piper"), "openai pcm, gpt-4o-mini-tts")


def test_unknown_model_is_not_found_error(client):
    """404 model_not_found -> NotFoundError with the server's message, code and param."""
    with pytest.raises(openai.NotFoundError) as caught:
        client.audio.speech.create(model="no-such-model", voice="alloy", input="Hello.")
    error = caught.value
    assert error.status_code == 404
    assert error.code == "model_not_found" and error.param == "model"
    assert error.type == "invalid_request_error"
    assert error.body["message"].startswith("The model 'no-such-model' does not exist.")
    assert "The model 'no-such-model' does not exist." in str(error)


@pytest.mark.parametrize("model", MODELS)
def test_unknown_voice_is_bad_request_error(client, model):
    """400 voice_not_found -> BadRequestError naming the voice and the model."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model=model, voice="no-such-voice", input="Hello.")
    error = caught.value
    assert error.status_code == 400
    assert error.code == "voice_not_found" and error.param == "voice"
    expected = f"Voice 'no-such-voice' is not a voice of model '{model}'."
    assert error.body["message"].startswith(expected)
    assert expected in str(error)
