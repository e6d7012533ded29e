"""Scripts a voice cannot read, through the real server (configs/multi.yaml: piper + kokoro).

Issue 7, item 7: `今日は天気がいいです。` to the English voice joe returned 200 with 7.8 s of
"Chinese letter ..."; now it is a 400 naming the script and the Kokoro voices that read it.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from voxflow.eval.normalize import normalize_for_wer

pytestmark = pytest.mark.integration

KOKORO_VOICES = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


def speak(url: str, text: str, model: str = "piper", voice: str = "joe", **extra):
    body = {"model": model, "voice": voice, "input": text, "response_format": "pcm", **extra}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)


def pcm(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767.0


@pytest.mark.parametrize("stream", [False, True])
def test_japanese_sentence_to_joe_is_a_400_naming_han_and_the_kokoro_voices(multi_server, stream):
    r = speak(multi_server.url, "今日は天気がいいです。", stream=stream)
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error", "input", "unsupported_script"
    )
    readers = ", ".join(f"kokoro/{v}" for v in KOKORO_VOICES)
    assert error["message"] == (
        "input is mostly in Hiragana and Han scripts (10 of 10 letters), which voice 'joe' of "
        f"model 'piper' (en-US) cannot read. Voices that read it: {readers}."
    )


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("Привет, как у тебя дела?", "Cyrillic"),
        ("مرحبا، كيف حالك؟", "Arabic"),
        ("안녕하세요, 반갑습니다.", "Hangul"),
    ],
)
@pytest.mark.parametrize(("model", "voice"), [("piper", "joe"), ("kokoro", "jm_kumo")])
def test_sentence_no_served_voice_reads_is_a_400(multi_server, text, script, model, voice):
    r = speak(multi_server.url, text, model=model, voice=voice)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "unsupported_script"
    assert error["message"].startswith(f"input is mostly in {script} script (")
    assert error["message"].endswith(f"No served voice reads {script}.")


def test_english_sentence_with_one_japanese_word_drops_it(multi_server, transcribe):
    with_word = speak(multi_server.url, "I would love some 寿司 for dinner tonight.", seed=3)
    without = speak(multi_server.url, "I would love some for dinner tonight.", seed=3)
    assert with_word.headers["X-Dropped-Letters"] == "2"
    assert "X-Dropped-Letters" not in without.headers
    # The word is gone, not spelled out: the same text, so the same samples.
    assert np.array_equal(pcm(with_word), pcm(without))
    heard = normalize_for_wer(transcribe(pcm(with_word), 22050))
    assert heard == "i would love some for dinner tonight"


def test_english_sentence_with_one_russian_word_to_kokoro_drops_it(multi_server):
    r = speak(multi_server.url, "He said привет and left.", model="kokoro", voice="jf_alpha")
    assert r.headers["X-Dropped-Letters"] == "6"
    assert pcm(r).size / 24000 < 3.0  # not six spelled-out letter names


def test_a_lone_greek_letter_in_english_is_read_by_name(multi_server, transcribe):
    r = speak(multi_server.url, "The α particle is a helium nucleus.")
    assert "X-Dropped-Letters" not in r.headers
    assert "alpha" in normalize_for_wer(transcribe(pcm(r), 22050))


def test_japanese_sentence_to_a_kokoro_voice_is_spoken(multi_server):
    r = speak(multi_server.url, "今日は天気がいいです。", model="kokoro", voice="jf_alpha")
    assert "X-Dropped-Letters" not in r.headers
    assert 0.8 < pcm(r).size / 24000 < 4.0
