"""An unknown settings key names the valid key it most likely meant (issue 41 item 8b), in a
config file, a ``--set`` override, a family's options and the ``ray:`` section alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxflow.cli import main
from voxflow.config import ConfigError, EngineSettings, Settings, load_settings
from voxflow.config_suggest import did_you_mean, valid_keys
from voxflow.ray.settings import ray_settings


def error_of(path=None, overrides=None) -> str:
    with pytest.raises(ConfigError) as info:
        ray_settings(load_settings(path, overrides, environ={}))
    return str(info.value)


def test_a_typo_in_a_config_file_names_the_key_it_meant(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("engine:\n  max_inflight_request: 4\n")
    assert error_of(path) == (
        "invalid configuration: engine.max_inflight_request: Extra inputs are not permitted; "
        "did you mean 'max_inflight_requests'?")


@pytest.mark.parametrize(("key", "expected"), [
    ("enigne.warmup", "enigne: Extra inputs are not permitted; did you mean 'engine'?"),
    ("server.portt", "server.portt: Extra inputs are not permitted; did you mean 'port'?"),
    ("wyoming.zerconf", "wyoming.zerconf: Extra inputs are not permitted; "
                        "did you mean 'zeroconf'?"),
    ("models.0.voice_alias", "models[0].voice_alias: Extra inputs are not permitted; "
                             "did you mean 'voice_aliases'?"),
    # a family's own options (PiperSettings), checked after the model's fields
    ("models.0.options.voice_dir", "models[0].options.voice_dir: Extra inputs are not "
                                   "permitted; did you mean 'voices_dir'?"),
    # the ray: section (RaySettings); a tie names each of the equally close keys
    ("ray.replicas", "ray.replicas: Extra inputs are not permitted; did you mean "
                     "'replica_gpus', 'replica_cpus' or 'min_replicas'?"),
    # nothing close: pydantic's words alone
    ("engine.bogus", "engine.bogus: Extra inputs are not permitted"),
])
def test_set_overrides_name_the_closest_key(key, expected) -> None:
    assert error_of(None, {key: 1}) == f"invalid configuration: {expected}"


def test_the_cli_prints_the_suggestion_and_exits_2(capsys) -> None:
    assert main(["voices", "--set", "engine.max_inflight_request=4"]) == 2
    assert capsys.readouterr().err == (
        "voxflow: invalid configuration: engine.max_inflight_request: Extra inputs are not "
        "permitted; did you mean 'max_inflight_requests'?\n")


def test_valid_keys_follow_the_location_through_lists_and_models() -> None:
    assert valid_keys(Settings, ()) == list(Settings.model_fields)
    assert valid_keys(Settings, ("engine",)) == list(EngineSettings.model_fields)
    assert "voice_aliases" in valid_keys(Settings, ("models", 0))
    assert valid_keys(Settings, ("models", 0, "options")) == []  # Any: the family's, not here
    assert did_you_mean(Settings, ("models", 0)) == ""  # not a key
