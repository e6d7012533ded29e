"""A test client of `WS /v1/audio/speech/stream`: sends messages, records everything the
server sends (with arrival times) on a background thread, and reports how the socket closed."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from voxflow.bench.ws_client import stream_url


@dataclass
class Received:
    """What the server sent: JSON events and audio frames in order, with arrival times."""

    items: list[tuple[float, dict | bytes]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""

    @property
    def events(self) -> list[dict]:
        return [m for _, m in self.items if isinstance(m, dict)]

    @property
    def audio(self) -> bytes:
        return b"".join(m for _, m in self.items if isinstance(m, bytes))

    def types(self) -> list[str]:
        """Event types in order, an audio frame as "audio" (runs of frames as one)."""
        out: list[str] = []
        for _, m in self.items:
            kind = "audio" if isinstance(m, bytes) else m["type"]
            if not (kind == "audio" and out and out[-1] == "audio"):
                out.append(kind)
        return out

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]


class StreamClient:
    """One session. Use as a context manager; `finish` waits for the server's close."""

    def __init__(self, http_url: str, headers: dict[str, str] | None = None) -> None:
        # entered by hand: the connection outlives this call (websockets 17 wants connect()
        # entered, older versions return the connection itself, which enters as itself)
        self.ws: ClientConnection = connect(stream_url(http_url), additional_headers=headers,
                                            open_timeout=30).__enter__()
        self.received = Received()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        try:
            for message in self.ws:
                item = message if isinstance(message, bytes) else json.loads(message)
                self.received.items.append((time.perf_counter(), item))
        except ConnectionClosed:
            pass
        finally:
            self.received.close_code = self.ws.close_code
            self.received.close_reason = self.ws.close_reason or ""
            self._closed.set()

    def send(self, message: dict | str | bytes) -> float:
        """Send a message (a dict as JSON); returns perf_counter just before sending."""
        now = time.perf_counter()
        self.ws.send(json.dumps(message) if isinstance(message, dict) else message)
        return now

    def send_until_closed(self, messages: list) -> int:
        """Send `messages` in order, stopping at the first the server closed the socket before:
        a refusal closes it, possibly before the messages after the refused one are sent.
        Returns how many were sent."""
        for sent, message in enumerate(messages):
            try:
                self.send(message)
            except ConnectionClosed:
                return sent
        return len(messages)

    def text(self, text: str) -> float:
        return self.send({"type": "text", "text": text})

    def wait_for(self, predicate, timeout: float = 60.0) -> None:
        """Wait until `predicate(self.received)` holds (AssertionError after `timeout`)."""
        deadline = time.monotonic() + timeout
        while not predicate(self.received):
            assert not self._closed.is_set() or predicate(self.received), self.received.events
            assert time.monotonic() < deadline, self.received.events
            time.sleep(0.01)

    def finish(self, timeout: float = 120.0) -> Received:
        """Wait for the server to close the socket; returns everything received."""
        assert self._closed.wait(timeout), "the server did not close the stream"
        self._thread.join(timeout=5)
        return self.received

    def close(self) -> None:
        """Leave: close the socket from this side."""
        self.ws.close()
        self._closed.wait(10)

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc) -> None:
        self.ws.close()


def config(**fields) -> dict:
    """A config message for joe in pcm at the voice's own 22,050 Hz (so the stream's bytes are
    the model's samples, comparable with each sentence's HTTP pcm), with `fields` added or
    replaced."""
    return {"type": "config", "model": "piper", "voice": "joe", "response_format": "pcm",
            "sample_rate": "native", **fields}
