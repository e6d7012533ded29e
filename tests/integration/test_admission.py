"""Cancellation on disconnect, admission control (429) and request timeout (504)."""

from __future__ import annotations

import time

import httpx
import pytest
from conftest import data_file, start_server

pytestmark = pytest.mark.integration


def acoustic(live, name: str) -> float:
    return live.metric(name, {"model": "piper", "stage": "acoustic"})


def test_disconnect_after_first_chunk_stops_work(joe_server):
    script = data_file("case_script.txt").read_text()
    before_run = acoustic(joe_server, "voxflow_stage_items_total")
    before_cancel = joe_server.metric(
        "voxflow_cancellations_total", {"model": "piper", "reason": "client"}
    )
    body = {"model": "piper", "voice": "joe", "input": script, "response_format": "pcm",
            "stream": True}
    with httpx.stream("POST", f"{joe_server.url}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200
        first = next(r.iter_raw())  # the iterator is dropped here: httpx closes the connection
        assert len(first) > 0
    # The server sees the disconnect; every segment still queued is dropped, none synthesized.
    deadline = time.monotonic() + 30
    while joe_server.metric("voxflow_cancellations_total",
                            {"model": "piper", "reason": "client"}) == before_cancel:
        assert time.monotonic() < deadline, "cancellation never recorded"
        time.sleep(0.05)
    time.sleep(1.0)  # any segment already running finishes; nothing new may start
    segments = 20  # case_script.txt has twenty sentences
    ran = acoustic(joe_server, "voxflow_stage_items_total") - before_run
    assert ran < segments / 2, f"{ran} of {segments} segments synthesized after disconnect"
    assert acoustic(joe_server, "voxflow_dropped_items_total") > 0
    assert joe_server.engine.health()["inflight_requests"] == 0


def test_whole_file_request_whose_client_leaves_is_cancelled(joe_server):
    # Regression: a non-streamed request went on synthesizing all of its text after the
    # client disconnected, and was counted as ok.
    script = data_file("case_script.txt").read_text()
    client = {"model": "piper", "reason": "client"}
    before = joe_server.metric("voxflow_cancellations_total", client)
    before_run = acoustic(joe_server, "voxflow_stage_items_total")
    body = {"model": "piper", "voice": "joe", "input": script, "response_format": "pcm",
            "speed": 0.5, "stream": False}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{joe_server.url}/v1/audio/speech", json=body, timeout=0.5)
    deadline = time.monotonic() + 30
    while joe_server.metric("voxflow_cancellations_total", client) == before:
        assert time.monotonic() < deadline, "cancellation never recorded"
        time.sleep(0.05)
    time.sleep(1.0)
    assert acoustic(joe_server, "voxflow_stage_items_total") - before_run < 10
    assert joe_server.engine.health()["inflight_requests"] == 0


def test_over_capacity_gets_429_with_retry_after():
    live = start_server({"engine.max_inflight_requests": 1, "engine.max_queued_requests": 0,
                         "engine.retry_after_s": 3})
    try:
        script = data_file("case_script.txt").read_text()
        # Slow speech of a long script keeps the only slot busy for tens of seconds (the
        # loopback socket buffers could otherwise swallow a faster response whole).
        body = {"model": "piper", "voice": "joe", "input": script, "response_format": "pcm",
                "stream": True, "speed": 0.25}
        with httpx.stream("POST", f"{live.url}/v1/audio/speech", json=body, timeout=60) as r:
            pieces = r.iter_raw()  # kept referenced: dropping it would close the connection
            next(pieces)
            health = live.engine.health()
            # the client reads no further: once 10 s ahead the request parks (gives its slot
            # back) but stays outstanding, so the limit still refuses a second one
            assert health["inflight_requests"] + health["parked_requests"] == 1
            refused = httpx.post(f"{live.url}/v1/audio/speech", json={**body, "stream": False})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "3"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        time.sleep(0.5)
        ok = httpx.post(f"{live.url}/v1/audio/speech",
                        json={**body, "input": "Fine again.", "stream": False, "speed": 1.0},
                        timeout=60)
        assert ok.status_code == 200
    finally:
        live.stop()


def test_request_past_timeout_gets_504():
    live = start_server({"engine.request_timeout_s": 0.05})
    try:
        script = data_file("case_script.txt").read_text()
        # a whole response: a streamed one's first audio (about 40 ms) can beat the 50 ms
        # timeout, and its body is then cut short (the next test), not a 504
        body = {"model": "piper", "voice": "joe", "input": script, "response_format": "pcm",
                "stream": False}
        r = httpx.post(f"{live.url}/v1/audio/speech", json=body, timeout=60)
        assert r.status_code == 504
        assert r.json()["error"]["code"] == "timeout"
        assert live.metric("voxflow_cancellations_total",
                           {"model": "piper", "reason": "timeout"}) == 1
    finally:
        live.stop()


def test_stream_that_times_out_midway_ends_as_an_error_not_a_clean_file():
    # Regression: a streamed body cut short by the timeout ended with a clean final chunk, so
    # the client could not tell a truncated file from a complete one.
    live = start_server({"engine.request_timeout_s": 1.5})
    try:
        script = data_file("case_script.txt").read_text()
        body = {"model": "piper", "voice": "joe", "input": script, "response_format": "pcm",
                "stream": True}
        received = 0
        with pytest.raises(httpx.RemoteProtocolError):
            with httpx.stream("POST", f"{live.url}/v1/audio/speech", json=body, timeout=60) as r:
                assert r.status_code == 200
                for piece in r.iter_raw():
                    received += len(piece)
        assert received > 0
        assert httpx.get(f"{live.url}/health").status_code == 200
    finally:
        live.stop()
