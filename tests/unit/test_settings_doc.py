"""Issue 8 item 11: the settings reference is generated from the settings models."""

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from voxflow import settings_doc
from voxflow.config import Settings
from voxflow.models.registry import builtin_families, family_settings_type


def test_item11_checked_in_configuration_md_matches_the_generator():
    current = settings_doc.DOC_PATH.read_text()
    assert current == settings_doc.render(), (
        f"docs/configuration.md is stale; regenerate it with `{settings_doc.REGENERATE}`"
    )


def test_item11_every_field_of_every_settings_model_is_documented():
    text = settings_doc.render()
    for key in Settings.model_fields:
        assert f"`{key}" in text
    for section in ("server", "engine"):
        model = Settings.model_fields[section].annotation
        for name in model.model_fields:
            assert f"| `{section}.{name}` |" in text
    for family in builtin_families():
        assert f"### Options of `family: {family}`" in text
        for name in family_settings_type(family).model_fields:
            assert f"| `models[].options.{name}` |" in text


def test_item11_rows_carry_type_default_bounds_and_description():
    text = settings_doc.render()
    assert "| `server.port` | int | `8000` | ≥ 0, ≤ 65535 | TCP port" in text
    assert "| `models[].name` | str | required | length ≥ 1 |" in text
    assert "| `models[].options.first_segment_chars` | int or null | `120` | ≥ 10 |" in text
    # A default computed from the machine is written portably.
    assert "| path | `~/.cache/voxflow/kokoro` |" in text


def test_item11_a_field_without_description_is_refused():
    class Bare(BaseModel):
        level: Literal["a", "b"] = Field("a", description="Which.")
        count: int = 1

    with pytest.raises(ValueError, match="Bare.count has no Field"):
        settings_doc.field_rows(Bare, "x.")


def test_item11_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    monkeypatch.setattr(settings_doc, "DOC_PATH", stale)
    assert settings_doc.main(["--check"]) == 1
    assert settings_doc.REGENERATE in capsys.readouterr().err
    assert settings_doc.main(["--write"]) == 0
    assert settings_doc.main(["--check"]) == 0


def test_item11_shipped_configs_point_at_the_reference():
    configs = sorted((settings_doc.DOC_PATH.parent.parent / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        header = "".join(line for line in path.read_text().splitlines(keepends=True)
                         if line.startswith("#"))
        assert "docs/configuration.md" in header, path.name
        assert "those of configs/piper.yaml" not in header, path.name
