"""The ``info`` answer to ``describe``, and a Wyoming voice name back to a served voice.

One ``tts`` program, ``voxflow``, whose voices are every voice of every served model (aliases
left out: Home Assistant lists voices, and OpenAI's names would repeat each voice thirteen
times). A voice is named by its id where no other model has a voice of that id, else
``model:voice``; its ``languages`` are the languages it accepts in the form Home Assistant and
wyoming-piper write them (``en_US``, ``ja``), which Home Assistant groups voices by. Home
Assistant asks with a 1 s timeout (its ``_INFO_TIMEOUT``), three tries: the answer is built
from the engine's tables, no model runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

from voxflow import __version__
from voxflow.engine.engine import Engine
from voxflow.errors import InvalidRequestError, echo
from voxflow.server.listings import tag_case, voice_languages

PROGRAM = "voxflow"
VOXFLOW = Attribution(name="voxflow", url="https://github.com/voxflow/voxflow")

FAMILY_ATTRIBUTION = {
    "piper": Attribution(name="rhasspy", url="https://github.com/rhasspy/piper"),
    "kokoro": Attribution(name="hexgrad", url="https://huggingface.co/hexgrad/Kokoro-82M"),
    "cosyvoice3": Attribution(name="FunAudioLLM", url="https://github.com/FunAudioLLM/CosyVoice"),
    "magpie": Attribution(name="NVIDIA", url="https://github.com/NVIDIA/NeMo"),
}
"""Who made each family's model (a voice's ``attribution``); voxflow for any other."""


@dataclass(frozen=True)
class WyomingVoice:
    """A served voice as Wyoming names it: `name` stands for voice `voice` of model `model`."""

    name: str
    model: str
    voice: str
    languages: tuple[str, ...]  # BCP 47 case (en-US), the voice's own first


def wyoming_language(tag: str) -> str:
    """A language tag as Home Assistant's Wyoming voices write it: ``en-us`` -> ``en_US``,
    ``ja`` -> ``ja`` (wyoming-piper's form)."""
    return tag_case(tag).replace("-", "_")


def served_voices(engine: Engine) -> list[WyomingVoice]:
    """Every voice of every loaded model, in serving order, named as the module says."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for model, served in engine.models.items():
        family = served.family
        if family is None:
            continue  # not loaded (yet)
        for voice_id in family.voices:
            found.append((model, voice_id, tuple(voice_languages(family, voice_id))))
    counts: dict[str, int] = {}
    for _, voice_id, _ in found:
        counts[voice_id] = counts.get(voice_id, 0) + 1
    return [WyomingVoice(voice_id if counts[voice_id] == 1 else f"{model}:{voice_id}", model,
                         voice_id, languages) for model, voice_id, languages in found]


def wyoming_info(engine: Engine) -> Info:
    """The ``info`` event's content: the ``voxflow`` program and its voices (module docstring).
    A model on random weights says so in each voice's description."""
    voices = []
    for v in served_voices(engine):
        family = engine.family(v.model)
        note = family.random_weights_note()
        description = f"{v.voice} ({v.model})" + (f", {note}" if note else "")
        voices.append(TtsVoice(
            name=v.name, attribution=FAMILY_ATTRIBUTION.get(family.family, VOXFLOW),
            installed=True, description=description, version=None,
            languages=[wyoming_language(tag) for tag in v.languages],
        ))
    program = TtsProgram(
        name=PROGRAM, attribution=VOXFLOW, installed=True,
        description="voxflow: batched, streaming text-to-speech", version=__version__,
        voices=voices, supports_synthesize_streaming=True,
    )
    return Info(tts=[program])


def _language_key(tag: str) -> str:
    return tag.replace("_", "-").lower()


def pick_voice(engine: Engine, name: str | None, language: str | None) -> tuple[WyomingVoice,
                                                                                  str | None]:
    """The voice a ``synthesize`` asks for, and the language to read in (BCP 47, or None for
    the voice's choice).

    By `name` (as `served_voices` names it, a voice id served by one model, or
    ``model:voice``); else the first voice whose languages hold `language` exactly, else one
    whose primary language matches (``en`` finds ``en_US``); else the first model's default
    voice.

    Raises:
        InvalidRequestError: no voice of that name (``voice_not_found``) or none speaking
            that language (``unsupported_language``); no model loaded (``voice_not_found``).
    """
    voices = served_voices(engine)
    if name is not None:
        for v in voices:
            if name in (v.name, f"{v.model}:{v.voice}"):
                return v, None
        raise InvalidRequestError(
            f"Voice {echo(name)} not found; 'describe' lists the voices.",
            param="voice", code="voice_not_found")
    if language is not None:
        wanted = _language_key(language)
        for match in (lambda t: _language_key(t) == wanted,
                      lambda t: _language_key(t).split("-")[0] == wanted.split("-")[0]):
            for v in voices:
                hit = next((t for t in v.languages if match(t)), None)
                if hit is not None:
                    return v, tag_case(hit)
        raise InvalidRequestError(
            f"No voice speaks {echo(language)}; 'describe' lists the voices and languages.",
            param="language", code="unsupported_language")
    for v in voices:
        if v.voice == engine.family(v.model).default_voice:
            return v, None
    raise InvalidRequestError("No voice is served yet.", param="voice", code="voice_not_found")
