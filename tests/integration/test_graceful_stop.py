"""Issue 40 item 1: `voxflow serve` stopped by a signal with work in flight. The first SIGTERM
or SIGINT drains (new requests 503 ``shutting_down`` with ``Retry-After``, ``/health`` 503
``draining``, requests in flight finish) and the process exits 0; work still running after
``server.drain_timeout_s`` ends as its protocol ends an error (HTTP: a body cut short; SSE: an
``error`` event; WebSocket: close 1001; Wyoming: an ``error`` event); a second signal exits at
once. Real servers in subprocesses (the default Piper voice)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time

import httpx
import pytest
from serve_process import Server
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

pytestmark = pytest.mark.integration

SENTENCE = "The little red kite circled twice above the harbor before settling on the mast. "
SHORT = SENTENCE * 3  # about 15 s of audio: done in a few seconds
LONG = SENTENCE * 40  # minutes of audio: still running when a short drain times out


@pytest.fixture
def server(tmp_path, request):
    sets, wyoming = request.param
    s = Server(tmp_path, *sets, wyoming=wyoming)
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()


def speech(text: str, **extra) -> dict:
    return {"model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
            "stream": True, **extra}


async def read_streamed(client: httpx.AsyncClient, url: str, body: dict,
                        started: asyncio.Event) -> tuple[int, bytes, str | None]:
    """Status, body bytes and the error class name if the body broke off."""
    data = bytearray()
    async with client.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=120) as r:
        try:
            async for piece in r.aiter_raw():
                data += piece
                started.set()
        except httpx.HTTPError as exc:
            return r.status_code, bytes(data), type(exc).__name__
    return r.status_code, bytes(data), None


@pytest.mark.parametrize("server", [(["server.drain_timeout_s=60"], False)], indirect=True)
def test_sigterm_refuses_new_work_finishes_what_runs_and_exits_0(server):
    async def scenario():
        async with httpx.AsyncClient() as client:
            started = [asyncio.Event() for _ in range(3)]
            running = [asyncio.create_task(read_streamed(client, server.url, speech(SHORT), e))
                       for e in started]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
            server.signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            health = await client.get(f"{server.url}/health")
            refused = await client.post(f"{server.url}/v1/audio/speech", json=speech("Hi."))
            return health, refused, await asyncio.gather(*running)

    health, refused, finished = asyncio.run(scenario())
    assert (health.status_code, health.json()["status"]) == (503, "draining")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert refused.headers["retry-after"] == "1"
    whole = None
    for status, data, broke in finished:
        assert (status, broke) == (200, None)
        whole = whole or len(data)
        assert len(data) > 24000 * 2 * 10  # the whole reading, more than 10 s of pcm
    assert server.wait(60) == 0
    log = server.log.read_text()
    assert "SIGTERM: draining (3 requests or sessions, 3 engine requests in flight)" in log
    assert "drained: nothing in flight" in log


@pytest.mark.parametrize("server", [(["server.drain_timeout_s=1"], True)], indirect=True)
def test_work_left_when_the_drain_times_out_ends_as_each_protocol_ends_an_error(server):
    async def ws_session() -> tuple[dict, int | None]:
        url = f"ws://127.0.0.1:{server.port}/v1/audio/speech/stream"
        last: dict = {}
        async with connect(url, max_size=None) as ws:
            await ws.send(json.dumps({"type": "config", "model": "piper", "voice": "joe",
                                      "response_format": "pcm"}))
            await ws.send(json.dumps({"type": "text", "text": SENTENCE}))  # then: no end
            try:
                async for message in ws:
                    if isinstance(message, str):
                        last = json.loads(message)
                    else:
                        ws_audio.set()
            except ConnectionClosed:
                pass
            return last, ws.close_code

    async def wyoming() -> list[str]:
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Synthesize(text=LONG).event())
            types = []
            while (event := await client.read_event()) is not None:
                types.append(event.type if event.type != "error" else
                             f"error:{event.data['code']}")
                if event.type == "audio-chunk":
                    wy_audio.set()
            return types

    ws_audio, wy_audio = asyncio.Event(), asyncio.Event()

    async def scenario():
        async with httpx.AsyncClient() as client:
            raw_started, sse_started = asyncio.Event(), asyncio.Event()
            raw = asyncio.create_task(read_streamed(client, server.url, speech(LONG),
                                                    raw_started))
            sse = asyncio.create_task(read_streamed(
                client, server.url, speech(LONG, stream_format="sse"), sse_started))
            ws = asyncio.create_task(ws_session())
            wy = asyncio.create_task(wyoming())
            # every kind of work is under way (on a busy machine this takes a while)
            await asyncio.wait_for(asyncio.gather(raw_started.wait(), sse_started.wait(),
                                                  ws_audio.wait(), wy_audio.wait()), 120)
            server.signal(signal.SIGINT)
            return await asyncio.gather(raw, sse, ws, wy)

    raw, sse, (ws_last, ws_code), wy = asyncio.run(scenario())
    assert raw[0] == 200 and raw[2] == "RemoteProtocolError"  # a body cut short, not a file
    events = [json.loads(line[6:]) for line in sse[1].decode().splitlines()
              if line.startswith("data: ")]
    assert sse[2] is None and events[-1]["type"] == "error"
    assert events[-1]["error"]["code"] == "shutting_down"
    assert (ws_last.get("type"), ws_code) == ("error", 1001)
    assert ws_last["error"]["code"] == "shutting_down"
    assert wy[0] == "audio-start" and wy[-1] == "error:shutting_down"
    assert server.wait(30) == 0
    # HTTP and SSE requests and the WebSocket session; the engine requests of the HTTP, SSE
    # and Wyoming requests (and the session's, if its sentence is still being spoken)
    assert re.search(r"drain timed out after 1 s: ending what is still in flight \(3 requests "
                     r"or sessions, [34] engine requests\)", server.log.read_text()), (
        server.log.read_text()[-3000:])


@pytest.mark.parametrize("server", [(["server.drain_timeout_s=60"], False)], indirect=True)
def test_a_second_signal_exits_at_once(server):
    async def scenario():
        async with httpx.AsyncClient() as client:
            started = asyncio.Event()
            running = asyncio.create_task(read_streamed(client, server.url, speech(LONG),
                                                        started))
            await asyncio.wait_for(started.wait(), 60)
            server.signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            server.signal(signal.SIGTERM)
            code = await asyncio.to_thread(server.wait, 10)
            elapsed = time.monotonic() - t0
            await asyncio.gather(running, return_exceptions=True)
            return code, elapsed

    code, elapsed = asyncio.run(scenario())
    assert code == 128 + signal.SIGTERM and elapsed < 3
