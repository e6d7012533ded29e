"""Which pronunciation lexicon a request uses, whether its voice can say it, and applying it.

A request names a saved lexicon with `SpeechRequest.lexicon`; ``""`` asks for none; None
takes the configured default: the voice's (`ModelSettings.voice_lexicons`), else the model's
(`ModelSettings.lexicon`). Defaults are checked when the engine is built (the lexicon must be
saved) and once the voices are loaded (a voice of `voice_lexicons` must be one of the model's).

Phonemes are checked at request time against the request's voice (`ModelFamily.phoneme_gaps`):
a lexicon is stored once for every model, and only the voice a request uses says whether an
entry's symbols exist in its phoneme table. Every phoneme entry is checked, not only those the
input uses, so a lexicon works with a voice for every input or for none; the first entry the
voice cannot say is a 400 naming it. Answers are remembered per (lexicon version, model, voice).
"""

from __future__ import annotations

from voxflow.config import ConfigError, Settings
from voxflow.errors import InvalidRequestError, echo
from voxflow.lexicons.apply import apply_lexicon
from voxflow.lexicons.lexicon import Lexicon
from voxflow.lexicons.store import LexiconStore
from voxflow.models.base import ModelFamily
from voxflow.text.document import SpeechDocument

__all__ = ["RequestLexicons"]

_MAX_REMEMBERED = 4096


class RequestLexicons:
    """The lexicon part of `Engine.prepare` (module docstring).

    Args:
        store: the saved lexicons.
        settings: the deployment (its models' `lexicon` and `voice_lexicons`).

    Raises:
        ConfigError: a model's default names a lexicon that is not saved.
    """

    def __init__(self, store: LexiconStore, settings: Settings) -> None:
        self.store = store
        self._model_default = {m.name: m.lexicon for m in settings.models if m.lexicon}
        self._voice_default = {m.name: dict(m.voice_lexicons) for m in settings.models}
        # (version, model, voice) -> the 400's message, or None when the voice can say it all
        self._checked: dict[tuple[str, str, str], str | None] = {}
        for i, model in enumerate(settings.models):
            named = ([("lexicon", model.lexicon)] if model.lexicon else []) + [
                (f"voice_lexicons.{voice}", name) for voice, name in model.voice_lexicons.items()]
            for key, name in named:
                if store.get(name) is None:
                    raise ConfigError(
                        f"models[{i}].{key}: no saved lexicon '{name}' in {store.directory} "
                        f"(saved: {', '.join(store.names()) or 'none'}); save it with PUT "
                        "/v1/audio/lexicons/{name} or put its JSON file in server.lexicons_dir.")

    def check_voices(self, families: dict[str, ModelFamily]) -> None:
        """Once the voices are loaded: every voice of `voice_lexicons` is one of its model's.

        Raises:
            ConfigError: naming the model and the voice.
        """
        for model, voices in self._voice_default.items():
            family = families.get(model)
            for voice in voices:
                if family is not None and voice not in family.voices:
                    raise ConfigError(
                        f"model '{model}': voice_lexicons names voice '{voice}', which the model "
                        f"does not have (voices: {', '.join(sorted(family.voices))}).")

    def defaults(self) -> set[str]:
        """The lexicons the configuration names (not deletable while it does)."""
        return set(self._model_default.values()) | {
            name for voices in self._voice_default.values() for name in voices.values()}

    def name_for(self, model: str, voice: str, requested: str | None) -> str | None:
        """The lexicon name a request uses (module docstring), or None."""
        if requested is not None:
            return requested or None
        return self._voice_default.get(model, {}).get(voice) or self._model_default.get(model)

    def resolve(self, model: str, voice: str, requested: str | None,
                family: ModelFamily) -> Lexicon | None:
        """The request's lexicon, checked against its voice; None when it uses none.

        Raises:
            InvalidRequestError: (400, param ``lexicon``) ``lexicon_not_found`` when no lexicon
                of that name is saved; ``unsayable_phonemes`` naming the first phoneme entry
                whose symbols the voice has no phoneme for.
        """
        name = self.name_for(model, voice, requested)
        if name is None:
            return None
        lexicon = self.store.get(name)
        if lexicon is None:
            raise InvalidRequestError(
                f"No lexicon {echo(name)}; GET /v1/audio/lexicons lists the saved ones.",
                param="lexicon", code="lexicon_not_found")
        key = (lexicon.version, model, voice)
        if key not in self._checked:
            if len(self._checked) >= _MAX_REMEMBERED:
                self._checked.clear()
            self._checked[key] = _unsayable(name, lexicon, model, voice, family)
        problem = self._checked[key]
        if problem is not None:
            raise InvalidRequestError(problem, param="lexicon", code="unsayable_phonemes")
        return lexicon

    @staticmethod
    def apply(document: SpeechDocument, lexicon: Lexicon | None, voice: str,
              family: ModelFamily) -> SpeechDocument:
        """`document` with `lexicon` applied (`voxflow.lexicons.apply.apply_lexicon`)."""
        if lexicon is None:
            return document
        takes_phonemes = family.phoneme_gaps(voice, "a") is not None
        return apply_lexicon(document, lexicon, takes_phonemes)


def _unsayable(name: str, lexicon: Lexicon, model: str, voice: str,
               family: ModelFamily) -> str | None:
    """The message for the first phoneme entry `voice` cannot say, or None."""
    for index, entry in enumerate(lexicon.entries):
        if entry.phonemes is None:
            continue
        gaps = family.phoneme_gaps(voice, entry.phonemes)
        if gaps is None:  # the family reads words, not phonemes: phoneme entries are skipped
            return None
        if gaps:
            return (f"Lexicon '{name}' entry entries[{index}] ({echo(entry.word)}): phonemes "
                    f"{echo(entry.phonemes)} use {', '.join(repr(c) for c in gaps)}, which voice "
                    f"'{voice}' of model '{model}' has no phoneme for; write the word in the "
                    "voice's alphabet (espeak-ng IPA) or give a respelling.")
    return None
