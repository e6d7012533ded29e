"""``voxflow bench run --wyoming`` against voxflow's own Wyoming listener (the shared
multi-model server): one-shot and streamed text, Piper and Kokoro, timed as Home Assistant
would hear them; an unknown voice is an error kind, not a crash."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import wave

import httpx
import pytest

from voxflow.bench.target import Target
from voxflow.bench.wyoming_client import fetch_wyoming
from voxflow.cli import main
from voxflow.wyoming.streaming import CHUNK_BYTES

pytestmark = pytest.mark.integration

TEXT = "The little red kite circled twice above the harbor. Then it settled on the mast."


def whole_samples(url: str, model: str, voice: str) -> int:
    r = httpx.post(f"{url}/v1/audio/speech", timeout=120, json={
        "model": model, "voice": voice, "input": TEXT, "response_format": "wav",
        "stream": False})
    assert r.status_code == 200, r.text
    with wave.open(io.BytesIO(r.content)) as w:
        return w.getnframes()


@pytest.mark.parametrize(("model", "voice", "rate", "words_per_s"), [
    ("piper", "joe", 22050, None), ("kokoro", "jm_kumo", 24000, 40.0)])
def test_a_wyoming_request_is_timed_chunk_by_chunk(multi_server, model, voice, rate,
                                                   words_per_s):
    target = Target("wyoming", f"tcp://127.0.0.1:{multi_server.wyoming_port}", voice=voice,
                    text_words_per_s=words_per_s)
    result = asyncio.run(fetch_wyoming(target, TEXT, 0, timeout_s=120, keep_audio=True))
    t = result.timeline
    assert (t.ok, t.error, t.sample_rate) == (True, None, rate)
    assert result.audio is not None and result.audio.size == t.samples
    # each audio-chunk is one arrival of at most 2,048 samples
    assert max(a.samples for a in t.arrivals) == CHUNK_BYTES // 2
    assert len(t.arrivals) >= t.samples // (CHUNK_BYTES // 2)
    # unseeded, so another draw: the same reading within 15% (streamed text: spoken once,
    # the duplicate `synthesize` ignored)
    assert abs(t.samples / whole_samples(multi_server.url, model, voice) - 1) < 0.15
    assert 0 < t.ttfa < t.latency


def test_an_unknown_voice_is_a_stream_error(multi_server):
    target = Target("wyoming", f"tcp://127.0.0.1:{multi_server.wyoming_port}", voice="nobody")
    t = asyncio.run(fetch_wyoming(target, TEXT, 0, timeout_s=60)).timeline
    assert (t.ok, t.error) == (False, "stream_error")


@pytest.mark.parametrize("streaming", [[], ["--wyoming-streaming", "--wyoming-words-per-s", "40"]])
def test_bench_run_wyoming_sweeps_concurrency(multi_server, quiet, capsys, streaming):
    assert main(["bench", "run", "--wyoming", f"127.0.0.1:{multi_server.wyoming_port}",
                 "--voice", "joe", "--case", "line", "--concurrency", "1,2", "--warmup", "0",
                 *streaming]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["line", "1", "5/5"]
    assert table[2].split()[:3] == ["line", "2", "10/10"]
    assert table[1].split()[-2:] == ["0.00", "0"]  # stall rate, errors


def test_compare_runs_wyoming_arms(monkeypatch, tmp_path, capsys):
    from conftest import QuietLoad

    from voxflow.bench import command

    monkeypatch.setattr(command, "make_load_source", QuietLoad)
    arm = f"{sys.executable} -m voxflow serve --port 0 --wyoming {{port}}"
    out = tmp_path / "compare.json"
    assert main(["bench", "compare", "--arm", f"a:wyoming={arm}", "--arm", f"b:wyoming={arm}",
                 "--runs", "1", "--case", "line", "--concurrency", "1", "--warmup", "0",
                 "--work-dir", str(tmp_path / "work"), "--out", str(out)]) == 0
    assert "b/a" in capsys.readouterr().out
    record = json.loads(out.read_text())
    for start in record["starts"]:
        assert start["url"].startswith("tcp://127.0.0.1:")
        (program,) = start["info"]["tts"]
        assert program["name"] == "voxflow" and "joe" in program["voices"]
        assert start["levels"]["line"][0]["ok"] == 5
