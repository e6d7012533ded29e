"""A stand-in OpenAI speech server for bench tests: standard library only, ready in ~0.1 s.

``python fake_speech_server.py PORT [--random]`` serves on 127.0.0.1:PORT:
- ``GET /health``: 200 ``{"status": "ready"}``;
- ``POST /v1/audio/speech``: 16-bit PCM at 8,000 Hz (``X-Sample-Rate``), 10 ms of audio per
  input character, in two writes. The samples depend only on the input and seed, unless
  ``--random``: then every answer carries fresh noise (a deliberately non-deterministic server).
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RATE = 8000
RANDOM = "--random" in sys.argv


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep the test output quiet
        pass

    def do_GET(self) -> None:
        if self.path != "/health":
            self.send_error(404)
            return
        self._send(200, b'{"status": "ready"}', "application/json")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["input"]
        seed = zlib.crc32(f"{text}|{body.get('seed')}".encode())
        rng = random.Random(os.urandom(8) if RANDOM else seed)
        n = RATE // 100 * len(text)
        pcm = struct.pack(f"<{n}h", *(rng.randint(-3000, 3000) for _ in range(n)))
        self.send_response(200)
        self.send_header("Content-Type", "audio/pcm")
        self.send_header("X-Sample-Rate", str(RATE))
        self.send_header("Content-Length", str(len(pcm)))
        self.end_headers()
        half = len(pcm) // 2 + 1  # odd: the second write starts mid-sample
        self.wfile.write(pcm[:half])
        self.wfile.flush()
        self.wfile.write(pcm[half:])

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
