"""Settings behind the OpenAI API contract of issue 8: streaming default, CORS, aliases."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from voxflow.config import OPENAI_VOICES, ConfigError, load_settings
from voxflow.engine.aliases import Aliases
from voxflow.errors import InvalidRequestError, ModelNotFoundError
from voxflow.server.schemas import SpeechBody

BODY = {"model": "piper", "voice": "joe", "input": "Hi."}


def test_item1_streaming_is_the_default_and_a_setting_flips_it():
    assert load_settings(None).server.stream_by_default is True
    off = load_settings(None, {"server.stream_by_default": False})
    assert off.server.stream_by_default is False
    with pytest.raises(ConfigError, match=r"server\.stream_by_default"):
        load_settings(None, {"server.stream_by_default": "sometimes"})


@pytest.mark.parametrize(("extra", "default", "streams"), [
    ({}, True, True), ({}, False, False),
    ({"stream": False}, True, False), ({"stream": True}, False, True),
    ({"stream_format": "sse", "stream": False}, False, True),  # SSE always streams
])
def test_item1_a_request_streams_by_its_field_else_by_the_server_default(extra, default, streams):
    assert SpeechBody.model_validate({**BODY, **extra}).streams(default) is streams


# ---- Issue 8, item 2: model and voice aliases ---------------------------------------------------

def test_item2_the_default_and_shipped_configs_serve_openai_names():
    for config in (None, "configs/piper.yaml", "configs/multi.yaml"):
        aliases = Aliases.from_settings(load_settings(config))
        assert aliases.models == dict.fromkeys(["tts-1", "tts-1-hd", "gpt-4o-mini-tts"], "piper")
        assert aliases.voices["piper"] == dict.fromkeys(OPENAI_VOICES, "joe"), config
    kokoro = Aliases.from_settings(load_settings("configs/multi.yaml")).voices["kokoro"]
    assert sorted(kokoro) == sorted(OPENAI_VOICES)
    assert kokoro["onyx"] == "jm_kumo" and kokoro["alloy"] == "jf_alpha"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"models.0.aliases": ["piper"]},
     r"models\[0\]\.aliases: 'piper' \(model 'piper'\) is already the name of models\[0\]"),
    ({"models.0.aliases": ["tts-1", "tts-1"]},
     r"models\[0\]\.aliases: .*repeated model aliases: tts-1"),
    ({"models.0.aliases": [" "]}, r"models\[0\]\.aliases: .*must not be empty"),
    ({"models.0.voice_aliases": {"alloy": ""}},
     r"models\[0\]\.voice_aliases: .*'alloy'.*must not be empty"),
])
def test_item2_bad_model_aliases_are_config_errors_naming_them(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(None, overrides)


def test_item2_a_model_alias_names_one_model_only(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(
        "models:\n"
        "  - {name: a, family: piper, aliases: [tts-1]}\n"
        "  - {name: b, family: piper, aliases: [tts-1]}\n"
    )
    with pytest.raises(ConfigError, match=r"models\[1\]\.aliases: 'tts-1' \(model 'b'\) is "
                                          r"already an alias of models\[0\] \('a'\)"):
        load_settings(path)


def fake_engine(**voices_of_models: list[str]) -> SimpleNamespace:
    """An object shaped like `Engine` as `Aliases` reads it: models -> family -> voices."""
    return SimpleNamespace(models={
        name: SimpleNamespace(family=SimpleNamespace(voices=dict.fromkeys(voices)))
        for name, voices in voices_of_models.items()
    })


def test_item2_voice_aliases_are_checked_against_the_loaded_voices():
    engine = fake_engine(piper=["joe"], kokoro=["jf_alpha", "jm_kumo"])
    Aliases({}, {"kokoro": {"alloy": "jf_alpha", "onyx": "jm_kumo"}}).check(engine)
    with pytest.raises(ConfigError, match=r"models\[1\]\.voice_aliases\.onyx: 'bob' is not a "
                                          r"voice of model 'kokoro' \(its voices: jf_alpha, "
                                          r"jm_kumo\)"):
        Aliases({}, {"kokoro": {"alloy": "jf_alpha", "onyx": "bob"}}).check(engine)
    with pytest.raises(ConfigError, match=r"models\[0\]\.voice_aliases\.joe: 'joe' is already "
                                          r"a voice of model 'piper'"):
        Aliases({}, {"piper": {"joe": "joe"}}).check(engine)


def test_item2_names_resolve_and_unknown_names_list_what_exists():
    engine = fake_engine(piper=["joe"], kokoro=["jf_alpha", "jm_kumo"])
    aliases = Aliases({"tts-1": "piper"}, {"piper": {"alloy": "joe", "onyx": "joe"},
                                           "kokoro": {"onyx": "jm_kumo"}})
    assert aliases.resolve(engine, "tts-1", "alloy") == ("piper", "joe")
    assert aliases.resolve(engine, "kokoro", "onyx") == ("kokoro", "jm_kumo")
    assert aliases.resolve(engine, "piper", "joe") == ("piper", "joe")
    with pytest.raises(ModelNotFoundError) as missing:
        aliases.resolve(engine, "tts-2", "alloy")
    assert missing.value.status == 404 and missing.value.message == (
        "The model 'tts-2' does not exist. Served models: kokoro, piper, tts-1 (alias of piper).")
    with pytest.raises(InvalidRequestError) as unknown:
        aliases.resolve(engine, "tts-1", "bob")
    assert (unknown.value.param, unknown.value.code) == ("voice", "voice_not_found")
    assert unknown.value.message == ("Voice 'bob' is not a voice of model 'piper'. "
                                     "Available voices: joe (aliases: alloy, onyx).")
