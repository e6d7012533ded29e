"""The audio cache on the served app (default Piper voice joe): a seeded request's second
answer is the first's bytes from the cache, unseeded Piper is never cached, ``no-store`` is
honoured, the metrics count, bad input is still a 4xx in the OpenAI shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import LiveServer, start_server

URL = "/v1/audio/speech"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LiveServer]:
    live = start_server({"cache.enabled": True,
                         "server.lexicons_dir": str(tmp_path_factory.mktemp("lexicons"))})
    yield live
    live.stop()


def _post(server: LiveServer, headers: dict | None = None, **fields) -> httpx.Response:
    body = {"model": "piper", "voice": "joe", "input": "Cached words.", "response_format": "wav",
            **fields}
    return httpx.post(server.url + URL, json=body, headers=headers or {}, timeout=60)


def test_a_seeded_request_again_is_a_hit_with_the_same_bytes_and_headers(server):
    first = _post(server, seed=11, stream=False)
    again = _post(server, seed=11, stream=False)
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.headers["x-voxflow-cache"] == "miss"
    assert again.headers["x-voxflow-cache"] == "hit"
    assert again.content == first.content and len(first.content) > 1000
    assert again.headers["x-sample-rate"] == first.headers["x-sample-rate"] == "22050"
    assert again.headers["content-type"] == first.headers["content-type"] == "audio/wav"
    assert again.headers["x-request-id"] != first.headers["x-request-id"]
    assert server.metric("voxflow_audio_cache_hits_total", {"model": "piper"}) >= 1


def test_streamed_and_sse_bodies_are_cached_as_sent(server):
    for fields in ({"stream": True}, {"stream_format": "sse"}):
        first = _post(server, seed=12, **fields)
        again = _post(server, seed=12, **fields)
        assert first.headers["x-voxflow-cache"] == "miss", fields
        assert again.headers["x-voxflow-cache"] == "hit", fields
        assert again.content == first.content, fields


def test_other_seed_speed_or_format_is_another_entry(server):
    _post(server, seed=13, stream=False)
    for fields in ({"seed": 14}, {"seed": 13, "speed": 1.5}, {"seed": 13, "response_format": "pcm"},
                   {"seed": 13, "sample_rate": 16000}):
        assert _post(server, stream=False, **fields).headers["x-voxflow-cache"] == "miss", fields


def test_unseeded_piper_is_never_cached(server):
    first = _post(server, stream=False, input="Never the same twice.")
    again = _post(server, stream=False, input="Never the same twice.")
    assert first.headers["x-voxflow-cache"] == again.headers["x-voxflow-cache"] == "bypass"
    assert first.content != again.content  # fresh noise per request


def test_no_store_neither_reads_nor_writes(server):
    headers = {"Cache-Control": "no-store"}
    first = _post(server, headers, seed=15, stream=False)
    assert first.headers["x-voxflow-cache"] == "bypass"
    assert _post(server, seed=15, stream=False).headers["x-voxflow-cache"] == "miss"
    assert _post(server, seed=15, stream=False).headers["x-voxflow-cache"] == "hit"
    assert _post(server, headers, seed=15, stream=False).headers["x-voxflow-cache"] == "bypass"


def test_metrics_count_hits_misses_bytes_and_entries(server):
    hits = server.metric("voxflow_audio_cache_hits_total", {"model": "piper"})
    misses = server.metric("voxflow_audio_cache_misses_total", {"model": "piper"})
    held = server.metric("voxflow_audio_cache_bytes")
    first = _post(server, seed=16, stream=False, input="Counted once.")
    _post(server, seed=16, stream=False, input="Counted once.")
    assert server.metric("voxflow_audio_cache_hits_total", {"model": "piper"}) == hits + 1
    assert server.metric("voxflow_audio_cache_misses_total", {"model": "piper"}) == misses + 1
    assert server.metric("voxflow_audio_cache_bytes") == held + len(first.content)
    assert server.metric("voxflow_audio_cache_entries") >= 1


@pytest.mark.parametrize(("fields", "status", "param"), [
    ({"seed": -1}, 400, "seed"),
    ({"seed": 1, "speed": 9.0}, 400, "speed"),
    ({"seed": 1, "voice": "nobody"}, 400, "voice"),
    ({"seed": 1, "model": "nope"}, 404, "model"),
])
def test_bad_input_is_still_a_4xx_in_the_openai_shape(server, fields, status, param):
    response = _post(server, stream=False, **fields)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and set(error) == {"message", "type", "param", "code"}
    assert "x-voxflow-cache" not in response.headers


def _lexicon(server: LiveServer, respelling: str) -> None:
    r = httpx.put(f"{server.url}/v1/audio/lexicons/spelled", timeout=30,
                  json={"entries": [{"word": "Cached", "respelling": respelling}]})
    assert r.status_code in (200, 201), r.text


def test_a_changed_or_deleted_lexicon_drops_its_entries(server):
    _lexicon(server, "Kooshed")
    first = _post(server, seed=17, stream=False, lexicon="spelled")
    again = _post(server, seed=17, stream=False, lexicon="spelled")
    assert (first.headers["x-voxflow-cache"], again.headers["x-voxflow-cache"]) == ("miss",
                                                                                      "hit")
    plain = _post(server, seed=17, stream=False)  # no lexicon: another entry, other audio
    assert plain.headers["x-voxflow-cache"] in ("miss", "hit")
    assert plain.content != first.content
    entries = server.metric("voxflow_audio_cache_entries")
    _lexicon(server, "Cashing")  # changed: its one entry goes, the others stay
    assert server.metric("voxflow_audio_cache_entries") == entries - 1
    changed = _post(server, seed=17, stream=False, lexicon="spelled")
    assert changed.headers["x-voxflow-cache"] == "miss"
    assert changed.content != first.content
    assert _post(server, seed=17, stream=False).headers["x-voxflow-cache"] == "hit"
    r = httpx.delete(f"{server.url}/v1/audio/lexicons/spelled", timeout=30)
    assert r.status_code in (200, 204), r.text
    assert server.metric("voxflow_audio_cache_entries") == entries - 1
    gone = _post(server, seed=17, stream=False, lexicon="spelled")
    assert gone.status_code == 400 and gone.json()["error"]["code"] == "lexicon_not_found"
