"""examples/ws_stream.py where no server listens (issue 41 item 8d): one line naming the address
and how to start a server there, exit 1, no traceback; the address from --url, --port or
VOXFLOW_URL. Run as a user runs it, in a subprocess, against a port just closed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "ws_stream.py"


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args: list[str], tmp_path: Path, env: dict[str, str] | None = None):
    text = tmp_path / "text.txt"
    text.write_text("Hello there.\n")
    environ = {k: v for k, v in os.environ.items() if k != "VOXFLOW_URL"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--file", str(text), "--out", str(tmp_path / "out.pcm"),
         *args], capture_output=True, text=True, timeout=60, env={**environ, **(env or {})})


def refused(port: int, host: str = "127.0.0.1") -> str:
    return (f"no voxflow server at http://{host}:{port} (connection refused): start one with "
            f"`voxflow serve --port {port}`, or point --url/--port (or VOXFLOW_URL) at yours\n")


@pytest.mark.parametrize("how", ["--port", "--url", "VOXFLOW_URL"])
def test_no_server_there_is_one_line_and_exit_1(tmp_path, closed_port, how) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    if how == "--port":
        result = run(["--port", str(closed_port)], tmp_path)
    elif how == "--url":
        result = run(["--url", url + "/"], tmp_path)
    else:
        result = run([], tmp_path, {"VOXFLOW_URL": url})
    assert result.returncode == 1
    assert result.stderr == refused(closed_port)
    assert result.stdout == ""
    assert not (tmp_path / "out.pcm").exists()


def test_port_replaces_the_port_of_url(tmp_path, closed_port) -> None:
    result = run(["--url", "http://localhost:1", "--port", str(closed_port)], tmp_path)
    assert result.returncode == 1
    assert result.stderr == refused(closed_port, "localhost")


def test_an_unreadable_text_file_is_one_line(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--file", str(tmp_path / "none.txt"), "--out",
         str(tmp_path / "out.pcm")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (f"cannot read --file {tmp_path / 'none.txt'}: [Errno 2] No such "
                             f"file or directory: '{tmp_path / 'none.txt'}'\n")
