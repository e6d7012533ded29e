"""Pause and pronunciation control through the real server: SSML and the [pause:Ns] shorthand
are obeyed, not read aloud; bad SSML is a 400 naming where, streamed or not."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from silence import leading_silence_s, longest_inner_pause_s

from voxflow.eval.normalize import normalize_for_wer

pytestmark = pytest.mark.integration

RATE = 22050


def speak(url: str, text: str, **extra) -> httpx.Response:
    body = {"model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
            "sample_rate": "native", "seed": 7, **extra}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def pcm(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767.0


def heard(transcribe, audio: np.ndarray) -> str:
    return normalize_for_wer(transcribe(audio, RATE))


def test_pause_shorthand_before_welcome_back_is_a_second_of_silence(joe_server, transcribe):
    audio = pcm(speak(joe_server.url, "[pause:1s] Welcome back."))
    words = heard(transcribe, audio)
    assert "welcome back" in words and "pause" not in words
    assert 1.0 <= leading_silence_s(audio, RATE) <= 1.1


def test_ssml_break_of_one_second_between_two_sentences(joe_server, transcribe):
    plain = pcm(speak(joe_server.url, "<speak>Hello there. How are you?</speak>"))
    broken = pcm(speak(
        joe_server.url, '<speak>Hello there. <break time="1200ms"/> How are you?</speak>'
    ))
    assert heard(transcribe, broken) == "hello there how are you"
    assert longest_inner_pause_s(broken, RATE) >= 1.2
    assert longest_inner_pause_s(plain, RATE) < 0.6


def test_ssml_say_as_sub_and_phoneme_are_spoken_as_asked(joe_server, transcribe):
    text = (
        '<speak>The <say-as interpret-as="characters">NBA</say-as> final. '
        'I like <sub alias="World Wide Web">WWW</sub> pages. '
        'Call <say-as interpret-as="telephone">555-1234</say-as>. '
        'A <phoneme alphabet="ipa" ph="təmˈeɪɾoʊ">tomato</phoneme>.</speak>'
    )
    raw = transcribe(pcm(speak(joe_server.url, text)), RATE)
    words = normalize_for_wer(raw)
    assert "n b a" in words or "nba" in words
    assert "worldwideweb" in words.replace(" ", "")  # Whisper writes "worldwide web" too
    # Whisper writes digits read one by one as "555-1234"; read as a number they would be
    # "five hundred fifty-five".
    assert "555-1234" in raw or "five five five" in words, raw
    assert "tomato" in words


def test_ssml_prosody_rate_slow_is_longer_than_fast(joe_server):
    text = ('<speak><prosody rate="{}">The quick brown fox jumps over the lazy dog.'
            '</prosody></speak>')
    slow = pcm(speak(joe_server.url, text.format("slow"))).size
    fast = pcm(speak(joe_server.url, text.format("fast"))).size
    # slow is 0.75 and fast 1.25: durations in the ratio 1.25 / 0.75 = 1.67 (within 10%).
    assert 1.5 <= slow / fast <= 1.84


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_ssml_is_a_400_naming_line_and_column(joe_server, stream):
    r = speak(joe_server.url, "<speak>\nHello <break time='1s'>\nthere</speak>", stream=stream)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "invalid_ssml" and error["param"] == "input"
    assert "line 3, column" in error["message"], error["message"]


def test_unknown_ssml_tag_is_a_400_naming_it_and_where(joe_server):
    r = speak(joe_server.url, "<speak>Hello <blink>there</blink></speak>")
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "<blink>" in message and "line 1, column 14" in message, message


def test_an_entity_bomb_is_refused_not_expanded(joe_server):
    bomb = ('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY a "aaaaaaaaaa">'
            '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><speak>&b;</speak>')
    r = speak(joe_server.url, bomb)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_ssml"
