"""Kokoro's word timestamps over the real server (configs/multi.yaml, the real int8 graph):
SSE `speech.word` events and the JSON route from the duration predictor's frames, times that
follow the speed, Whisper's agreement, and the 400 for Japanese."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
import soundfile as sf
import word_events
from conftest import data_file
from word_events import TEXT

pytestmark = pytest.mark.integration

RATE = 24000


def sse_events(url: str, **body) -> list[dict]:
    return word_events.sse_events(url, "kokoro", "jm_kumo", **body)


def words_and_seconds(events: list[dict]) -> tuple[list[dict], float]:
    """The word events, checked to come before the audio that starts them, and the seconds
    of audio sent."""
    samples = 0
    words = []
    for e in events:
        if e["type"] == "speech.word":
            assert e["start"] >= samples / RATE - 1e-3
            words.append(e)
        elif e["type"] == "speech.audio.delta":
            samples += len(base64.b64decode(e["audio"])) // 2
    assert events[-1]["type"] == "speech.audio.done"
    return words, samples / RATE


def check_words(words: list[dict], duration: float) -> None:
    word_events.check_words(words, TEXT, duration)
    assert all(w["start"] < w["end"] for w in words)  # every word lasts


def test_sse_word_events_span_the_input_and_the_audio(multi_server):
    words, seconds = words_and_seconds(sse_events(multi_server.url))
    check_words(words, seconds)
    # the second paragraph is its own segment: its words start after the first one's audio
    assert words[6]["start"] > words[5]["end"]


def test_json_route_gives_the_same_words_as_sse(multi_server):
    # seeded: an unseeded request's segments may be cut where the load puts its deadlines
    payload = {"model": "kokoro", "voice": "jm_kumo", "input": TEXT, "response_format": "wav",
               "seed": 5}
    r = httpx.post(f"{multi_server.url}/v1/audio/speech/timestamps", json=payload, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="int16")
    assert body["sample_rate"] == rate == RATE
    check_words(body["words"], audio.size / rate)
    sse, _ = words_and_seconds(sse_events(multi_server.url, seed=5))
    assert [(w["start"], w["end"]) for w in sse] == [
        (w["start"], w["end"]) for w in body["words"]]


def test_times_follow_a_stretched_speed(multi_server):
    """Speed 2 is past Kokoro's native range (1.1): rendered at 1.1, then time-stretched;
    the word times shrink with the audio."""
    # seeded: both uncut (an unseeded stream's cuts follow the load, each adding a pause)
    normal, normal_s = words_and_seconds(sse_events(multi_server.url, seed=3))
    fast, fast_s = words_and_seconds(sse_events(multi_server.url, speed=2.0, seed=3))
    check_words(fast, fast_s)
    assert fast_s == pytest.approx(normal_s / 2, rel=0.15)
    assert fast[-1]["end"] == pytest.approx(normal[-1]["end"] / 2, rel=0.15)


def test_japanese_text_with_timestamps_is_400(multi_server):
    payload = {"model": "kokoro", "voice": "jf_alpha", "input": "今日は良い天気です。",
               "stream_format": "sse", "timestamps": True}
    r = httpx.post(f"{multi_server.url}/v1/audio/speech", json=payload, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "timestamps" and error["code"] == "timestamps_unsupported"
    assert "'ja'" in error["message"]


def test_word_boundaries_agree_with_whisper(multi_server, transcribe):
    """Median absolute boundary error under 80 ms against Whisper tiny.en's word timestamps
    on the first sentences of benchmarks/data/sentences.txt (benchmarks/word_timestamps.py
    --model kokoro measures all of them)."""
    from voxflow.eval.word_timing import boundary_errors, whisper_words

    lines = data_file("sentences.txt").read_text(encoding="utf-8").splitlines()
    errors: list[float] = []
    for text in [s.strip() for s in lines if s.strip()][:6]:
        payload = {"model": "kokoro", "voice": "jm_kumo", "input": text,
                   "response_format": "wav"}
        r = httpx.post(f"{multi_server.url}/v1/audio/speech/timestamps", json=payload,
                       timeout=120)
        body = r.json()
        audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="float32")
        ours = [(w["word"], w["start"], w["end"]) for w in body["words"]]
        theirs = whisper_words(transcribe.model, audio, rate)
        errors.extend(boundary_errors(ours, theirs))
    assert len(errors) >= 2 * 80  # most of the 6 sentences' 96 words matched
    errors.sort()
    median = errors[len(errors) // 2]
    assert median < 0.080, f"median boundary error {median * 1000:.0f} ms"
