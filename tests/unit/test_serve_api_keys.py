"""Issue 14 item 2: `voxflow serve` warns when it would listen beyond this machine without API
keys, and never logs a key (run in process through `main(argv)`, uvicorn and the app stubbed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from voxflow.api_keys import ENV_VAR
from voxflow.cli import main
from voxflow.cli.serve import is_loopback

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "configs" / "piper.yaml"
KEY = "sk-serve-secret-42"
WARNING = "without API keys: anyone who can reach this address can use the API"


@pytest.fixture(autouse=True)
def _stubbed_server(monkeypatch):
    """No environment keys, no real server; the root logger put back after each test."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    started: list[object] = []
    monkeypatch.setattr("voxflow.server.shutdown.serve_app",
                        lambda app, **kwargs: started.append(app))
    monkeypatch.setattr("voxflow.server.app.create_app", lambda settings: settings)
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield started
    root.setLevel(level)
    root.handlers[:] = handlers


def serve(capsys, *args: str) -> str:
    code = main(["serve", "--config", str(DEFAULT_CONFIG), "--port", "0", *args])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if " WARNING " in line]


def test_warns_on_all_interfaces_without_keys(capsys) -> None:
    lines = warnings(serve(capsys, "--host", "0.0.0.0"))
    assert len(lines) == 1
    assert lines[0].endswith(
        "voxflow.cli.serve: listening on 0.0.0.0 without API keys: anyone who can reach this "
        "address can use the API (and delete saved voices); set server.api_keys, "
        "server.api_keys_file or VOXFLOW_API_KEYS (docs/api.md, API keys)"
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_no_warning_on_loopback(capsys, host) -> None:
    assert warnings(serve(capsys, "--host", host)) == []


def test_no_warning_with_keys_and_the_key_is_never_logged(capsys, monkeypatch, tmp_path) -> None:
    err = serve(capsys, "--host", "0.0.0.0", "--set", f"server.api_keys=[{KEY}]")
    assert warnings(err) == [] and KEY not in err
    assert "server.api_keys=1 key" in err  # the start-up line counts the keys, never shows one
    path = tmp_path / "keys"
    path.write_text(KEY + "\n")
    err = serve(capsys, "--host", "0.0.0.0", "--set", f"server.api_keys_file={path}")
    assert warnings(err) == [] and KEY not in err
    monkeypatch.setenv(ENV_VAR, KEY)
    err = serve(capsys, "--host", "0.0.0.0")
    assert warnings(err) == [] and KEY not in err


def test_a_missing_key_file_stops_serve_before_it_starts(capsys, _stubbed_server, tmp_path) -> None:
    missing = tmp_path / "nope.txt"
    code = main(["serve", "--config", str(DEFAULT_CONFIG),
                 "--set", f"server.api_keys_file={missing}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"voxflow: invalid configuration: cannot read the API key file {missing}: "
                   "No such file or directory\n")
    assert _stubbed_server == []


@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False),
    ("192.168.1.10", False), ("example.com", False), ("", False),
])
def test_is_loopback(host, expected) -> None:
    assert is_loopback(host) is expected
