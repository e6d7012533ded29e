"""The clients under test are exactly the versions this venv's requirements file pins."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

CLIENTS = ("pipecat-ai", "livekit-agents", "livekit-plugins-openai", "openai")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("package", CLIENTS)
def test_client_version_is_pinned(pinned, package):
    """Each client library is installed at its pinned version."""
    pins = {_normal(name): version for name, version in pinned.items()}
    assert package in pins, f"{package} is not pinned in this venv's requirements"
    assert metadata.version(package) == pins[package]
