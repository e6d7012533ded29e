"""Issue 41 item 7: an installed package registers a model family through an entry point of the
group `voxflow.families`, without editing the registry's dict; a broken one is named.

The entry points are fabricated (`importlib.metadata.entry_points` patched), each naming an
object in this folder: `fake_streaming.ENTRY` is the ("module:Family", "module:Settings") pair
such a package exposes.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

import pytest
from fake_streaming import RATE, StreamingFamily, StreamingSettings

from voxflow.config import ConfigError, load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.models import registry
from voxflow.models.piper.settings import PiperSettings
from voxflow.models.registry import (
    ENTRY_POINT_GROUP,
    FamilyEntryPointError,
    builtin_families,
    family_class,
    family_settings_type,
    known_families,
)


def _install(monkeypatch, **entries: str) -> None:
    """Pretend installed packages declare `name = value` in the `voxflow.families` group."""
    points = importlib.metadata.EntryPoints(
        importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP)
        for name, value in entries.items()
    )
    real = importlib.metadata.entry_points

    def entry_points(**params):
        if params == {"group": ENTRY_POINT_GROUP}:
            return points
        return real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def _settings(family: str, **options):
    return load_settings(None, {
        "engine.warmup": False,
        "models": [{"name": "plugged", "family": family, "options": options}],
    })


def test_a_family_from_an_entry_point_is_known_resolved_and_served(monkeypatch):
    _install(monkeypatch, fake3="fake_streaming:ENTRY")
    assert "fake3" not in registry._FAMILIES  # not edited into the dict
    assert "fake3" in known_families()
    assert "fake3" not in builtin_families()  # docs/configuration.md documents built-ins only
    assert family_class("fake3") is StreamingFamily
    assert family_settings_type("fake3") is StreamingSettings

    settings = _settings("fake3", hop=2)
    assert settings.models[0].options == StreamingSettings(hop=2)

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            return await engine.submit(SpeechRequest("plugged", "abc", "alice")).collect()
        finally:
            engine.stop()

    chunks = asyncio.run(main())
    assert [c.samples.size for c in chunks] == [8, 4]  # "abc" in hops of 2 tokens, 4 samples each
    assert chunks[-1].sample_rate == RATE


def test_a_built_in_name_wins_over_an_entry_point_of_the_same_name(monkeypatch):
    _install(monkeypatch, piper="fake_streaming:ENTRY")
    assert family_settings_type("piper") is PiperSettings
    assert known_families().count("piper") == 1


def test_an_unknown_family_lists_the_entry_points_too(monkeypatch):
    _install(monkeypatch, fake3="fake_streaming:ENTRY")
    with pytest.raises(ValueError, match="unknown model family 'nope'; known: .*fake3"):
        family_class("nope")


def test_an_entry_point_that_cannot_be_loaded_is_named(monkeypatch):
    _install(monkeypatch, broken="no_such_voxflow_plugin:FAMILY")
    with pytest.raises(FamilyEntryPointError,
                       match=r"'broken = no_such_voxflow_plugin:FAMILY' \(group voxflow.families\) "
                             r"cannot be loaded: ModuleNotFoundError"):
        family_class("broken")
    # in a config it is an error of the model's `family` field, not a traceback
    with pytest.raises(ConfigError,
                       match=r"models\[0\]\.family: .*broken = no_such_voxflow_plugin"):
        _settings("broken")


def test_an_entry_point_that_names_no_pair_is_named(monkeypatch):
    _install(monkeypatch, odd="fake_streaming:RATE")
    with pytest.raises(FamilyEntryPointError,
                       match=r"'odd = fake_streaming:RATE'.* must name a pair .*got 8000"):
        family_settings_type("odd")


def test_an_entry_point_whose_pair_names_a_missing_class_is_named(monkeypatch, tmp_path):
    module = tmp_path / "half_plugin.py"
    module.write_text(
        'FAMILY = ("fake_streaming:NoSuchFamily", "fake_streaming:StreamingSettings")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    _install(monkeypatch, half="half_plugin:FAMILY")
    assert family_settings_type("half") is StreamingSettings
    with pytest.raises(FamilyEntryPointError,
                       match=r"'fake_streaming:NoSuchFamily', named by entry point "
                             r"'half = half_plugin:FAMILY'.*AttributeError"):
        family_class("half")
