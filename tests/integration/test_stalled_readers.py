"""Issue 40 item 2: a client that opens a long streamed request and reads nothing. Its
synthesis waits once it runs `server.max_buffered_audio_s` ahead of what was sent, after
`server.client_stall_timeout_s` its request is cancelled and logged and its response ends
incomplete, and other clients are served meanwhile. A real `voxflow serve` (the default Piper
voice) and a raw socket whose receive buffer is kept small, so the server's writes block as
soon as the kernel's buffers are full."""

from __future__ import annotations

import json
import re
import socket
import time

import httpx
import pytest
from serve_process import Server

pytestmark = pytest.mark.integration

SENTENCE = "The little red kite circled twice above the harbor before settling on the mast. "
LONG = SENTENCE * 40  # 40 segments, minutes of audio


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one sample of `/metrics` (0.0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.startswith(name + "{") and all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
        if head == name and not want:
            return float(value)
    return 0.0


def open_stalled(port: int, text: str) -> socket.socket:
    """A connection that asks for `text` streamed as PCM and then reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"model": "piper", "voice": "joe", "input": text,
                       "response_format": "pcm", "stream": True}).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: voxflow\r\n"
                 b"Content-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def read_to_end(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    data = bytearray()
    while chunk := sock.recv(65536):
        data += chunk
    return bytes(data)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, "server.max_buffered_audio_s=3", "server.client_stall_timeout_s=2")
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()


def test_a_client_that_reads_nothing_holds_synthesis_then_is_cancelled(server):
    sock = open_stalled(server.port, LONG)
    try:
        started = time.monotonic()
        other = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
            "model": "piper", "voice": "joe", "input": SENTENCE, "response_format": "pcm",
            "stream": False})
        deadline = time.monotonic() + 60
        while metric(server.url, "voxflow_cancellations_total", reason="stalled") < 1:
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.2)
        stalled_after = time.monotonic() - started
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        body = read_to_end(sock, 30)
    finally:
        sock.close()
    log = server.log.read_text()
    assert other.status_code == 200 and len(other.content) > 22050 * 2  # over a second
    assert stalled_after < 30
    assert health["inflight_requests"] == 0
    assert metric(server.url, "voxflow_requests_total", model="piper", status="stalled") == 1
    match = re.search(r"the client read nothing for 2 s \(([\d.]+) s of audio sent, ([\d.]+) s "
                      r"made\); cancelled", log)
    assert match, log
    # The kernel's socket buffers took a minute of PCM before the writes blocked; synthesis
    # then stopped 3 s (and a segment of up to 300 characters, some 15 s, in progress) ahead
    # of it, far short of the request's 4 minutes.
    sent, made = float(match[1]), float(match[2])
    assert made - sent < 3 + 15 and made < 150, (sent, made)
    head, _, chunked = body.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert not chunked.endswith(b"0\r\n\r\n")  # incomplete: no last chunk
