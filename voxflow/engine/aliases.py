"""Model and voice aliases: the names OpenAI apps hard-code (``tts-1``, ``alloy``) served by
real models and voices. OpenAI's 13 voice names resolve on every model (to its default voice
where the settings map them nowhere else), and a dated model name (``...-2025-12-15``) as its
base name.

Each model in the settings lists its own `aliases` (other `model` names) and `voice_aliases`
(alias -> one of its voices). Model aliases are checked when the settings load (one name, one
model); voice aliases once the voices are loaded (`Aliases.check`, at server start-up), since a
family's voices are only known then (`Engine.start`). `Engine.submit` resolves a request's names
first, for the server and `voxflow speak` alike, so the stages, the metrics and the access log
only ever see served names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from voxflow.config import OPENAI_VOICES, ConfigError, Settings
from voxflow.errors import InvalidRequestError, ModelNotFoundError, echo
from voxflow.shipped_configs import served_elsewhere

if TYPE_CHECKING:
    from voxflow.engine.engine import Engine
    from voxflow.models.base import ModelFamily

DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")
"""A dated model snapshot's suffix (``gpt-4o-mini-tts-2025-12-15``): served as its base name."""


def openai_voice_table(family: ModelFamily, configured: Mapping[str, str]) -> dict[str, str]:
    """`configured` voice aliases of a model, plus each of `OPENAI_VOICES` that is neither
    configured nor a voice of `family` -> `family`'s default voice."""
    table = dict(configured)
    for name in OPENAI_VOICES:
        if name not in table and name not in family.voices:
            table[name] = family.default_voice
    return table


@dataclass(frozen=True)
class Aliases:
    """The alias tables of a deployment.

    Attributes:
        models: model alias -> served model name.
        voices: served model name -> (voice alias -> voice id), as configured.
        openai: served model name -> (OpenAI voice name -> its default voice), for the names
            of `OPENAI_VOICES` its configuration maps nowhere (`with_openai_voices`). Kept
            apart from `voices`: a configured alias keeps its voice from being deleted, a
            built-in one does not.
    """

    models: Mapping[str, str] = field(default_factory=dict)
    voices: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    openai: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def voice_table(self, model: str) -> dict[str, str]:
        """Every voice alias of served `model`: the built-in OpenAI names, then the configured
        ones (which win)."""
        return {**self.openai.get(model, {}), **self.voices.get(model, {})}

    @classmethod
    def from_settings(cls, settings: Settings) -> Aliases:
        """The tables of `settings.models` (model aliases already checked by `Settings`)."""
        models = {alias: m.name for m in settings.models for alias in m.aliases}
        voices = {m.name: dict(m.voice_aliases) for m in settings.models if m.voice_aliases}
        return cls(models, voices)

    def check(self, engine: Engine) -> None:
        """Check every voice alias against the loaded voices of its model.

        Raises:
            ConfigError: an alias names no voice of its model, or is itself a voice's id (the
                message names the model's index, the alias and the voices there are).
        """
        index = {name: i for i, name in enumerate(engine.models)}
        for model, table in self.voices.items():
            family = engine.models[model].family
            if family is None:
                continue
            voices = sorted(family.voices)
            where = f"models[{index[model]}].voice_aliases"
            for alias, voice in table.items():
                if alias in family.voices:
                    raise ConfigError(
                        f"invalid configuration: {where}.{alias}: '{alias}' is already a voice "
                        f"of model '{model}'; an alias must be a new name"
                    )
                if voice not in family.voices:
                    raise ConfigError(
                        f"invalid configuration: {where}.{alias}: '{voice}' is not a voice of "
                        f"model '{model}' (its voices: {', '.join(voices)})"
                    )

    def with_openai_voices(self, engine: Engine) -> Aliases:
        """These tables with `OPENAI_VOICES` added for every loaded model
        (`openai_voice_table`); call once the voices are loaded and checked."""
        openai = {}
        for name, served in engine.models.items():
            if served.family is not None:
                configured = self.voices.get(name, {})
                table = openai_voice_table(served.family, configured)
                openai[name] = {k: v for k, v in table.items() if k not in configured}
        return replace(self, openai=openai)

    def served_model(self, engine: Engine, model: str) -> str | None:
        """The served model `model` names: itself, the model it is an alias of, or the same
        for its base name when it ends in a date (`DATED`); None if none is served."""
        for name in (model, DATED.sub("", model)):
            served = self.models.get(name, name)
            if served in engine.models:
                return served
        return None

    def model_not_found(self, engine: Engine, model: str) -> ModelNotFoundError:
        """The 404 for an unknown `model`, listing the served models, then the aliases with
        the model each stands for; and the shipped config that serves it, if one does
        (``configs/multi.yaml serves piper and kokoro: voxflow serve --config ...``)."""
        names = [*sorted(engine.models),
                 *(f"{a} (alias of {m})" for a, m in sorted(self.models.items()))]
        hint = served_elsewhere(model, "voxflow serve --config {config}")
        return ModelNotFoundError(model, names, hint)

    def resolve(self, engine: Engine, model: str, voice: str) -> tuple[str, str]:
        """The served model and voice a request's `model` and `voice` name.

        Names that are not aliases are returned as they are, except that an unknown model or
        voice is refused here with the aliases listed beside the real names.

        Raises:
            ModelNotFoundError: `model` is neither a served model nor an alias (404).
            InvalidRequestError: param "voice", code "voice_not_found": `voice` is neither a
                voice of the model nor one of its voice aliases.
        """
        served = self.served_model(engine, model)
        if served is None:
            raise self.model_not_found(engine, model)
        table = self.voice_table(served)
        family = engine.models[served].family
        if voice in table:
            return served, table[voice]
        if family is not None and voice not in family.voices:
            aliases = f" (aliases: {', '.join(sorted(table))})" if table else ""
            raise InvalidRequestError(
                f"Voice {echo(voice)} is not a voice of model '{served}'. "
                f"Available voices: {', '.join(sorted(family.voices))}{aliases}.",
                param="voice",
                code="voice_not_found",
            )
        return served, voice


__all__ = ["DATED", "Aliases", "openai_voice_table"]
