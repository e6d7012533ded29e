"""The example deployments under ``configs/`` that serve what the running one does not: hints
for a model name the settings lack and for text only a model of another config reads.

The default deployment (``configs/piper.yaml``) serves Piper's English voice alone; Kokoro and
its Japanese voices are served by ``configs/multi.yaml``. A fresh user who asks the default
for ``--model kokoro``, or gives its English voice Japanese text, is told which config serves
what they asked for, and how to start it.

Model names are read from the YAML files themselves (each model's ``name`` and ``aliases``), so a
new config is found without a change here; a checkout's ``configs/`` sits beside the package
(an install without it, from a wheel, gets no hint). Which config to point at for a language is
chosen here (`LANGUAGE_HINTS`): several configs may read a script, and the hint names the one a
CPU serves well; tests/unit/test_shipped_configs.py checks that it does serve that model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
"""The checkout's example deployments (absent where voxflow was installed from a wheel)."""


@dataclass(frozen=True)
class ShippedConfig:
    """One example deployment.

    Attributes:
        path: as the docs and commands write it, from the checkout's root
            (``configs/multi.yaml``).
        models: its models' names, in file order.
        names: every ``model`` name it answers to: the names and their aliases.
    """

    path: str
    models: tuple[str, ...]
    names: frozenset[str]


@dataclass(frozen=True)
class LanguageHint:
    """A language the default voice does not read, and the shipped model that reads it.

    Attributes:
        language: its English name, for the message ("Japanese").
        tag: its BCP 47 tag, whose scripts decide when the hint applies ("ja").
        model: the model that reads it. config: the example deployment that serves it.
    """

    language: str
    tag: str
    model: str
    config: str

    def sentence(self) -> str:
        """What a refusal adds: the model, the config that serves it, the two commands."""
        return (
            f"Model '{self.model}' reads {self.language}: {self.config} serves it "
            f"(voxflow serve --config {self.config}, or voxflow speak --config {self.config} "
            f"--model {self.model})."
        )


LANGUAGE_HINTS = (LanguageHint("Japanese", "ja", "kokoro", "configs/multi.yaml"),)


def _read(path: Path) -> ShippedConfig | None:
    """`path`'s models, or None when it is not a deployment YAML (a hint must never fail)."""
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    models = tree.get("models") if isinstance(tree, dict) else None
    if not isinstance(models, list):
        return None
    names: list[str] = []
    aliases: set[str] = set()
    for model in models:
        if isinstance(model, dict) and isinstance(model.get("name"), str):
            names.append(model["name"])
            aliases.update(a for a in model.get("aliases") or () if isinstance(a, str))
    return ShippedConfig(f"configs/{path.name}", tuple(names), frozenset(names) | aliases)


@lru_cache(maxsize=1)
def shipped_configs(folder: Path = CONFIG_DIR) -> tuple[ShippedConfig, ...]:
    """The deployments of `folder` (read once), fewest models first, then by name."""
    found = [c for c in map(_read, sorted(folder.glob("*.yaml"))) if c is not None]
    return tuple(sorted(found, key=lambda c: (len(c.models), c.path)))


def configs_serving(model: str) -> list[ShippedConfig]:
    """The shipped deployments that answer to `model` (a name or an alias), fewest models
    first; [] when none does or there is no ``configs/``."""
    return [c for c in shipped_configs() if model in c.names]


def _names(parts: list[str] | tuple[str, ...]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def served_elsewhere(model: str, run: str) -> str:
    """The sentence naming the configs that serve `model` and the command that uses the first,
    e.g. ``configs/multi.yaml serves piper and kokoro: voxflow speak --config
    configs/multi.yaml --model kokoro ...``; "" when no shipped config serves it.

    Args:
        model: the name asked for.
        run: the command, with ``{config}`` (and ``{model}``) to fill in, e.g.
            ``"voxflow serve --config {config}"``.
    """
    configs = configs_serving(model)
    if not configs:
        return ""
    said = "; ".join(f"{c.path} serves {_names(c.models)}" for c in configs)
    return f"{said}: {run.format(config=configs[0].path, model=model)}"


__all__ = ["CONFIG_DIR", "LANGUAGE_HINTS", "LanguageHint", "ShippedConfig", "configs_serving",
           "served_elsewhere", "shipped_configs"]
