"""Stream text to voxflow word by word, as an LLM would, and save the speech as it comes back.

    .venv/bin/python examples/ws_stream.py --file benchmarks/data/sentences.txt --delay-ms 50 \
        --out out.pcm

Sends a config message, then the file's words (each with the whitespace before it) one text
message every `--delay-ms` milliseconds, then an end message, over
`WS /v1/audio/speech/stream` (docs/api.md, "Streaming text input"). Meanwhile it writes each
binary audio frame to `--out` and prints the events: which sentence starts when, the time to
first audio counted from the first word sent, and the totals at the end. Needs only the
`websockets` package (a voxflow dependency). A session the server refuses (a bad config, a
wrong API key) or closes early ends with its error printed and ``closed CODE REASON``, exit 1.

The server is `--url` (default: the environment's ``VOXFLOW_URL``, else http://127.0.0.1:8000),
with `--port` replacing its port. Where nothing listens, one line says so and how to start a
server there, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

DEFAULT_URL = "http://127.0.0.1:8000"


def tokens(text: str) -> list[str]:
    """`text` as words, each with the whitespace before it (trailing whitespace dropped)."""
    return re.findall(r"\s*\S+", text)


async def send_text(ws, words: list[str], delay_s: float) -> None:
    """Send the words one message each, then the end; stops quietly when the server has
    closed the session (the receiver reports why)."""
    try:
        for i, word in enumerate(words):
            if i:
                await asyncio.sleep(delay_s)
            await ws.send(json.dumps({"type": "text", "text": word}))
        await ws.send(json.dumps({"type": "end"}))
    except ConnectionClosed:
        pass


async def receive(ws, out, started: list[float]) -> tuple[int, str]:
    """Write audio frames to `out`, print events; returns the close code and reason."""
    first_audio = None
    try:
        async for message in ws:
            if isinstance(message, bytes):
                if first_audio is None and started:
                    first_audio = time.perf_counter()
                    print(f"first audio {first_audio - started[0]:.3f} s after the first word",
                          file=sys.stderr)
                out.write(message)
                continue
            event = json.loads(message)
            kind = event["type"]
            if kind == "segment.start":
                print(f"segment {event['segment']} at {event['audio_start']:.2f} s: "
                      f"{event['text']!r}", file=sys.stderr)
            elif kind in ("session.created", "speech.audio.done", "error"):
                print(json.dumps(event), file=sys.stderr)
    except ConnectionClosed:
        pass  # closed with an error code: its code and reason are returned below
    return ws.close_code or 0, ws.close_reason or ""


def server_url(url: str, port: int | None) -> str:
    """`url` without a trailing slash, its port replaced by `port` when given."""
    url = url.rstrip("/")
    if port is None:
        return url
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    return parts._replace(netloc=f"{host}:{port}").geturl()


def no_server(url: str, exc: OSError) -> str:
    """The one line for a server that cannot be reached at `url`: why, and (on this machine)
    the command that starts one there."""
    parts = urlsplit(url)
    # a name with several addresses (localhost: ::1 and 127.0.0.1) fails with one OSError
    # listing each address's error
    refused = isinstance(exc, ConnectionRefusedError) or f"[Errno {errno.ECONNREFUSED}]" in str(exc)
    reason = "connection refused" if refused else exc.strerror or str(exc) or type(exc).__name__
    if parts.hostname in ("127.0.0.1", "localhost", "::1"):
        start = f"start one with `voxflow serve --port {parts.port or 8000}`"
    else:
        start = "check that one runs there"
    return f"no voxflow server at {url} ({reason}): {start}, or point --url/--port (or " \
        "VOXFLOW_URL) at yours"


async def main(args: argparse.Namespace) -> int:
    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read --file {args.file}: {exc}", file=sys.stderr)
        return 1
    words = tokens(text)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    base = server_url(args.url, args.port)
    url = base.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    config = {"type": "config", "model": args.model, "voice": args.voice,
              "response_format": args.format}
    if args.seed is not None:
        config["seed"] = args.seed
    try:
        async with connect(url, additional_headers=headers, max_size=None) as ws:
            await ws.send(json.dumps(config))
            started: list[float] = []
            with open(args.out, "wb") as out:
                receiver = asyncio.create_task(receive(ws, out, started))
                started.append(time.perf_counter())
                await send_text(ws, words, args.delay_ms / 1000)
                code, reason = await receiver
    except InvalidStatus as exc:  # refused at the handshake: a missing or wrong API key
        print(f"refused: HTTP {exc.response.status_code} (is --api-key needed?)",
              file=sys.stderr)
        return 1
    except InvalidURI:
        print(f"--url {base} is not an http:// or https:// address", file=sys.stderr)
        return 1
    except OSError as exc:  # nothing listens there, or the host is unknown or unreachable
        print(no_server(base, exc), file=sys.stderr)
        return 1
    print(f"closed {code} {reason}; wrote {args.out}", file=sys.stderr)
    return 0 if code == 1000 else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--file", required=True, help="UTF-8 text to stream")
    p.add_argument("--delay-ms", type=float, default=50.0, help="pause between words (ms)")
    p.add_argument("--out", required=True, help="where the audio goes")
    p.add_argument("--url", default=os.environ.get("VOXFLOW_URL") or DEFAULT_URL,
                   help=f"the voxflow server (default: $VOXFLOW_URL, else {DEFAULT_URL})")
    p.add_argument("--port", type=int, default=None,
                   help="the server's port, replacing the one of --url")
    p.add_argument("--model", default="piper")
    p.add_argument("--voice", default="joe")
    p.add_argument("--format", default="pcm", help="pcm (16-bit mono), wav, mp3, ...")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--api-key", default=None, help="if the server needs one")
    return p


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parser().parse_args())))
