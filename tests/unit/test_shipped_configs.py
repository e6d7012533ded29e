"""What the default deployment does not serve points at the shipped config that does (issue 41
item 8c): ``--model kokoro`` and Japanese text on the default Piper config name
``configs/multi.yaml`` and the command that starts it, on the command line and in the server's
OpenAI-shaped errors alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fakes import register_fake_family
from fastapi.testclient import TestClient

from voxflow.cli import main
from voxflow.config import load_settings
from voxflow.server.app import create_app
from voxflow.shipped_configs import (
    CONFIG_DIR,
    LANGUAGE_HINTS,
    configs_serving,
    served_elsewhere,
    shipped_configs,
)

REPO = Path(__file__).resolve().parents[2]
PIPER = str(REPO / "configs" / "piper.yaml")
JAPANESE = "今日はいい天気ですね。"
KOKORO_HINT = (
    "Model 'kokoro' reads Japanese: configs/multi.yaml serves it (voxflow serve --config "
    "configs/multi.yaml, or voxflow speak --config configs/multi.yaml --model kokoro).")


def test_the_checkouts_configs_are_read_with_their_models_and_aliases() -> None:
    assert CONFIG_DIR == REPO / "configs"
    by_path = {c.path: c for c in shipped_configs()}
    assert by_path["configs/multi.yaml"].models == ("piper", "kokoro")
    assert "tts-1" in by_path["configs/piper.yaml"].names  # an alias counts
    assert [c.path for c in configs_serving("kokoro")] == ["configs/multi.yaml"]
    # fewest models first: the config that serves just Piper leads
    assert [c.path for c in configs_serving("tts-1")][0] == "configs/piper.yaml"
    assert configs_serving("no-such-model") == []
    assert served_elsewhere("no-such-model", "voxflow serve --config {config}") == ""


def test_each_language_hint_names_a_config_that_serves_a_model_reading_it() -> None:
    from voxflow.models.kokoro.frontend import LANGUAGES

    for hint in LANGUAGE_HINTS:
        tree = yaml.safe_load((REPO / hint.config).read_text())
        families = {m["name"]: m["family"] for m in tree["models"]}
        assert families[hint.model] == "kokoro"
        assert hint.tag in LANGUAGES


# ---- the command line -----------------------------------------------------------------------
@pytest.mark.parametrize(("command", "run"), [
    ("speak", "voxflow speak --config configs/multi.yaml --model kokoro ..."),
    ("voices", "voxflow voices --config configs/multi.yaml --model kokoro"),
])
def test_cli_model_kokoro_on_the_default_config_names_multi_yaml(capsys, tmp_path, command,
                                                                  run) -> None:
    argv = [command, "--config", PIPER, "--model", "kokoro"]
    if command == "speak":
        argv += ["Hello.", "-o", str(tmp_path / "x.wav")]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "voxflow: model 'kokoro' is not served by this config (its models: piper); "
        f"configs/multi.yaml serves piper and kokoro: {run}\n")


def test_cli_japanese_to_piper_says_so_and_names_kokoro(capsys, tmp_path, tiny_voice_dir):
    argv = ["speak", "--config", PIPER, "--set", f"models.0.options.voices_dir={tiny_voice_dir}",
            "--set", "models.0.options.include_default_voice=false",
            "--set", "models.0.options.default_voice=tiny", "--set", "models.0.voice_aliases={}",
            JAPANESE, "-o", str(tmp_path / "x.wav")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "voxflow: input is mostly in Hiragana and Han scripts (10 of 10 letters), which voice "
        "'tiny' of model 'piper' (en-US) cannot read. No served voice reads Hiragana and Han. "
        f"{KOKORO_HINT}\n")
    assert not (tmp_path / "x.wav").exists()


# ---- the server -----------------------------------------------------------------------------
def openai_error(r, status: int, code: str, param: str) -> str:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code,
                                                               param)
    return error["message"]


def test_server_unknown_model_kokoro_names_the_config_that_serves_it() -> None:
    client = TestClient(create_app(load_settings(PIPER, environ={})),
                        raise_server_exceptions=False)
    message = openai_error(client.get("/v1/models/kokoro"), 404, "model_not_found", "model")
    assert message == (
        "The model 'kokoro' does not exist. Served models: piper, gpt-4o-mini-tts (alias of "
        "piper), tts-1 (alias of piper), tts-1-hd (alias of piper). configs/multi.yaml serves "
        "piper and kokoro: voxflow serve --config configs/multi.yaml.")
    speech = client.post("/v1/audio/speech", json={"model": "kokoro", "voice": "alloy",
                                                   "input": "Hello."})
    assert openai_error(speech, 404, "model_not_found", "model") == message


def fake_app(monkeypatch, name: str):
    register_fake_family(monkeypatch)
    settings = load_settings(None, {"engine.warmup": False, "models": [
        {"name": name, "family": "fake", "options": {}}]}, environ={})  # en-US voices
    return create_app(settings)


def test_server_japanese_to_an_english_voice_is_a_400_naming_kokoro(monkeypatch) -> None:
    with TestClient(fake_app(monkeypatch, "piper")) as client:
        r = client.post("/v1/audio/speech", json={"model": "piper", "voice": "alice",
                                                  "input": JAPANESE})
    assert openai_error(r, 400, "unsupported_script", "input") == (
        "input is mostly in Hiragana and Han scripts (10 of 10 letters), which voice 'alice' "
        f"of model 'piper' (en-US) cannot read. No served voice reads Hiragana and Han. "
        f"{KOKORO_HINT}")


def test_no_kokoro_hint_where_a_model_named_kokoro_is_served(monkeypatch) -> None:
    with TestClient(fake_app(monkeypatch, "kokoro")) as client:
        r = client.post("/v1/audio/speech", json={"model": "kokoro", "voice": "alice",
                                                  "input": JAPANESE})
    assert openai_error(r, 400, "unsupported_script", "input").endswith(
        "No served voice reads Hiragana and Han.")
