"""Issue 40 item 6: voxflow behind Debian's nginx running `deploy/nginx-voxflow.conf` as
documented (docs/operations.md): streamed audio passes through as it is made, WebSocket
sessions work, a JSON body too large for voxflow gets voxflow's 413 and one too large for
nginx gets nginx's, and the access log's client is the address nginx saw, not one a client
forged. nginx comes from `tests/tools/get-nginx.sh` (`make test` runs it)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from serve_process import Server
from websockets.asyncio.client import connect

from voxflow.bench.arms import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NGINX = ROOT / ".tools" / "nginx" / "usr" / "sbin" / "nginx"
CONF = ROOT / "deploy" / "nginx-voxflow.conf"
SENTENCE = "The little red kite circled twice above the harbor before settling on the mast. "


def nginx_conf(folder: Path, listen: int, upstream: int) -> Path:
    """The documented server block on `listen`, proxying to `upstream`, in a minimal nginx
    config that runs as this user in the foreground with its files in `folder`."""
    block = CONF.read_text()
    assert "listen 80;" in block and "127.0.0.1:8000" in block
    block = block.replace("listen 80;", f"listen 127.0.0.1:{listen};").replace(
        "127.0.0.1:8000", f"127.0.0.1:{upstream}")
    temps = "\n".join(f"    {kind}_temp_path {folder / kind};"
                      for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = folder / "nginx.conf"
    conf.write_text(f"""daemon off;
master_process off;
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} info;
events {{ worker_connections 64; }}
http {{
    access_log off;
{temps}
{block}
}}
""")
    return conf


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """(voxflow behind nginx, nginx's URL)."""
    assert NGINX.exists(), "no nginx: run tests/tools/get-nginx.sh .tools/nginx (make test does)"
    folder = tmp_path_factory.mktemp("nginx")
    server = Server(folder)
    port = free_port()
    proc = subprocess.Popen([str(NGINX), "-p", str(folder), "-c",
                             str(nginx_conf(folder, port, server.port))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield server, url
    finally:
        proc.terminate()
        proc.wait(10)
        server.proc.terminate()
        server.wait(60)


def test_streamed_audio_passes_nginx_as_it_is_made(proxied):
    _, url = proxied
    body = {"model": "piper", "voice": "joe", "input": SENTENCE * 8, "response_format": "pcm",
            "stream": True}
    arrivals = []
    sent = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=120) as r:
        assert r.status_code == 200  # nginx acts on X-Accel-Buffering and does not pass it on
        assert "x-accel-buffering" not in r.headers
        for piece in r.iter_raw():
            arrivals.append((time.perf_counter() - sent, len(piece)))
    first, end = arrivals[0][0], arrivals[-1][0]
    total = sum(n for _, n in arrivals)
    assert total > 24000 * 2 * 30  # about 40 s of 24 kHz pcm: the whole reading
    # the first audio came long before the end, not when nginx had the whole body
    assert first < end / 3, (first, end)


def test_a_websocket_session_works_through_nginx(proxied):
    _, url = proxied

    async def session():
        async with connect(url.replace("http", "ws") + "/v1/audio/speech/stream") as ws:
            await ws.send(json.dumps({"type": "config", "model": "piper", "voice": "joe",
                                      "response_format": "pcm"}))
            await ws.send(json.dumps({"type": "text", "text": SENTENCE}))
            await ws.send(json.dumps({"type": "end"}))
            audio, events = 0, []
            async for message in ws:
                if isinstance(message, bytes):
                    audio += len(message)
                else:
                    events.append(json.loads(message)["type"])
            return audio, events, ws.close_code

    audio, events, code = asyncio.run(session())
    assert events[0] == "session.created" and events[-1] == "speech.audio.done"
    assert code == 1000 and audio > 24000 * 2 * 3


def test_a_413_comes_from_the_side_whose_limit_it_passed(proxied):
    _, url = proxied
    headers = {"Content-Type": "application/json"}
    over_voxflow = json.dumps({"model": "piper", "voice": "joe", "input": "x" * 2_000_000})
    r = httpx.post(f"{url}/v1/audio/speech", content=over_voxflow, headers=headers, timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    over_nginx = b'{"input": "' + b"x" * 27_000_000 + b'"}'
    r = httpx.post(f"{url}/v1/audio/speech", content=over_nginx, headers=headers, timeout=60)
    assert r.status_code == 413 and "nginx" in r.text  # nginx's own page: voxflow never saw it


def test_the_access_log_names_the_client_nginx_saw(proxied):
    server, url = proxied
    body = {"model": "piper", "voice": "joe", "input": "Hi.", "response_format": "pcm",
            "stream": False}
    forged = {"X-Forwarded-For": "203.0.113.7", "X-Request-Id": "via-nginx"}
    assert httpx.post(f"{url}/v1/audio/speech", json=body, headers=forged,
                      timeout=60).status_code == 200
    # straight to voxflow from loopback (a trusted proxy by default): the forwarded address
    direct = {"X-Forwarded-For": "203.0.113.8", "X-Request-Id": "direct"}
    assert httpx.post(f"{server.url}/v1/audio/speech", json=body, headers=direct,
                      timeout=60).status_code == 200
    time.sleep(0.2)
    log = server.log.read_text()
    # the client field, then the cache's (the access line's last)
    for rid, client in (("via-nginx", r"127\.0\.0\.1"), ("direct", r"203\.0\.113\.8")):
        assert re.search(rf"request_id={rid} .* client={client} cache=\S+$", log, re.M), \
            log[-2000:]
