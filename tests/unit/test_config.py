from pathlib import Path

import pytest
import yaml

from voxflow.config import ConfigError, Settings, load_settings, parse_override
from voxflow.models.piper.settings import PiperSettings


def _write(tmp_path: Path, tree) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(tree) if not isinstance(tree, str) else tree)
    return path


def _error(path=None, overrides=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path, overrides)
    return str(info.value)


def test_defaults_serve_one_piper_model():
    s = load_settings(None)
    assert [(m.name, m.family) for m in s.models] == [("piper", "piper")]
    assert s.models[0].options == PiperSettings()
    assert s.models[0].options.include_default_voice is True
    assert s.server.port == 8000 and s.server.host == "127.0.0.1"
    assert s.engine.max_inflight_requests == 32 and s.engine.isolate_seeded is True


def test_yaml_file_round_trip(tmp_path):
    s = load_settings(
        None,
        {"server.port": 9100, "engine.request_timeout_s": 7.5, "models.0.options.workers": 3},
    )
    path = _write(tmp_path, s.model_dump(mode="json"))
    again = load_settings(path)
    assert again == s
    assert again.server.port == 9100 and again.engine.request_timeout_s == 7.5
    assert isinstance(again.models[0].options, PiperSettings)
    assert again.models[0].options.workers == 3


def test_file_values_are_read(tmp_path):
    tree = {
        "server": {"port": 8123, "log_level": "debug"},
        "engine": {"max_queued_requests": 0},
        "models": [
            {"name": "a", "family": "piper", "options": {"max_batch_size": 4}},
            {"name": "b", "family": "piper"},
        ],
    }
    s = load_settings(_write(tmp_path, tree))
    assert s.server.port == 8123 and s.server.log_level == "debug"
    assert s.engine.max_queued_requests == 0
    assert [m.name for m in s.models] == ["a", "b"]
    assert s.models[0].options.max_batch_size == 4
    assert s.models[1].options == PiperSettings()


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"bogus": 1}, "bogus"),
        ({"server.bogus": 1}, "server.bogus"),
        ({"engine.bogus": 1}, "engine.bogus"),
        ({"models.0.bogus": 1}, "models[0].bogus"),
    ],
)
def test_unknown_key_is_an_error_naming_it(overrides, path):
    msg = _error(None, overrides)
    assert f"{path}: Extra inputs are not permitted" in msg


def test_unknown_key_in_model_options_names_its_full_path():
    # config.py promises paths like models[0].options.intra_op_threads; the options error
    # must not read as if the key were on the model itself (models[0].bogus).
    msg = _error(None, {"models.0.options.bogus": 1})
    assert "models[0].options.bogus" in msg
    assert "Extra inputs are not permitted" in msg


def test_unknown_key_in_file_is_an_error(tmp_path):
    tree = {"models": [{"name": "a", "family": "piper"}], "engine": {"max_inflight": 3}}
    assert "engine.max_inflight: Extra inputs are not permitted" in _error(_write(tmp_path, tree))


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"server.port": "abc"}, "server.port: Input should be a valid integer"),
        ({"server.port": 70000}, "server.port: Input should be less than or equal to 65535"),
        ({"server.log_level": "loud"}, "server.log_level: Input should be"),
        ({"engine.max_inflight_requests": 0}, "engine.max_inflight_requests: Input should be"),
        ({"engine.request_timeout_s": 0}, "engine.request_timeout_s: Input should be greater"),
        ({"models.0.name": ""}, "models[0].name: String should have at least 1 character"),
    ],
)
def test_wrong_value_names_the_field(overrides, path):
    assert path in _error(None, overrides)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "models[0].options.intra_op_threads: Input should be greater than or equal to 1"),
        ("many", "models[0].options.intra_op_threads: Input should be a valid integer"),
    ],
)
def test_wrong_option_type_names_the_field_path_with_options(value, expected):
    assert expected in _error(None, {"models.0.options.intra_op_threads": value})


def test_unknown_family_names_the_known_ones():
    msg = _error(None, {"models.0.family": "vits9000"})
    assert "models[0]" in msg
    assert "unknown model family 'vits9000'; known: " in msg
    assert "piper" in msg.rsplit("known: ", 1)[1]


def test_duplicate_model_names_are_an_error(tmp_path):
    tree = {
        "models": [
            {"name": "dup", "family": "piper"},
            {"name": "solo", "family": "piper"},
            {"name": "dup", "family": "piper"},
        ]
    }
    msg = _error(_write(tmp_path, tree))
    assert "model names must be unique, repeated: dup" in msg
    assert "solo" not in msg


def test_no_models_is_an_error(tmp_path):
    assert "models: List should have at least 1 item" in _error(
        _write(tmp_path, {"models": []})
    )



def test_file_without_models_serves_the_default_model(tmp_path):
    settings = load_settings(_write(tmp_path, {"server": {"port": 1}}))
    assert settings.server.port == 1
    assert [(m.name, m.family) for m in settings.models] == [("piper", "piper")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server.port=9000", ("server.port", 9000)),
        ("server.host=0.0.0.0", ("server.host", "0.0.0.0")),
        ("engine.warmup=false", ("engine.warmup", False)),
        ("engine.request_timeout_s=2.5", ("engine.request_timeout_s", 2.5)),
        ("models.0.options.voices_dir=null", ("models.0.options.voices_dir", None)),
        (" server.port = 9000 ", ("server.port", 9000)),
        ("a.b=x=y", ("a.b", "x=y")),
    ],
)
def test_parse_override(text, expected):
    assert parse_override(text) == expected


@pytest.mark.parametrize("text", ["server.port", "=3", " =3", ""])
def test_parse_override_without_key_or_equals_is_an_error(text):
    with pytest.raises(ConfigError, match="section.field=value"):
        parse_override(text)


def test_overrides_apply_after_the_file(tmp_path):
    tree = {"server": {"port": 8001}, "models": [{"name": "a", "family": "piper"}]}
    path = _write(tmp_path, tree)
    s = load_settings(path, dict([parse_override("server.port=9000")]))
    assert s.server.port == 9000
    assert load_settings(path).server.port == 8001


def test_override_by_list_index_path():
    s = load_settings(None, dict([parse_override("models.0.options.workers=3")]))
    assert s.models[0].options.workers == 3
    assert s.models[0].options.max_batch_size == PiperSettings().max_batch_size


@pytest.mark.parametrize("key", ["models.3.options.workers", "models.x.name", "server.port.x"])
def test_override_that_does_not_fit_is_a_config_error(tmp_path, key):
    path = _write(tmp_path, {"server": {"port": 1}, "models": [{"name": "a", "family": "piper"}]})
    with pytest.raises(ConfigError):
        load_settings(path, {key: 3})


def test_missing_file():
    msg = _error("/nonexistent/voxflow.yaml")
    assert "config file not found" in msg and "/nonexistent/voxflow.yaml" in msg


def test_invalid_yaml(tmp_path):
    msg = _error(_write(tmp_path, "server: [port: 1\n"))
    assert "is not valid YAML" in msg and "deploy.yaml" in msg


def test_top_level_must_be_a_mapping(tmp_path):
    assert "must hold a mapping" in _error(_write(tmp_path, "- a\n- b\n"))


def test_piper_first_segment_longer_than_max_segment():
    msg = _error(
        None,
        {"models.0.options.max_segment_chars": 100, "models.0.options.first_segment_chars": 101},
    )
    assert "models[0]" in msg
    assert "first_segment_chars must not exceed max_segment_chars" in msg
    ok = load_settings(
        None,
        {"models.0.options.max_segment_chars": 100, "models.0.options.first_segment_chars": 100},
    )
    assert ok.models[0].options.first_segment_chars == 100


def test_piper_without_default_voice_needs_voices_dir(tmp_path):
    msg = _error(None, {"models.0.options.include_default_voice": False})
    assert "no voices: set voices_dir or include_default_voice: true" in msg
    s = load_settings(
        None,
        {"models.0.options.include_default_voice": False, "models.0.options.voices_dir": tmp_path},
    )
    assert s.models[0].options.voices_dir == tmp_path


def test_piper_voices_dir_must_exist(tmp_path):
    missing = tmp_path / "nope"
    msg = _error(None, {"models.0.options.voices_dir": str(missing)})
    assert f"voices_dir {missing} is not a directory" in msg


def test_piper_settings_rules_direct():
    with pytest.raises(ValueError, match="first_segment_chars must not exceed"):
        PiperSettings(max_segment_chars=50, first_segment_chars=60)
    assert PiperSettings(max_segment_chars=50, first_segment_chars=None).first_segment_chars is None
    with pytest.raises(ValueError, match="no voices"):
        PiperSettings(include_default_voice=False)


def test_settings_are_frozen():
    s = load_settings(None)
    with pytest.raises(ValueError):
        s.server.port = 1
    assert isinstance(s, Settings)


def test_running_dry_below_the_continuation_lead_is_an_error():
    message = _error(overrides={"engine.running_dry_s": 0.3})
    assert "running_dry_s (0.3) must be at least continuation_lead_s (0.5)" in message
    s = load_settings(None, {"engine.running_dry_s": 0.5})
    assert s.engine.running_dry_s == 0.5 and s.engine.late_first_yields is True


def test_the_audio_cache_section_defaults_and_refusals():
    cache = load_settings(None, {}).cache
    assert (cache.enabled, cache.max_bytes, cache.max_entry_bytes) == (True, 64 << 20, 4 << 20)
    assert "cache.max_bytes" in _error(None, {"cache.max_bytes": -1})
    message = _error(None, {"cache.max_bytes": 1000, "cache.max_entry_bytes": 2000})
    assert "max_entry_bytes (2000) must be at most max_bytes (1000)" in message
    assert "cache.max_entry_bytes" in _error(None, {"cache.max_entry_bytes": 0})
    assert load_settings(None, {"cache.max_bytes": 0}).cache.max_bytes == 0  # stores nothing


def test_the_audio_cache_disk_tier_is_off_by_default_and_must_fit_an_entry(tmp_path):
    cache = load_settings(None, {}).cache
    assert (cache.disk_directory, cache.disk_max_bytes) == (None, 1 << 30)
    on = load_settings(None, {"cache.disk_directory": str(tmp_path),
                              "cache.disk_max_bytes": 8 << 20}).cache
    assert (on.disk_directory, on.disk_max_bytes) == (tmp_path, 8 << 20)
    assert "cache.disk_max_bytes" in _error(None, {"cache.disk_max_bytes": 0})
    message = _error(None, {"cache.disk_directory": str(tmp_path), "cache.disk_max_bytes": 1000,
                            "cache.max_entry_bytes": 2000})
    assert "max_entry_bytes (2000) must be at most disk_max_bytes (1000)" in message
    # without a folder the disk bound is unused, so it does not have to fit an entry
    assert load_settings(None, {"cache.disk_max_bytes": 1000}).cache.disk_max_bytes == 1000
