"""Saved CosyVoice3 voices: the folder `POST /v1/audio/voices` writes to (issue 11).

A saved voice is a voice file (`voices.py`, spec §9.5) named ``NAME.safetensors`` in the model's
saved-voices folder (`CosyVoice3Settings.saved_voices_dir`, default `default_saved_voices_dir`).
Besides the spec's metadata (``language``, ``prompt_text``) a saved file records the served
model it was made for (``voxflow_model``) and its speech-token count S (``speech_token_size``),
so a file of another model is refused with a clear message.

Writes are atomic: the file is written to a hidden temporary file in the same folder
(``.NAME.XXXX.tmp``, never read as a voice), flushed to disk, then renamed over the final name
with `os.replace`; any failure removes the temporary file, so a voice is either whole on disk or
absent. Temporary files left by a crash are removed at start-up (`clean_temporary_files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torch import Tensor

from voxflow.atomic_files import (
    NAME_MAX_CHARS,
    NAME_PATTERN,
    clean_temporary_files,
    data_home,
    delete_file,
    write_atomic,
)
from voxflow.atomic_files import name_problem as stored_name_problem
from voxflow.models.cosyvoice3.voices import (
    RANDOM_PREFIX,
    VOICE_SUFFIX,
    Voice,
    VoiceError,
    load_voice,
    validate_voice,
)

MODEL_KEY = "voxflow_model"
SIZE_KEY = "speech_token_size"


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a saved voice, or None when it can
    (`voxflow.atomic_files.name_problem`, the voice file suffix reserved)."""
    return stored_name_problem(name, VOICE_SUFFIX)


def saved_name(voice_id: str) -> str:
    """The file name stem of a served voice id (``random-NAME`` -> ``NAME``)."""
    return voice_id.removeprefix(RANDOM_PREFIX)


def default_saved_voices_dir(model: str) -> Path:
    """``$XDG_DATA_HOME/voxflow/voices/MODEL`` (``~/.local/share/...`` without it)."""
    return data_home() / "voices" / model


def saved_metadata(voice: Voice, model: str, speech_token_size: int) -> dict[str, str]:
    """The metadata a saved voice file carries (spec's keys plus model and S)."""
    return {**voice.metadata(), MODEL_KEY: model, SIZE_KEY: str(speech_token_size)}


def check_model_metadata(
    metadata: Mapping[str, str], *, model: str, speech_token_size: int, source: str
) -> None:
    """Refuse a voice file made for another model.

    Raises:
        VoiceError: its ``speech_token_size`` is not `speech_token_size`, or its
            ``voxflow_model`` is not `model` (files without these keys pass).
    """
    size = metadata.get(SIZE_KEY)
    if size is not None and size != str(speech_token_size):
        raise VoiceError(f"voice {source}: made for a model with {size} speech tokens; model "
                         f"'{model}' has {speech_token_size}")
    made_for = metadata.get(MODEL_KEY)
    if made_for is not None and made_for != model:
        raise VoiceError(f"voice {source}: made for model '{made_for}', not '{model}'")


def write_voice_atomic(
    voice: Voice, directory: Path, *, model: str, speech_token_size: int
) -> Path:
    """Validate `voice` and write it as ``directory/NAME.safetensors`` atomically.

    The folder is created if needed. The file is replaced whole or not at all: written to a
    temporary file beside it, fsynced, then `os.replace`d; on any error the temporary file is
    removed and the error re-raised. Returns the final path.

    Raises:
        VoiceError: the voice fails `validate_voice` (nothing is written).
        OSError: the folder or file cannot be written (nothing is left behind).
    """
    path = directory / f"{voice.name}{VOICE_SUFFIX}"
    write_atomic(path, voice_file_bytes(voice, model=model, speech_token_size=speech_token_size,
                                        source=str(path)))
    return path


def voice_file_bytes(voice: Voice, *, model: str, speech_token_size: int, source: str) -> bytes:
    """The saved voice file of `voice` (safetensors bytes, `saved_metadata`), validated first.

    Raises:
        VoiceError: the voice fails `validate_voice` (the message names `source`).
    """
    from safetensors.torch import save

    metadata = saved_metadata(voice, model, speech_token_size)
    validate_voice(voice.tensors(), metadata, speech_token_size=speech_token_size, source=source)
    tensors: dict[str, Tensor] = {k: v.contiguous() for k, v in voice.tensors().items()}
    return save(tensors, metadata=metadata)


def delete_voice_file(directory: Path, name: str) -> None:
    """Remove ``directory/NAME.safetensors`` (missing is fine). Raises OSError otherwise."""
    delete_file(directory / f"{name}{VOICE_SUFFIX}")


def load_saved_voices(
    directory: Path, *, model: str, speech_token_size: int
) -> dict[str, Voice]:
    """Every saved voice in `directory` by name (an absent folder has none).

    Raises:
        VoiceError: a file is invalid, badly named or made for another model; the message
            names the file and says how to start without it.
    """
    clean_temporary_files(directory)
    if not directory.exists():
        return {}
    if not directory.is_dir():
        raise VoiceError(f"saved_voices_dir {directory}: not a directory")
    voices: dict[str, Voice] = {}
    for path in sorted(directory.glob("*" + VOICE_SUFFIX)):
        hint = " (a saved voice: fix or remove the file to start without it)"
        name = path.name.removesuffix(VOICE_SUFFIX)
        problem = name_problem(name)
        try:
            if problem is not None:
                raise VoiceError(f"voice {path}: bad voice name: {problem}")
            voice = load_voice(path, speech_token_size=speech_token_size)
            check_model_metadata(_metadata(path), model=model,
                                 speech_token_size=speech_token_size, source=str(path))
        except VoiceError as exc:
            raise VoiceError(f"{exc}{hint}") from exc
        voices[name] = voice
    return voices


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


__all__ = ["NAME_MAX_CHARS", "NAME_PATTERN", "check_model_metadata", "clean_temporary_files",
           "default_saved_voices_dir", "delete_voice_file", "load_saved_voices", "name_problem",
           "saved_name", "voice_file_bytes", "write_voice_atomic"]
