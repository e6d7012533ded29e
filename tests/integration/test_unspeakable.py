"""Issue 38 item 4: an input with nothing speakable (Home Assistant checks its key with
``"."``; apps that split text at punctuation send lone dashes and ellipses) is answered as
OpenAI answers it, with audio: a short silence in the requested format and rate, and
``X-Voxflow-Unspeakable: true``. Empty or whitespace-only input stays a 400."""

from __future__ import annotations

import base64
import io
import json

import httpx
import pytest
import soundfile as sf
from stream_client import StreamClient, config

pytestmark = pytest.mark.integration

SILENCE_S = 0.2  # voxflow.models.base.UNSPEAKABLE_SILENCE_S


def post(url: str, text: str, **body) -> httpx.Response:
    payload = {"model": "piper", "voice": "joe", "input": text, **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, timeout=60)


@pytest.mark.parametrize("text", [".", "-", "…", "?!", "🙂🎉", "* * *"])
def test_punctuation_alone_is_a_short_silence_in_24khz_pcm(joe_server, text):
    r = post(joe_server.url, text, response_format="pcm")
    assert r.status_code == 200, r.text
    assert r.headers["x-voxflow-unspeakable"] == "true"
    assert r.headers["x-sample-rate"] == "24000"
    assert len(r.content) == 2 * round(SILENCE_S * 24000) and not r.content.strip(b"\0")


@pytest.mark.parametrize("stream", [True, False])
def test_the_silence_comes_in_the_format_asked_for(joe_server, stream):
    # Home Assistant's OpenAI integration asks for mp3; a WAV reads back as silence
    mp3 = post(joe_server.url, ".", response_format="mp3", stream=stream)
    assert mp3.status_code == 200 and mp3.headers["content-type"] == "audio/mpeg"
    assert mp3.content[:3] in (b"ID3", b"\xff\xfb", b"\xff\xf3")
    wav = post(joe_server.url, "...", response_format="wav", stream=False)
    samples, rate = sf.read(io.BytesIO(wav.content), dtype="int16")
    assert rate == 22050 and samples.size == round(SILENCE_S * 22050) and not samples.any()


def test_sse_sends_the_silence_then_done(joe_server):
    r = post(joe_server.url, "—", response_format="pcm", stream_format="sse")
    assert r.status_code == 200 and r.headers["x-voxflow-unspeakable"] == "true"
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    audio = b"".join(base64.b64decode(e["audio"]) for e in events
                     if e["type"] == "speech.audio.delta")
    assert len(audio) == 2 * round(SILENCE_S * 24000)
    assert events[-1]["usage"]["output_audio_seconds"] == SILENCE_S


def test_a_break_alone_is_its_own_length_of_silence(joe_server):
    ssml = '<speak><break time="700ms"/></speak>'
    r = post(joe_server.url, ssml, response_format="pcm", sample_rate="native")
    assert r.status_code == 200 and r.headers["x-voxflow-unspeakable"] == "true"
    assert len(r.content) == 2 * round(0.7 * 22050)


def test_speech_has_no_unspeakable_header(joe_server):
    r = post(joe_server.url, "Hello.", response_format="pcm")
    assert r.status_code == 200 and "x-voxflow-unspeakable" not in r.headers


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_or_whitespace_input_stays_a_400(joe_server, text):
    r = post(joe_server.url, text, response_format="pcm")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "empty_input"
    assert r.json()["error"]["param"] == "input"


def test_a_stream_of_symbols_alone_ends_in_a_short_silence(joe_server):
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=3))
        client.text("🙂🎉")
        client.send({"type": "end"})
        got = client.finish()
    assert (got.close_code, got.close_reason) == (1000, "done")
    assert len(got.audio) == 2 * round(SILENCE_S * 22050) and not got.audio.strip(b"\0")
