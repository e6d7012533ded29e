"""The settings reference, docs/configuration.md, generated from the settings models.

Every field of `voxflow.config.Settings` (server, engine, each model) and of each model
family's options type is listed with its type, default, bounds and description, so the
reference cannot drift from what `load_settings` accepts.

    python -m voxflow.settings_doc            # print the Markdown
    python -m voxflow.settings_doc --write    # write docs/configuration.md
    python -m voxflow.settings_doc --check    # exit 1 if docs/configuration.md is stale
"""

from __future__ import annotations

import argparse
import enum
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from voxflow.config import ModelSettings, Settings
from voxflow.models.registry import builtin_families, family_settings_type
from voxflow.ray.settings import RaySettings

OWNED_SECTIONS: dict[str, type[BaseModel]] = {"ray": RaySettings}
"""Sections `Settings` keeps as the file gives them, validated by the layer that owns them."""

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
REGENERATE = "python -m voxflow.settings_doc --write"

_HEADER = f"""\
# Configuration reference

<!-- Generated from the settings models by `{REGENERATE}`; do not edit by hand. -->

A deployment is one YAML file (`configs/piper.yaml` is the default, `configs/multi.yaml` serves
Piper and Kokoro together) read once at start-up: `voxflow serve --config FILE`. Every field is
optional except `models[].name` and `models[].family`; a field left out takes the default below,
an unknown field or a value out of bounds stops start-up with a message naming it (an unknown
field with the closest valid one: `engine.max_inflight_request: Extra inputs are not permitted;
did you mean 'max_inflight_requests'?`). Any field can be overridden from the command line with
`--set section.field=value` (the value is read as YAML; lists by index:
`--set models.0.options.workers=1`).

The source of truth is `voxflow/config.py` and each family's `voxflow/models/*/settings.py`.
"""


def _type_name(annotation: Any) -> str:
    """A short, readable name for a field's type (`int`, `float or null`, `"a" | "b"`)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a!r}`".replace("'", '"') for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        text = " or ".join(names)
        return f"{text} or null" if type(None) in args else text
    if origin in (list, tuple, set, frozenset):
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"list of {inner}" if inner else "list"
    if origin is dict:
        key, value = (_type_name(a) for a in args) if args else ("any", "any")
        return f"mapping of {key} to {value}"
    if annotation is Any:
        return "mapping"
    if isinstance(annotation, type):
        if issubclass(annotation, Path):
            return "path"
        if issubclass(annotation, SecretStr):
            return "str (secret)"
        if issubclass(annotation, bool):
            return "bool"
        if issubclass(annotation, BaseModel):
            return "section"
        if issubclass(annotation, enum.Enum):
            return " \\| ".join(f'`"{m.value}"`' for m in annotation)
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _yaml_value(value: Any) -> str:
    """A default as it would be written in the YAML file."""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, Path | str):
        return f"`{value}`" if str(value) else '`""`'
    if isinstance(value, list | tuple):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def _default(info: FieldInfo) -> str:
    """The default of a field; `required` when it has none."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "doc_default" in extra:
        return f"`{extra['doc_default']}`"
    if info.default_factory is not None:
        return _yaml_value(info.default_factory())  # type: ignore[call-arg]
    if info.default is PydanticUndefined:
        return "required"
    return _yaml_value(info.default)


_BOUNDS = ((at.Ge, "ge", "≥ {}"), (at.Gt, "gt", "> {}"), (at.Le, "le", "≤ {}"),
           (at.Lt, "lt", "< {}"), (at.MinLen, "min_length", "length ≥ {}"),
           (at.MaxLen, "max_length", "length ≤ {}"))


def _bounds(info: FieldInfo) -> str:
    """The field's numeric or length bounds, e.g. `≥ 1, ≤ 256`; empty when it has none."""
    parts = []
    for item in info.metadata:
        for kind, attr, text in _BOUNDS:
            if isinstance(item, kind):
                parts.append(text.format(getattr(item, attr)))
    return ", ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def field_rows(model: type[BaseModel], prefix: str) -> list[str]:
    """Markdown table rows, one per field of `model`, keys written as `prefix` + name.

    Raises:
        ValueError: a field has no description (every documented field must say what it does).
    """
    rows = []
    for name, info in model.model_fields.items():
        if not info.description:
            raise ValueError(f"{model.__name__}.{name} has no Field(description=...)")
        rows.append(
            f"| `{prefix}{name}` | {_type_name(info.annotation)} | {_default(info)} | "
            f"{_bounds(info)} | {_cell(info.description)} |"
        )
        nested = _nested(info.annotation)
        if nested is not None and model is not Settings:
            rows.extend(field_rows(nested[0], prefix + name + nested[1]))
    return rows


def _nested(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The settings model inside a field's type and the key suffix it is reached by.

    `ServerSettings` -> `.`, `list[ModelSettings]` -> `[].`, `dict[str, X]` -> `.NAME.`;
    None for a plain value.
    """
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "."
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple) and args and (inner := _nested(args[0])):
        return inner[0], "[]."
    if origin is dict and len(args) == 2 and (inner := _nested(args[1])):
        return inner[0], ".NAME."
    return None


def _section(key: str, info: FieldInfo) -> tuple[type[BaseModel], str] | None:
    """The settings model of top-level field `key` (its own type's, or the owning layer's for
    a section in `OWNED_SECTIONS`) and its key suffix; None for a plain value."""
    if key in OWNED_SECTIONS:
        return OWNED_SECTIONS[key], "."
    return _nested(info.annotation)


def _table(model: type[BaseModel], prefix: str) -> str:
    head = "| field | type | default | bounds | description |\n|---|---|---|---|---|"
    return "\n".join([head, *field_rows(model, prefix)])


def _intro(model: type[BaseModel]) -> str:
    doc = (model.__doc__ or "").strip()
    return " ".join(doc.split())


def _families() -> list[str]:
    """The built-in families, the default one (piper) first. A family added by an installed
    package's entry point is left out, so the reference does not depend on what is installed."""
    return sorted(builtin_families(), key=lambda f: (f != "piper", f))


def render() -> str:
    """The whole reference as Markdown (what `--write` puts in docs/configuration.md)."""
    sections = [_HEADER]
    plain = [n for n, i in Settings.model_fields.items() if _section(n, i) is None]
    if plain:
        rows = [r for r in field_rows(Settings, "") if r.split("`")[1] in plain]
        head = "| field | type | default | bounds | description |\n|---|---|---|---|---|"
        sections.append("## Top level\n\n" + "\n".join([head, *rows]) + "\n")
    for key, info in Settings.model_fields.items():
        nested = _section(key, info)
        if nested is None:
            continue
        model, suffix = nested
        prefix = key + suffix
        text = f"## `{key}`\n\n{_cell(info.description or _intro(model))}\n\n"
        if model is ModelSettings:
            text += ("Each entry is one served model; its `options` are checked against its "
                     "family's options type below.\n\n")
        sections.append(text + _table(model, prefix) + "\n")
        if model is ModelSettings:
            for family in _families():
                options = family_settings_type(family)
                sections.append(
                    f"### Options of `family: {family}`\n\n{_intro(options)}\n\n"
                    f"{_table(options, prefix + 'options.')}\n"
                )
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    """Print, write or check docs/configuration.md; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m voxflow.settings_doc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write docs/configuration.md")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if docs/configuration.md differs from the settings models")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DOC_PATH.write_text(text)
        print(f"wrote {DOC_PATH.name}")
        return 0
    if args.check:
        current = DOC_PATH.read_text() if DOC_PATH.is_file() else ""
        if current != text:
            print(f"docs/configuration.md is stale; regenerate it with `{REGENERATE}`",
                  file=sys.stderr)
            return 1
        print("docs/configuration.md is up to date")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
