"""Issue 39: `voxflow serve --wyoming [HOST:]PORT` turns the Wyoming server on (loopback unless a
host is given), warns when it listens beyond this machine (Wyoming has no authentication), and
is refused with --ray (run in process through `main(argv)`, uvicorn and the app stubbed)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from voxflow.cli import main
from voxflow.config import ConfigError, load_settings
from voxflow.wyoming.address import wyoming_address

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO / "configs" / "piper.yaml"
WARNING = ("voxflow.cli.serve: wyoming: listening on 0.0.0.0: the Wyoming protocol has no "
           "authentication, so anyone who can reach this address can use the voices (bind "
           "wyoming.host to 127.0.0.1, or keep the port behind a firewall)")


@pytest.fixture(autouse=True)
def started(monkeypatch):
    """The settings `serve` would start the app with; the root logger put back after."""
    seen: list[object] = []
    monkeypatch.setattr("voxflow.server.shutdown.serve_app", lambda app, **kwargs: None)
    monkeypatch.setattr("voxflow.server.app.create_app", lambda settings: seen.append(settings))
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield seen
    root.setLevel(level)
    root.handlers[:] = handlers


def serve(capsys, *args: str) -> tuple[int, str]:
    code = main(["serve", "--config", str(DEFAULT_CONFIG), "--port", "0", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("value", "parsed"), [
    ("10200", (None, 10200)), ("0.0.0.0:10300", ("0.0.0.0", 10300)),
    ("[::1]:10200", ("::1", 10200)), ("localhost:0", ("localhost", 0)),
])
def test_the_address_is_port_or_host_and_port(value, parsed):
    assert wyoming_address(value) == parsed


@pytest.mark.parametrize(("value", "message"), [
    ("ten", "'ten' is not [HOST:]PORT"), ("h:70000", "port 70000 is outside 0..65535"),
])
def test_a_bad_address_is_a_usage_error(value, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message.replace("[", r"\[")):
        wyoming_address(value)


def test_the_flag_enables_wyoming_on_loopback_by_default(capsys, started):
    code, err = serve(capsys, "--wyoming", "0")
    assert code == 0, err
    (settings,) = started
    assert (settings.wyoming.enabled, settings.wyoming.host, settings.wyoming.port) == (
        True, "127.0.0.1", 0)
    assert "WARNING" not in err


def test_another_address_than_loopback_warns(capsys, started):
    code, err = serve(capsys, "--wyoming", "0.0.0.0:0")
    assert code == 0, err
    assert [line for line in err.splitlines() if " WARNING " in line][-1].endswith(WARNING)


def test_without_the_flag_wyoming_is_off(capsys, started):
    assert serve(capsys)[0] == 0
    assert started[0].wyoming.enabled is False


def test_ray_refuses_wyoming(capsys):
    code, err = serve(capsys, "--ray", "--wyoming", "10200")
    assert code == 2 and "--ray does not serve Wyoming" in err


def test_settings_check_the_port_and_unknown_keys():
    with pytest.raises(ConfigError, match="wyoming.port"):
        load_settings(None, {"wyoming.port": 70000}, environ={})
    with pytest.raises(ConfigError, match="wyoming.nope"):
        load_settings(None, {"wyoming.nope": 1}, environ={})
