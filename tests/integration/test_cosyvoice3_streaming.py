"""CosyVoice3 (tiny random weights, configs/cosyvoice3-tiny.yaml) streamed through the real
server on loopback (issue 11): streaming changes only the delivery, never the synthesis; chunk
seams are sample-continuous; a seeded request gives the same bytes alone and among 8 concurrent
requests; a client that leaves mid-stream, or a request that times out, frees its LM KV caches
and vocoder state, as `/metrics` shows (`voxflow_stage_states`, `voxflow_stage_state_bytes`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import LiveServer, start_server
from prometheus_client.parser import text_string_to_metric_families
from test_api import assert_same_audio_bytes

pytest.importorskip("torch")
pytest.importorskip("tiktoken")

from voxflow.models.cosyvoice3.token2wav import HopSchedule, Token2WavConfig  # noqa: E402

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cosyvoice3-tiny.yaml"
TEXT = "Hello from the tiny model. It says nothing, only noise, in three sentences. The end."
# ~40 segments: synthesis lasts seconds, well past the first chunk
LONG_TEXT = " ".join(f"Sentence number {i} of a long request that keeps the model busy."
                     for i in range(40))
STAGES = ("lm", "token2wav")
TINY_PROMPT_TOKENS = 7  # the fixture voice's P (spec §9.5)
SAMPLES_PER_TOKEN = 960  # 2 mel frames x 480 samples
HOLDBACK_SAMPLES = 8 * 480  # HiFT's streamed hold-back (spec §7)


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = start_server(config=str(CONFIG))
    yield live
    live.stop()


def body(text: str = TEXT, **extra) -> dict:
    return {"model": "cosyvoice3", "voice": "random-tiny", "input": text,
            "response_format": "pcm", **extra}


def speak(url: str, text: str = TEXT, **extra) -> httpx.Response:
    r = httpx.post(f"{url}/v1/audio/speech", json=body(text, **extra), timeout=120)
    assert r.status_code == 200, r.text
    return r


def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(sampled: dict, name: str, **labels: str) -> float:
    return sampled.get((name, tuple(sorted(labels.items()))), 0.0)


def held(sampled: dict) -> dict[str, float]:
    """The CosyVoice3 state gauges: live states and their bytes per stage."""
    out = {}
    for stage in STAGES:
        out[f"{stage} states"] = value(sampled, "voxflow_stage_states", model="cosyvoice3",
                                       stage=stage)
        out[f"{stage} bytes"] = value(sampled, "voxflow_stage_state_bytes", model="cosyvoice3",
                                      stage=stage)
    return out


def wait_until_freed(url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """Poll /metrics until every state gauge is 0; returns the last reading."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = held(metrics(url))
        if not any(now.values()) or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


# ---- streaming changes only the delivery --------------------------------------------------------

@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac", "mp3", "opus", "aac"])
def test_streamed_bytes_equal_the_whole_response(server, fmt):
    whole = speak(server.url, response_format=fmt, seed=41, stream=False)
    streamed = speak(server.url, response_format=fmt, seed=41, stream=True)
    assert "content-length" in whole.headers
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert len(whole.content) > 1000
    assert_same_audio_bytes(fmt, whole.content, streamed.content)


def seams(n_tokens: int) -> list[int]:
    """Sample offsets where one streamed piece of a single-segment request ends and the next
    begins (spec §9.7: chunk k emits up to 480 x (2 x offset_k - 8) samples)."""
    schedule = HopSchedule(Token2WavConfig.tiny(), TINY_PROMPT_TOKENS)
    out = []
    while schedule.due(n_tokens):
        schedule.advance()
        out.append(2 * schedule.offset * 480 - HOLDBACK_SAMPLES)
    return out


def test_chunk_seams_are_sample_continuous(server):
    # One long sentence: one segment, several streamed pieces (hops 8, 10, 20, 20, ...).
    text = "This single sentence runs on and on so that its audio is cut in many pieces"
    pieces: list[bytes] = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body(text, seed=5),
                      timeout=120) as r:
        assert r.status_code == 200
        pieces = list(r.iter_bytes())
    audio = np.frombuffer(b"".join(pieces), "<i2").astype(np.float64) / 32768
    tokens = audio.size // SAMPLES_PER_TOKEN
    cuts = [c for c in seams(tokens) if 240 < c < audio.size - 240]
    assert len(cuts) >= 2, f"{tokens} tokens gave too few seams to check"
    step = np.abs(np.diff(audio))
    for cut in cuts:
        jump = step[cut - 1]  # between the last sample of one piece and the first of the next
        around = np.concatenate([step[cut - 241:cut - 1], step[cut:cut + 240]])
        # The noise of random weights: |step| / median stays below ~2.1 anywhere (measured);
        # a lost, repeated or misplaced sample run at a seam would stand out.
        assert jump <= 3 * np.median(around) + 2 / 32768, (cut, jump, np.median(around))


# ---- seeded bytes: across runs, and alone or among 8 concurrent requests ----------------------

def test_seeded_bytes_are_identical_at_concurrency_1_and_8(server):
    alone = [speak(server.url, seed=77).content for _ in range(2)]
    assert alone[0] == alone[1]
    others = [f"Another request, number {i}, unseeded. It runs beside the seeded one."
              for i in range(7)]

    def one(i: int) -> bytes:
        if i == 3:
            return speak(server.url, seed=77).content
        return speak(server.url, others[i if i < 3 else i - 1]).content

    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(one, range(8)))
    assert together[3] == alone[0]
    assert len({hash(t) for t in together}) == 8  # the unseeded ones differ
    assert not any(wait_until_freed(server.url).values())


# ---- cancellation frees the KV caches and vocoder state ----------------------------------------

def test_a_client_leaving_mid_stream_frees_kv_caches_and_vocoder_state(server):
    before = metrics(server.url)
    cancelled = value(before, "voxflow_cancellations_total", model="cosyvoice3", reason="client")
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body(LONG_TEXT, seed=9),
                      timeout=120) as r:
        assert r.status_code == 200
        pieces = r.iter_bytes()  # kept: a dropped generator would close the response now
        assert next(pieces)
        during = held(metrics(server.url))
        # Mid-stream: the request holds decode state (a KV cache) or vocoder state, with bytes.
        assert during["lm states"] + during["token2wav states"] >= 1, during
        assert during["lm bytes"] + during["token2wav bytes"] > 0, during
    # The client is gone (connection closed mid-body).
    after = wait_until_freed(server.url)
    assert not any(after.values()), after
    deadline = time.monotonic() + 10
    while value(metrics(server.url), "voxflow_cancellations_total", model="cosyvoice3",
                reason="client") < cancelled + 1:
        assert time.monotonic() < deadline, "the disconnect was not counted as a cancellation"
        time.sleep(0.1)
    assert speak(server.url, "Still serving.", seed=1).content


@pytest.fixture
def short_timeout(server):
    """`server` with `engine.request_timeout_s` 1 s for one test (the engine reads its settings
    per request), restored afterwards."""
    engine = server.engine
    settings = engine.settings
    short = settings.engine.model_copy(update={"request_timeout_s": 1.0})
    engine.settings = settings.model_copy(update={"engine": short})
    yield server
    engine.settings = settings


def test_a_timed_out_request_frees_kv_caches_and_vocoder_state(short_timeout):
    url = short_timeout.url
    timeouts = value(metrics(url), "voxflow_cancellations_total", model="cosyvoice3",
                     reason="timeout")
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body(LONG_TEXT, seed=10),
                      timeout=120) as r:
        if r.status_code == 200:  # timed out after the first chunk: the body breaks off
            with pytest.raises(httpx.RemoteProtocolError):
                for _ in r.iter_bytes():
                    pass
        else:  # timed out before it
            r.read()
            assert r.status_code == 504, r.text
    after = wait_until_freed(url)
    assert not any(after.values()), after
    assert value(metrics(url), "voxflow_cancellations_total", model="cosyvoice3",
                 reason="timeout") == timeouts + 1
