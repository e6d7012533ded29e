"""Issue 14 item 2: where API keys come from (`server.api_keys`, `server.api_keys_file`,
VOXFLOW_API_KEYS), how they merge, and the start-up errors of a bad source, which never quote
a key."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxflow.api_keys import ENV_VAR, collect_api_keys, key_problem
from voxflow.config import ConfigError, load_settings

KEY = "sk-config-1111"
FILE_KEY = "sk-file-2222"
ENV_KEY = "sk-env-3333"


def keys_of(settings) -> list[str]:
    return [key.get_secret_value() for key in settings.server.api_keys]


def key_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text(text)
    return path


def test_no_keys_by_default() -> None:
    settings = load_settings(None, environ={})
    assert keys_of(settings) == []
    assert settings.server.api_keys_file is None
    assert settings.server.metrics_public is False


def test_the_three_sources_merge_in_order_each_key_once(tmp_path) -> None:
    path = key_file(tmp_path, f"# deploy keys\n\n  {FILE_KEY}  \n{KEY}\n   # indented comment\n")
    settings = load_settings(
        None, {"server.api_keys": [KEY], "server.api_keys_file": str(path)},
        environ={ENV_VAR: f" {ENV_KEY} ,, {FILE_KEY}"},
    )
    assert keys_of(settings) == [KEY, FILE_KEY, ENV_KEY]
    assert settings.server.api_keys_file == path


def test_env_var_alone_turns_keys_on_and_is_read_from_os_environ(monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, ENV_KEY)
    assert keys_of(load_settings(None)) == [ENV_KEY]
    monkeypatch.delenv(ENV_VAR)
    assert keys_of(load_settings(None)) == []


def test_keys_are_masked_when_the_settings_are_dumped(tmp_path) -> None:
    path = key_file(tmp_path, FILE_KEY + "\n")
    settings = load_settings(None, {"server.api_keys": [KEY], "server.api_keys_file": str(path)},
                             environ={ENV_VAR: ENV_KEY})
    text = settings.model_dump_json() + repr(settings) + str(settings.server)
    for key in (KEY, FILE_KEY, ENV_KEY):
        assert key not in text
    assert '"api_keys":["**********","**********","**********"]' in settings.model_dump_json()


@pytest.mark.parametrize(("text", "message"), [
    ("# only a comment\n\n", "holds no key (one key per line; # starts a comment)"),
    ("", "holds no key"),
    (f"{KEY}\nsk-with space-9\n", "line 2: a key must be printable ASCII without spaces"),
    (f"{KEY}\nsk-ключ\n", "line 2: a key must be printable ASCII without spaces"),
    ("x" * 257 + "\n", "line 1: a key must be at most 256 characters"),
], ids=["comments-only", "empty", "space", "non-ascii", "too-long"])
def test_a_bad_key_file_stops_start_up_without_quoting_a_key(tmp_path, text, message) -> None:
    path = key_file(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_settings(None, {"server.api_keys_file": str(path)}, environ={})
    assert str(err.value).startswith(f"invalid configuration: API key file {path}") or (
        str(err.value).startswith(f"invalid configuration: the API key file {path}"))
    assert message in str(err.value)
    for secret in ("sk-with", "ключ", KEY, "xxxx"):
        assert secret not in str(err.value)


def test_a_missing_key_file_stops_start_up(tmp_path) -> None:
    path = tmp_path / "absent.txt"
    with pytest.raises(ConfigError) as err:
        load_settings(None, {"server.api_keys_file": str(path)}, environ={})
    assert str(err.value) == (
        f"invalid configuration: cannot read the API key file {path}: No such file or directory"
    )
    with pytest.raises(ConfigError, match="cannot read the API key file .*: Is a directory"):
        load_settings(None, {"server.api_keys_file": str(tmp_path)}, environ={})


@pytest.mark.parametrize(("value", "message"), [
    ("", f"{ENV_VAR} is set but holds no key"),
    (" , ,", f"{ENV_VAR} is set but holds no key"),
    (f"{ENV_KEY},sk bad", f"{ENV_VAR}, key 2: a key must be printable ASCII without spaces"),
])
def test_a_bad_env_var_stops_start_up(value, message) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, environ={ENV_VAR: value})
    assert message in str(err.value)
    assert ENV_KEY not in str(err.value) and "sk bad" not in str(err.value)


def test_api_keys_must_be_a_list_of_good_keys_and_errors_never_quote_them() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, {"server.api_keys": "sk-bare-string"}, environ={})
    assert "server.api_keys: Value error, must be a list of keys" in str(err.value)
    assert "sk-bare-string" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_settings(None, {"server.api_keys": [KEY, "sk two"]}, environ={})
    assert str(err.value) == ("invalid configuration: server.api_keys: Value error, key 1: a key "
                              "must be printable ASCII without spaces (it is sent as `Bearer "
                              "KEY`)")
    with pytest.raises(ConfigError, match="key 0: a key must not be empty"):
        load_settings(None, {"server.api_keys": [""]}, environ={})


def test_key_problem_and_collect() -> None:
    assert key_problem("sk-proj-AbC_123.~!") is None
    assert key_problem("a" * 256) is None
    assert key_problem("tab\there") is not None
    assert collect_api_keys(["a", "b", "a"], None, {}) == ["a", "b"]
