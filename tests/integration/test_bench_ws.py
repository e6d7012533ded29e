"""``voxflow bench run --ws`` against the real joe server: each request is a stream session
sending its text word by word; TTFA counts from the first word, so it includes the time the
words take to arrive; the audio is the HTTP route's for the same seeded sentence."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from voxflow.bench.adapters import Target
from voxflow.bench.decode import pcm16_to_float
from voxflow.bench.ws_client import fetch_ws, words_of
from voxflow.cli import main

pytestmark = pytest.mark.integration

TEXT = "The little red kite circled twice above the harbor before settling on the mast."


def test_a_session_is_timed_from_its_first_word_and_speaks_the_http_audio(joe_server):
    target = Target("openai", joe_server.url)
    words = len(words_of(TEXT))
    result = asyncio.run(fetch_ws(target, TEXT, 0, seed=5, timeout_s=60, words_per_s=40,
                                  keep_audio=True))
    t = result.timeline
    assert t.ok and t.sample_rate == 24000  # pcm: OpenAI's rate, Piper's resampled
    # the sentence is complete only at the end message, after every word was sent
    assert t.ttfa >= (words - 1) / 40
    http = httpx.post(f"{joe_server.url}/v1/audio/speech", timeout=60, json={
        "model": "piper", "voice": "joe", "input": TEXT, "response_format": "pcm", "seed": 5,
        "stream": False})
    assert result.audio is not None
    np.testing.assert_array_equal(result.audio, pcm16_to_float(http.content))


def test_a_refused_session_is_an_error_kind_not_a_crash(joe_server):
    target = Target("openai", joe_server.url, voice="nobody")
    t = asyncio.run(fetch_ws(target, TEXT, 0, None, 60, 40)).timeline
    assert (t.ok, t.error) == (False, "stream_error")


def test_bench_run_ws_sweeps_concurrency(joe_server, quiet, capsys):
    assert main(["bench", "run", "--url", joe_server.url, "--case", "line", "--ws",
                 "--ws-words-per-s", "30", "--concurrency", "1,2", "--warmup", "0"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["line", "1", "5/5"]
    assert table[2].split()[:3] == ["line", "2", "10/10"]


def test_bench_run_ws_refuses_what_it_cannot_measure(joe_server, capsys):
    assert main(["bench", "run", "--url", joe_server.url, "--ws", "--check", "2"]) == 2
    assert "--ws measures" in capsys.readouterr().err
