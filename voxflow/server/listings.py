"""The bodies of ``GET /v1/models``, ``GET /v1/audio/voices`` and ``GET /v1/audio/models``.

A voice entry says every language the voice accepts (`ModelFamily.languages`, the family's own
answer, the voice's own language first) as ``languages``, and keeps ``language`` as its own
(default) one. Tags are written in BCP 47's usual case (``en-US``, ``ja``). Model and voice
aliases are listed as entries of their own with ``alias_of`` (`voxflow.engine.aliases`). Voices
of a family that clones voices say whether they were saved through the API (``saved``).
"""

from __future__ import annotations

from typing import Any

from voxflow.engine.aliases import Aliases
from voxflow.engine.engine import Engine
from voxflow.models.base import ModelFamily
from voxflow.models.cloning import VoiceCloning


def tag_case(tag: str) -> str:
    """A language tag in BCP 47's conventional case: ``en-us`` -> ``en-US``, ``sr_latn`` ->
    ``sr-Latn``, ``ja`` -> ``ja`` (language lower, script title, region upper)."""
    parts = tag.replace("_", "-").split("-")
    out = [parts[0].lower()]
    for part in parts[1:]:
        if len(part) == 4 and part.isalpha():
            out.append(part.title())
        elif len(part) == 2 or (len(part) == 3 and part.isdigit()):
            out.append(part.upper())
        else:
            out.append(part.lower())
    return "-".join(out)


def voice_languages(family: ModelFamily, voice_id: str) -> list[str]:
    """Every language `voice_id` accepts, its own first, as `family.languages` gives them."""
    seen: list[str] = []
    for tag in family.languages(voice_id):
        cased = tag_case(tag)
        if cased not in seen:
            seen.append(cased)
    return seen


def voice_entry(model: str, family: ModelFamily, voice_id: str) -> dict[str, Any]:
    """One ``/v1/audio/voices`` entry for a voice of `family`, served as model `model`."""
    voice = family.voices[voice_id]
    return {
        "id": voice.id,
        "object": "voice",
        "model": model,
        "family": voice.family,
        "language": voice.language,
        "languages": voice_languages(family, voice_id),
        "sample_rate": voice.sample_rate,
        "default": voice.id == family.default_voice,
    }


def model_voice_entries(
    model: str, family: ModelFamily, voice_aliases: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The ``/v1/audio/voices`` entries of one served model: its voices, then its voice
    aliases (alias -> voice) as entries of their own with ``alias_of`` and the voice's facts.
    `voxflow voices` lists exactly these."""
    data = [voice_entry(model, family, voice_id) for voice_id in family.voices]
    if isinstance(family, VoiceCloning):  # which voices DELETE /v1/audio/voices/{id} removes
        saved = set(family.saved_voice_ids())
        for entry in data:
            entry["saved"] = entry["id"] in saved
    for alias, voice_id in (voice_aliases or {}).items():
        if voice_id not in family.voices:
            continue  # a saved voice deleted since (never one an alias of the settings names)
        entry = voice_entry(model, family, voice_id)
        if isinstance(family, VoiceCloning):
            entry["saved"] = False  # an alias is never a saved voice (nothing to delete)
        data.append({**entry, "id": alias, "alias_of": voice_id, "default": False})
    return data


def _model_entry(engine: Engine, name: str) -> dict[str, Any]:
    served = engine.models[name]
    family = served.family
    entry = {
        "id": name,
        "object": "model",
        "created": int(engine.created_at),
        "owned_by": "voxflow",
        "family": family.family if family else None,
        "status": served.status,
        "voices": sorted(family.voices) if family else [],
    }
    note = family.random_weights_note() if family else None
    if note is not None:
        entry["weights"] = note  # random weights: output is noise, not speech
    return entry


def models_list(engine: Engine, aliases: Aliases | None = None) -> dict[str, Any]:
    """The body of ``GET /v1/models``: every served model, OpenAI list shape, then every model
    alias as an entry of its own with ``alias_of`` naming the model it serves."""
    aliases = aliases or Aliases()
    data = [_model_entry(engine, name) for name in engine.models]
    for alias, name in aliases.models.items():
        data.append({**_model_entry(engine, name), "id": alias, "alias_of": name})
    return {"object": "list", "data": data}


def voices_list(
    engine: Engine, model: str | None, aliases: Aliases | None = None
) -> dict[str, Any]:
    """The body of ``GET /v1/audio/voices``: every voice, or those of `model` (a served model
    or a model alias), each model's voice aliases after its voices with ``alias_of`` naming the
    voice they stand for (and that voice's facts).

    Raises:
        ModelNotFoundError: `model` is neither served nor an alias (404).
    """
    aliases = aliases or Aliases()
    if model is not None:
        target = aliases.served_model(engine, model)
        if target is None:
            raise aliases.model_not_found(engine, model)
        model = target
    data = []
    for name, served in engine.models.items():
        if served.family is None or (model is not None and name != model):
            continue
        data.extend(model_voice_entries(name, served.family, aliases.voice_table(name)))
    return {"object": "list", "data": data, "voices": named_voices(data)}


def named_voices(entries: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The ``voices`` list Open WebUI reads (``[{"id", "name"}]``): each voice id once, in
    listing order (the first model's entry wins), an alias named with the voice it stands
    for (``alloy (joe)``)."""
    seen: dict[str, dict[str, str]] = {}
    for entry in entries:
        name = entry["id"] if "alias_of" not in entry else f"{entry['id']} ({entry['alias_of']})"
        seen.setdefault(entry["id"], {"id": entry["id"], "name": name})
    return list(seen.values())


def audio_models_list(engine: Engine, aliases: Aliases | None = None) -> dict[str, Any]:
    """The body of ``GET /v1/audio/models`` as Open WebUI reads it: ``{"models": [{"id"}]}``,
    every served model then every model alias (`models_list`'s entries, ids only)."""
    return {"models": [{"id": entry["id"]} for entry in models_list(engine, aliases)["data"]]}


__all__ = ["audio_models_list", "model_voice_entries", "models_list", "named_voices", "tag_case",
           "voice_entry", "voice_languages", "voices_list"]
