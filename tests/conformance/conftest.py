"""Fixtures of the conformance suite: the server under test and the reference durations.

`VOXFLOW_URL` (set by run.py, which starts one server for every client venv) names the server;
without it the session starts its own from the project's .venv (`voxflow_server.start`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import voxflow_server
from audio_checks import Reference

HERE = Path(__file__).resolve().parent
CLIENT_PACKAGES = ("pipecat-ai", "livekit-agents", "livekit-plugins-openai", "openai", "httpx",
                   "httpx2", "av")


def pytest_report_header(config) -> list[str]:
    """The venv and the client versions under test, at the top of the run."""
    versions = []
    for name in CLIENT_PACKAGES:
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return [f"conformance venv: {sys.prefix}", "clients: " + " ".join(versions)]


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Base URL (no /v1) of the voxflow server under test."""
    url = os.environ.get("VOXFLOW_URL")
    if url:
        yield url.rstrip("/")
        return
    server = voxflow_server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def reference(server_url: str) -> Reference:
    """Whole-WAV durations of each model's text (`audio_checks.Reference`)."""
    return Reference(server_url)


@pytest.fixture(scope="session")
def pinned() -> dict[str, str]:
    """The exact versions this venv's requirements file pins (the venv is
    .venv-conformance/NAME, its file requirements-NAME.txt)."""
    name = Path(sys.prefix).name
    path = HERE / f"requirements-{name}.txt"
    assert path.is_file(), f"no {path.name} for the venv {sys.prefix}"
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            package, version = line.split("==", 1)
            pins[package.strip().lower()] = version.strip()
    return pins
