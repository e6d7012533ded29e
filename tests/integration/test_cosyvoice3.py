"""CosyVoice3 with the tiny random weights (configs/cosyvoice3-tiny.yaml) through the real server
on loopback: seeded audio identical run to run and streamed or not, the noise label on every
surface (header, /v1/models, /v1/models/{id}, /health), bad input as OpenAI-shaped 4xx errors,
and the next request still served."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import LiveServer, start_server

pytest.importorskip("torch")
pytest.importorskip("tiktoken")

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cosyvoice3-tiny.yaml"
NOTE = "random (tiny_fixture): output is noise, not speech"
TEXT = "Hello from the tiny model. It says nothing, only noise."


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = start_server(config=str(CONFIG))
    yield live
    live.stop()


def speak(url: str, text: str = TEXT, **extra) -> httpx.Response:
    body = {"model": "cosyvoice3", "voice": "random-tiny", "input": text,
            "response_format": "pcm", **extra}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def test_seeded_audio_is_identical_run_to_run_streamed_or_whole(server):
    runs = [speak(server.url, seed=21), speak(server.url, seed=21),
            speak(server.url, seed=21, stream=False)]
    for r in runs:
        assert r.status_code == 200, r.text
        assert r.headers["x-voxflow-weights"] == "random"
        assert r.headers["x-sample-rate"] == "24000"
    digests = {hashlib.sha256(r.content).hexdigest() for r in runs}
    assert len(digests) == 1
    samples = np.frombuffer(runs[0].content, "<i2")
    assert samples.size > 0 and samples.size % 960 == 0  # 960 samples per speech token
    assert "content-length" in runs[2].headers and "content-length" not in runs[0].headers
    other = speak(server.url, seed=22)
    assert hashlib.sha256(other.content).hexdigest() not in digests


def test_a_wav_response_and_the_models_listing_say_the_weights_are_random(server):
    r = speak(server.url, "One more.", response_format="wav", seed=1)
    assert r.status_code == 200 and r.content[:4] == b"RIFF"
    assert r.headers["x-voxflow-weights"] == "random"
    models = httpx.get(f"{server.url}/v1/models").json()["data"]
    entry = next(m for m in models if m["id"] == "cosyvoice3")
    assert entry["weights"] == NOTE and entry["voices"] == ["random-tiny"]
    assert entry["family"] == "cosyvoice3"
    one = httpx.get(f"{server.url}/v1/models/cosyvoice3")
    assert one.status_code == 200 and one.json()["weights"] == NOTE
    health = httpx.get(f"{server.url}/health").json()["models"]["cosyvoice3"]
    assert health["status"] == "ready" and health["weights"] == NOTE


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"voice": "nobody"}, 400, "voice"),  # OpenAI's names (alloy) resolve on every model
    ({"input": ""}, 400, "input"),
    ({"input": "x" * 4097}, 400, "input"),
    ({"input": " \n "}, 400, "input"),  # symbols alone are a short silence (issue 38 item 4)
    ({"model": "cosyvoice4"}, 404, "model"),
    ({"seed": "seven"}, 400, "seed"),
])
def test_bad_input_is_an_openai_error_and_the_next_request_succeeds(server, body, status, param):
    r = speak(server.url, **body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert speak(server.url, "Still here.", seed=5).status_code == 200


def test_every_request_state_is_freed(server):
    speak(server.url, "Free it all.", seed=8)
    metrics = httpx.get(f"{server.url}/metrics").text
    for stage in ("lm", "token2wav"):
        assert f'voxflow_stage_states{{model="cosyvoice3",stage="{stage}"}} 0.0' in metrics


def test_speed_resamples_the_mel_of_the_same_tokens(server):
    # The LM's tokens depend on the seed, not the speed; speed != 1 takes the offline path,
    # which resamples the mel (2 frames per token) to floor(frames / speed) frames.
    lengths = {}
    for speed in (1.0, 2.0, 0.5):
        r = speak(server.url, "Speed check.", seed=13, speed=speed)
        assert r.status_code == 200, r.text
        lengths[speed] = np.frombuffer(r.content, "<i2").size
    tokens = lengths[1.0] // 960
    assert lengths == {1.0: 960 * tokens, 2.0: 480 * tokens, 0.5: 1920 * tokens}


def test_a_body_that_is_not_json_is_a_400_and_the_next_request_succeeds(server):
    r = httpx.post(f"{server.url}/v1/audio/speech", content=b'{"model": "cosyvoice3", ',
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert speak(server.url, "After the bad body.", seed=6).status_code == 200


def test_instructions_are_applied_said_so_and_checked(server):
    soft = "Please say a sentence in a very soft voice."  # one of the 26 known-good ones
    runs = [speak(server.url, seed=3, instructions=soft) for _ in range(2)]
    for r in runs:
        assert r.status_code == 200, r.text
        assert r.headers["x-voxflow-instructions"] == "applied"
        assert "x-voxflow-ignored" not in r.headers
    assert runs[0].content == runs[1].content  # seeded: the same bytes
    plain = speak(server.url, seed=3)
    assert "x-voxflow-instructions" not in plain.headers and plain.content != runs[0].content
    assert "x-voxflow-instructions" not in speak(server.url, seed=3, instructions="").headers
    for bad, code in (("x" * 1001, "instructions_too_long"), ("a\x00b", "invalid_value")):
        r = speak(server.url, instructions=bad)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["param"], error["code"]) == ("instructions", code) and error["message"]
