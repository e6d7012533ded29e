"""Family name -> implementation, imported lazily so serving one family never imports another."""

from __future__ import annotations

import importlib
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


def known_families() -> list[str]:
    """Names of the families this build can serve."""
    return sorted(_FAMILIES)


def _import(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _entry(family: str) -> tuple[str, str]:
    try:
        return _FAMILIES[family]
    except KeyError:
        raise ValueError(
            f"unknown model family '{family}'; known: {', '.join(known_families())}"
        ) from None


def family_settings_type(family: str) -> type[BaseModel]:
    """The pydantic settings type for a family's `options`.

    Raises:
        ValueError: unknown family (names the known ones).
    """
    return _import(_entry(family)[1])


def family_class(family: str) -> type[ModelFamily]:
    """The `ModelFamily` subclass for a family name.

    Raises:
        ValueError: unknown family.
        ModuleNotFoundError: a package the family needs is not installed (names it and the
            extra that installs it).
    """
    target = _entry(family)[0]
    try:
        return _import(target)
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get(family)
        hint = f" (install it with: pip install -e '.[{extra}]')" if extra else ""
        raise ModuleNotFoundError(f"model family '{family}' needs the package '{exc.name}', "
                                  f"which is not installed{hint}", name=exc.name) from exc
