"""`speed` over OpenAI's whole range (0.25-4) through the real server, both families: with a
fixed seed, the duration at speed s is within 10% of the speed-1.0 duration divided by s (the
model's length scale inside its clean range, Rubber Band time stretch beyond it), and Whisper
still understands twice the speed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import jiwer
import numpy as np
import pytest
from conftest import LiveServer, start_server

from voxflow.eval.normalize import normalize_for_wer

pytestmark = pytest.mark.integration

MULTI_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "multi.yaml"
TEXT = ("The little red kite circled twice above the harbor before settling on the mast. "
        "Please have your boarding pass ready.")
# voice, and the rate of its pcm: OpenAI's 24 kHz for both (Piper's 22,050 Hz resampled)
VOICES = {"piper": ("joe", 24000), "kokoro": ("jm_kumo", 24000)}


@pytest.fixture(scope="module")
def multi_server(tmp_path_factory) -> Iterator[LiveServer]:
    """piper + kokoro from configs/multi.yaml, the Kokoro model joined into a temporary cache."""
    cache = tmp_path_factory.mktemp("kokoro_cache")
    live = start_server({"models.1.options.cache_dir": str(cache)}, config=str(MULTI_CONFIG))
    yield live
    live.stop()


def speak(url: str, model: str, speed: float) -> np.ndarray:
    body = {"model": model, "voice": VOICES[model][0], "input": TEXT, "response_format": "pcm",
            "speed": speed, "seed": 7}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767.0


@pytest.mark.parametrize("model", ["piper", "kokoro"])
def test_speed_four_and_a_quarter_scale_the_duration_of_two_sentences(multi_server, model):
    base = speak(multi_server.url, model, 1.0).size
    for speed in (4.0, 0.25):
        ratio = speak(multi_server.url, model, speed).size * speed / base
        print(f"{model} speed {speed}: duration x speed / duration(1.0) = {ratio:.3f}")
        assert ratio == pytest.approx(1.0, abs=0.10)


@pytest.mark.parametrize("model", ["piper", "kokoro"])
def test_speed_two_is_still_understood(multi_server, transcribe, model):
    audio = speak(multi_server.url, model, 2.0)
    heard = normalize_for_wer(transcribe(audio, VOICES[model][1]))
    wer = jiwer.wer(normalize_for_wer(TEXT), heard)
    print(f"{model} at speed 2 (WER {wer:.2f}): {heard!r}")
    # Seen: piper "little red cike circle twice" (2 errors in 20 words), kokoro "a" for "the".
    assert wer <= 0.2
    for word in ("little", "red", "twice", "harbor", "mast", "boarding", "pass", "ready"):
        assert word in heard.split()
