"""`voxflow serve`'s start-up log (issue 41 item 8f): one short INFO line (models, address, the
settings changed from their defaults) instead of 2 KB of settings JSON, which goes to DEBUG;
the ready line counts the voices. `voxflow bench compare` still gets the JSON for its record."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from voxflow.bench.arms import Arm, ArmServer, free_port
from voxflow.cli import main
from voxflow.cli.startup_summary import changed_settings, summary_line
from voxflow.config import load_settings
from voxflow.logging_setup import SETTINGS_JSON_ENV
from voxflow.server.app import voices_served

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "piper.yaml")


@pytest.fixture(autouse=True)
def _quiet_serve(monkeypatch):
    """`serve` without a server: settings validated and logged, nothing started; the root
    logger's level and handlers put back after each test (the command configures them)."""
    monkeypatch.setattr("voxflow.server.shutdown.serve_app", lambda app, **kwargs: None)
    monkeypatch.setattr("voxflow.server.app.create_app", lambda settings: "app")
    monkeypatch.delenv(SETTINGS_JSON_ENV, raising=False)
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


def serve_records(caplog, *argv: str) -> list[logging.LogRecord]:
    caplog.set_level(logging.DEBUG)
    assert main(["serve", "--config", CONFIG, *argv]) == 0
    return [r for r in caplog.records if r.name == "voxflow.cli.serve"]


def test_the_info_line_is_short_and_names_what_differs(caplog) -> None:
    records = serve_records(caplog, "--port", "9123", "--set", "engine.max_inflight_requests=4",
                            "--set", "models.0.options.workers=3")
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert info == [
        "serving piper on http://127.0.0.1:9123; changed from the defaults: "
        "engine.max_inflight_requests=4, models.0.options.workers=3 (every setting at log "
        "level debug)"]
    assert len(info[0]) < 200
    # at INFO nothing else: the JSON is DEBUG, below the server's log level (info)
    assert not [r for r in records if r.getMessage().startswith("settings: ")
                and r.levelno >= logging.INFO]


def test_the_default_config_changes_nothing(caplog) -> None:
    info = [r.getMessage() for r in serve_records(caplog) if r.levelno == logging.INFO]
    assert info == ["serving piper on http://127.0.0.1:8000; changed from the defaults: none "
                    "(every setting at log level debug)"]
    assert changed_settings(load_settings(str(REPO / "configs" / "multi.yaml"))) == {}


def test_the_audio_cache_settings_are_named_when_changed() -> None:
    settings = load_settings(None, {"cache.disk_directory": "audio-cache",
                                    "cache.max_bytes": 8 << 20})
    assert changed_settings(settings) == {"cache.disk_directory": "audio-cache",
                                          "cache.max_bytes": 8 << 20}


def test_at_debug_every_setting_is_logged_as_json(caplog) -> None:
    records = serve_records(caplog, "--set", "server.log_level=debug")
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert info[0].endswith("changed from the defaults: server.log_level=debug (every setting "
                            "at log level debug)")
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert len(debug) == 1 and debug[0].startswith("settings: {")
    every = json.loads(debug[0].removeprefix("settings: "))
    assert every["server"]["max_input_chars"] == 4096
    assert every["models"][0]["options"]["default_voice"] == "joe"


def test_api_keys_are_counted_never_shown(caplog) -> None:
    records = serve_records(caplog, "--set", "server.api_keys=[sk-summary-secret-1]")
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert info == ["serving piper on http://127.0.0.1:8000; changed from the defaults: "
                    "server.api_keys=1 key (every setting at log level debug)"]
    assert not [r for r in caplog.records if "sk-summary-secret-1" in r.getMessage()]


def test_many_changes_are_counted_and_long_values_cut() -> None:
    settings = load_settings(None, {
        "server.cors_origins": [f"https://app{i}.example.com" for i in range(5)],
        **{f"engine.{k}": v for k, v in {
            "max_inflight_requests": 4, "max_queued_requests": 5, "request_timeout_s": 9.0,
            "retry_after_s": 2, "warmup": False, "isolate_seeded": False}.items()},
        "models.0.options.workers": 3, "models.0.options.intra_op_threads": 2,
        "wyoming.enabled": True}, environ={})
    line = summary_line(settings)
    assert line == (
        'serving piper on http://127.0.0.1:8000; changed from the defaults: server.cors_origins'
        '=["https://app0.example.com", "https:/..., engine.max_inflight_requests=4, '
        'engine.max_queued_requests=5, engine.request_timeout_s=9.0, engine.retry_after_s=2, '
        'engine.warmup=false, engine.isolate_seeded=false, wyoming.enabled=true, and 2 more '
        '(every setting at log level debug)')
    assert len(line) < 400  # ten changes, one of them a long list: still one short line


def test_bench_compare_arms_log_the_json_at_info(caplog, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(SETTINGS_JSON_ENV, "1")  # what ArmServer sets (checked below)
    records = serve_records(caplog)
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert len(info) == 2 and info[1].startswith('settings: {"server":{"host":"127.0.0.1",')
    monkeypatch.delenv(SETTINGS_JSON_ENV)
    arm = Arm("a", "openai", f'echo "json=${SETTINGS_JSON_ENV}" # {{port}}')
    log = tmp_path / "a.log"
    with ArmServer(arm, free_port(), log) as server:
        server.process.wait(timeout=10)
    assert log.read_text() == "json=1\n"


def test_the_ready_line_counts_the_voices_of_each_model() -> None:
    def served(*voices: str):
        return SimpleNamespace(family=SimpleNamespace(voices=dict.fromkeys(voices)))

    engine = SimpleNamespace(models={"piper": served("joe"), "kokoro": served(*"abcde"),
                                     "failed": SimpleNamespace(family=None)})
    assert voices_served(engine) == "6 voices in 2 models (piper 1, kokoro 5)"
    engine.models = {"piper": served("joe")}
    assert voices_served(engine) == "1 voice in 1 model (piper 1)"
