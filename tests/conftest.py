"""Shared pytest fixtures."""

from pathlib import Path

import pytest
from tiny_voice import write_tiny_voice


@pytest.fixture(scope="session")
def tiny_voice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session tmp dir holding ``tiny.onnx`` + ``tiny.onnx.json`` (see tests/tiny_voice.py)."""
    d = tmp_path_factory.mktemp("tiny_voice")
    write_tiny_voice(d, name="tiny")
    return d
