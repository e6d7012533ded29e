"""Word timestamps over the real server with the real joe voice (issue 14 item 3): SSE
`speech.word` events before the audio that starts them, the JSON route, and the 400s."""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import soundfile as sf
import word_events
from access_log import access_lines
from conftest import LiveServer, start_server
from word_events import TEXT, WORDS, check_words

pytestmark = pytest.mark.integration



def sse_events(url: str, **body) -> list[dict]:
    return word_events.sse_events(url, "piper", "joe", **body)


def test_sse_word_events_come_before_their_audio(joe_server):
    events = sse_events(joe_server.url, seed=7)
    assert events[-1]["type"] == "speech.audio.done"
    words = [e for e in events if e["type"] == "speech.word"]
    samples = 0  # pcm s16le samples (OpenAI's 24 kHz) sent before each event
    for e in events:
        if e["type"] == "speech.word":
            # each word starts in audio not yet sent, or in the delta that follows it
            assert e["start"] >= samples / 24000 - 1e-3
        elif e["type"] == "speech.audio.delta":
            samples += len(base64.b64decode(e["audio"])) // 2
    check_words(words, TEXT, samples / 24000)


def test_sse_times_scale_with_speed(joe_server):
    slow = [e for e in sse_events(joe_server.url, seed=3) if e["type"] == "speech.word"]
    fast = [e for e in sse_events(joe_server.url, seed=3, speed=2.0)
            if e["type"] == "speech.word"]
    assert [w["word"] for w in fast] == WORDS
    assert fast[-1]["end"] == pytest.approx(slow[-1]["end"] / 2, rel=0.25)


def test_json_route_returns_audio_duration_and_words(joe_server):
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "response_format": "wav",
               "seed": 7}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech/timestamps", json=payload, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="int16")
    assert body["format"] == "wav" and body["sample_rate"] == rate == 22050
    assert body["duration"] == pytest.approx(audio.size / rate, abs=1e-3)
    check_words(body["words"], TEXT, body["duration"])
    sse = [e for e in sse_events(joe_server.url, seed=7) if e["type"] == "speech.word"]
    assert [(w["start"], w["end"]) for w in sse] == [
        (w["start"], w["end"]) for w in body["words"]]


def test_ssml_words_index_the_markup(joe_server):
    text = '<speak>Hello <break time="500ms"/>big <prosody rate="slow">world</prosody>.</speak>'
    payload = {"model": "piper", "voice": "joe", "input": text, "response_format": "wav"}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech/timestamps", json=payload, timeout=120)
    assert r.status_code == 200, r.text
    words = r.json()["words"]
    assert [text[w["text_start"] : w["text_end"]] for w in words] == ["Hello", "big", "world"]
    assert words[1]["start"] - words[0]["end"] >= 0.45  # the break lies between them


@pytest.mark.parametrize("extra", [{}, {"stream_format": "audio", "stream": True}])
def test_timestamps_without_sse_is_400(joe_server, extra):
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "timestamps": True, **extra}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", json=payload, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "timestamps"


@pytest.mark.parametrize("field", [{"stream": True}, {"stream_format": "sse"}])
def test_json_route_refuses_streaming_fields(joe_server, field):
    payload = {"model": "piper", "voice": "joe", "input": TEXT, **field}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech/timestamps", json=payload, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == next(iter(field))


@pytest.fixture(scope="module")
def magpie_server() -> Iterator[LiveServer]:
    pytest.importorskip("safetensors")
    config = Path(__file__).resolve().parents[2] / "configs" / "magpie-tiny.yaml"
    live = start_server(config=str(config))
    yield live
    live.stop()


def test_a_model_without_timestamps_is_400_naming_it(magpie_server):
    sse = {"model": "magpie", "voice": "random-0", "input": "Hello there.",
           "stream_format": "sse", "timestamps": True}
    whole = {"model": "magpie", "voice": "random-0", "input": "Hello there."}
    for path, body in (("/v1/audio/speech", sse), ("/v1/audio/speech/timestamps", whole)):
        r = httpx.post(f"{magpie_server.url}{path}", json=body, timeout=60)
        assert r.status_code == 400, path
        error = r.json()["error"]
        assert error["param"] == "timestamps" and "magpie" in error["message"]


def test_word_boundaries_agree_with_whisper(joe_server, transcribe):
    """Median absolute boundary error under 80 ms against Whisper tiny.en's word timestamps
    on the first sentences of benchmarks/data/sentences.txt (benchmarks/word_timestamps.py
    measures all of them)."""
    from conftest import data_file

    from voxflow.eval.word_timing import boundary_errors, whisper_words

    lines = data_file("sentences.txt").read_text(encoding="utf-8").splitlines()
    errors: list[float] = []
    for text in [s.strip() for s in lines if s.strip()][:6]:
        payload = {"model": "piper", "voice": "joe", "input": text, "response_format": "wav",
                   "seed": 7}
        r = httpx.post(f"{joe_server.url}/v1/audio/speech/timestamps", json=payload,
                       timeout=120)
        body = r.json()
        audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="float32")
        ours = [(w["word"], w["start"], w["end"]) for w in body["words"]]
        theirs = whisper_words(transcribe.model, audio, rate)
        errors.extend(boundary_errors(ours, theirs))
    assert len(errors) >= 2 * 60  # most words matched
    errors.sort()
    median = errors[len(errors) // 2]
    assert median < 0.080, f"median boundary error {median * 1000:.0f} ms"


def test_json_route_leaves_an_access_line(joe_server, caplog):
    caplog.set_level(logging.INFO, logger="voxflow.access")
    payload = {"model": "piper", "voice": "joe", "input": "Hello there.", "response_format": "wav"}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech/timestamps", json=payload, timeout=120,
                   headers={"X-Request-Id": "timestamps-trace-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "timestamps-trace-1"
    (line,) = access_lines(caplog, "timestamps-trace-1")
    assert (line.status, line.model, line.voice, line.stream) == (200, "piper", "joe", False)
    assert line.audio_s == pytest.approx(r.json()["duration"], abs=1e-3)
