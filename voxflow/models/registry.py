"""Family name -> implementation, imported lazily so serving one family never imports another.

The built-in families are the `_FAMILIES` dict below. An installed package may add one without
editing it, through an entry point of the group ``voxflow.families`` named after the family,
whose object is the same pair the dict holds::

    # the package's pyproject.toml
    [project.entry-points."voxflow.families"]
    mytts = "mytts.voxflow:FAMILY"

    # mytts/voxflow.py: "module:Class" of the family and of its settings type, as strings, so
    # reading the entry point imports neither (the settings module should stay light)
    FAMILY = ("mytts.family:MyFamily", "mytts.settings:MySettings")

A built-in name wins over an entry point of the same name. Entry points are read only for a
name that is not built in (and to list the known names), so serving built-in families never
scans them.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from voxflow.models.base import ModelFamily

# family name -> "module:Class" of the family and "module:Class" of its settings type.
_FAMILIES: dict[str, tuple[str, str]] = {
    "piper": (
        "voxflow.models.piper.model:PiperFamily",
        "voxflow.models.piper.settings:PiperSettings",
    ),
    "kokoro": (
        "voxflow.models.kokoro.model:KokoroFamily",
        "voxflow.models.kokoro.settings:KokoroSettings",
    ),
    # Needs the `cosyvoice3` extra (torch); its settings module imports no torch.
    "cosyvoice3": (
        "voxflow.models.cosyvoice3.model:CosyVoice3Family",
        "voxflow.models.cosyvoice3.settings:CosyVoice3Settings",
    ),
    # MagpieTTS + NanoCodec; needs torch and safetensors; its settings module imports no torch.
    "magpie": (
        "voxflow.models.magpie.family:MagpieFamily",
        "voxflow.models.magpie.settings:MagpieSettings",
    ),
}


# family name -> the pyproject extra that installs what it imports beyond the runtime
_EXTRAS = {"cosyvoice3": "cosyvoice3", "magpie": "nanocodec"}


ENTRY_POINT_GROUP = "voxflow.families"


class FamilyEntryPointError(ValueError):
    """A `voxflow.families` entry point that does not give a family (names the entry point)."""


def builtin_families() -> list[str]:
    """Names of the families built into voxflow (what docs/configuration.md documents)."""
    return sorted(_FAMILIES)


def _entry_points() -> dict[str, metadata.EntryPoint]:
    """Installed packages' `voxflow.families` entry points by name, built-in names left out."""
    found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep for ep in found if ep.name not in _FAMILIES}


def known_families() -> list[str]:
    """Names of the families this installation can serve: built in, then entry points."""
    return sorted({*_FAMILIES, *_entry_points()})


def _import(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _describe(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    where = f" of package '{dist.name}'" if dist is not None else ""
    return f"entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}{where})"


def _from_entry_point(ep: metadata.EntryPoint) -> tuple[str, str]:
    """The ("module:Family", "module:Settings") pair an entry point names.

    Raises:
        FamilyEntryPointError: it cannot be loaded, or its object is not such a pair.
    """
    try:
        pair = ep.load()
    except Exception as exc:  # whatever importing a third party's module raises
        raise FamilyEntryPointError(f"model family '{ep.name}': {_describe(ep)} cannot be "
                                    f"loaded: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(pair, tuple | list) and len(pair) == 2
            and all(isinstance(t, str) and ":" in t for t in pair)):
        raise FamilyEntryPointError(
            f"model family '{ep.name}': {_describe(ep)} must name a pair "
            f"(\"module:FamilyClass\", \"module:SettingsClass\"), got {pair!r}")
    return pair[0], pair[1]


def _entry(family: str) -> tuple[tuple[str, str], metadata.EntryPoint | None]:
    """The family's ("module:Family", "module:Settings") pair, and the entry point that gave
    it (None for a built-in family)."""
    if family in _FAMILIES:
        return _FAMILIES[family], None
    ep = _entry_points().get(family)
    if ep is None:
        raise ValueError(
            f"unknown model family '{family}'; known: {', '.join(known_families())}"
        )
    return _from_entry_point(ep), ep


def _import_from(family: str, target: str, ep: metadata.EntryPoint | None):
    """`target` imported; for an entry point's family, any failure is a `FamilyEntryPointError`
    naming the entry point and the target."""
    if ep is None:
        return _import(target)
    try:
        return _import(target)
    except Exception as exc:  # whatever importing a third party's module raises
        raise FamilyEntryPointError(f"model family '{family}': {target!r}, named by "
                                    f"{_describe(ep)}, cannot be loaded: "
                                    f"{type(exc).__name__}: {exc}") from exc


def family_settings_type(family: str) -> type[BaseModel]:
    """The pydantic settings type for a family's `options`.

    Raises:
        ValueError: unknown family (names the known ones).
        FamilyEntryPointError: an entry point's family whose entry point or settings type
            cannot be loaded (a `ValueError`: names the entry point).
    """
    (_, target), ep = _entry(family)
    return _import_from(family, target, ep)


def family_class(family: str) -> type[ModelFamily]:
    """The `ModelFamily` subclass for a family name.

    Raises:
        ValueError: unknown family.
        FamilyEntryPointError: an entry point's family whose entry point or class cannot be
            loaded (names the entry point).
        ModuleNotFoundError: a package a built-in family needs is not installed (names it and
            the extra that installs it).
    """
    (target, _), ep = _entry(family)
    try:
        return _import_from(family, target, ep)
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get(family)
        hint = f" (install it with: pip install -e '.[{extra}]')" if extra else ""
        raise ModuleNotFoundError(f"model family '{family}' needs the package '{exc.name}', "
                                  f"which is not installed{hint}", name=exc.name) from exc
