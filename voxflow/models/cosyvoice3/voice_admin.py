"""CosyVoice3's side of the voice API (`voxflow.models.cloning.VoiceCloning`, issue 11).

`SavedVoices` is mixed into `CosyVoice3Family`: it loads the saved voices at start-up, creates
voices from a recording (`prompt_audio.PromptEncoder`, when the ONNX models are there) or from a
prompt-feature file, writes them atomically (`saved_voices.write_voice_atomic`) and deletes them.

In-flight requests: the stages look a request's voice up by id (`voice_models`, `flow_prompt`)
at each segment. A speech request holds its voice (`hold_voice`) from admission to its end; a
voice deleted while held leaves the served list at once (new requests get a 400, the file is
gone) but its features stay loaded, "retired", until the last holder ends, so a queued or
running request finishes with the voice it was admitted with. A voice of the same name cannot
be created while a retired one is still held (409): a request must never switch voices midway.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from voxflow.errors import (
    ConflictError,
    InvalidRequestError,
    VoiceForbiddenError,
    VoiceNotFoundError,
    echo,
    storage_error,
)
from voxflow.models.base import Voice as ServedVoice
from voxflow.models.cloning import VoiceUpload
from voxflow.models.cosyvoice3.prompt_audio import (
    PromptAudioError,
    PromptEncoder,
    TranscriptError,
    check_transcript,
)
from voxflow.models.cosyvoice3.saved_voices import (
    check_model_metadata,
    default_saved_voices_dir,
    delete_voice_file,
    load_saved_voices,
    name_problem,
    write_voice_atomic,
)
from voxflow.models.cosyvoice3.voices import (
    TENSOR_KEYS,
    Voice,
    VoiceError,
    validate_voice,
    voice_id,
)

if TYPE_CHECKING:
    from voxflow.models.cosyvoice3.settings import CosyVoice3Settings
    from voxflow.models.cosyvoice3.text import CosyVoice3Tokenizer
    from voxflow.models.cosyvoice3.token2wav import FlowPrompt
    from voxflow.models.cosyvoice3.weights import Models

log = logging.getLogger(__name__)

DEFAULT_UPLOAD_LANGUAGE = "und"  # a recording's language when the form names none
LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8}){0,4}")  # BCP 47-ish
MAX_HEADER_BYTES = 1_000_000  # a prompt-feature file's safetensors header, at most


class SavedVoices:
    """The voice API of a CosyVoice3 family (see the module docstring).

    The host class provides `name`, `settings`, `models`, `tokenizer`, `voice_models`,
    `_prompts`, `voices`, `default_voice`, `set_voices` and `random_weights_note`.
    """

    name: str
    settings: CosyVoice3Settings
    models: Models
    tokenizer: CosyVoice3Tokenizer
    voice_models: dict[str, Voice]
    _prompts: dict[str, FlowPrompt]
    voices: dict[str, ServedVoice]
    default_voice: str
    set_voices: Callable[[dict[str, ServedVoice], str], None]

    def _init_saved_voices(self) -> None:
        """Set up the bookkeeping; call before `_read_saved_voices`."""
        self.saved_dir: Path = (self.settings.saved_voices_dir
                                or default_saved_voices_dir(self.name))
        self._saved: set[str] = set()  # served ids of saved (deletable) voices
        self._retired: set[str] = set()  # deleted while held: features kept until released
        self._holds: Counter[str] = Counter()
        self._voice_lock = threading.RLock()
        self._encoder: PromptEncoder | None = None

    @property
    def _random(self) -> bool:
        return self.models.random_note is not None

    def _read_saved_voices(self, builtin: dict[str, Voice]) -> dict[str, Voice]:
        """The saved voices by served id (start-up). Raises VoiceError: an invalid file, or
        one whose name a built-in voice already serves."""
        loaded = load_saved_voices(self.saved_dir, model=self.name,
                                   speech_token_size=self.models.lm.speech_token_size)
        voices: dict[str, Voice] = {}
        for name, voice in loaded.items():
            vid = voice_id(name, self._random)
            if vid in builtin:
                raise VoiceError(f"voice {voice.source}: the saved voice '{vid}' has the id of "
                                 "a built-in voice; rename or remove the file")
            voices[vid] = voice
            self._saved.add(vid)
        if voices:
            log.info("model %s: %d saved voice(s) from %s", self.name, len(voices), self.saved_dir)
        return voices

    # ---- VoiceCloning ------------------------------------------------------------------------
    def saved_voice_ids(self) -> list[str]:
        """The served ids of the voices saved through the API, sorted."""
        with self._voice_lock:
            return sorted(self._saved)

    def hold_voice(self, voice_id: str) -> Callable[[], None]:
        """Keep `voice_id` loaded until the returned callback runs (it may run more than once;
        only the first call counts)."""
        with self._voice_lock:
            self._holds[voice_id] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            with self._voice_lock:
                self._holds[voice_id] -= 1
                if self._holds[voice_id] <= 0:
                    del self._holds[voice_id]
                    if voice_id in self._retired:
                        self._forget(voice_id)

        return release

    def delete_voice(self, voice_id: str) -> None:
        """Delete a saved voice (file, then served list); see `VoiceCloning.delete_voice`."""
        with self._voice_lock:
            if voice_id not in self.voices:
                raise VoiceNotFoundError(
                    f"Model '{self.name}' has no voice {echo(voice_id)}. Saved voices: "
                    f"{', '.join(sorted(self._saved)) or 'none'}.", param="name")
            if voice_id not in self._saved:
                raise VoiceForbiddenError(
                    f"Voice '{voice_id}' is a built-in voice of model '{self.name}' (from its "
                    "configuration) and cannot be deleted; only voices created with POST "
                    "/v1/audio/voices can.", param="name", code="voice_not_deletable")
            if voice_id == self.default_voice:
                raise VoiceForbiddenError(
                    f"Voice '{voice_id}' is the default voice of model '{self.name}' "
                    "(default_voice) and cannot be deleted.", param="name",
                    code="voice_not_deletable")
            try:
                delete_voice_file(self.saved_dir, self.voice_models[voice_id].name)
            except OSError as exc:
                raise storage_error(exc, f"delete voice {echo(voice_id)}",
                                    self.saved_dir) from exc
            self._saved.discard(voice_id)
            served = {k: v for k, v in self.voices.items() if k != voice_id}
            self.set_voices(served, self.default_voice)
            if self._holds[voice_id] > 0:
                self._retired.add(voice_id)  # requests still use it: freed by the last one
            else:
                self._forget(voice_id)
            log.info("model %s: voice %s deleted", self.name, voice_id)

    def create_voice(self, upload: VoiceUpload) -> str:
        """Build, validate, write and serve a voice; see `VoiceCloning.create_voice`."""
        problem = name_problem(upload.name)
        if problem is not None:
            raise InvalidRequestError(f"Invalid value for 'name': {echo(upload.name)}; "
                                      f"{problem}.", param="name", code="invalid_voice_name")
        language = upload.language
        if language is not None and (len(language) > 35 or not LANGUAGE_TAG.fullmatch(language)):
            raise InvalidRequestError(
                f"Invalid value for 'language': {echo(upload.language)}; a language tag of "
                "letters, digits and '-' (at most 35 characters) such as 'en' or 'zh-CN'.",
                param="language", code="invalid_value")
        vid = voice_id(upload.name, self._random)
        self._check_free(vid)
        try:
            voice = (self._voice_from_features(upload) if upload.features is not None
                     else self._voice_from_audio(upload))
        except PromptAudioError as exc:
            param = "features" if upload.features is not None else "audio"
            if isinstance(exc, TranscriptError):
                param = "text"
            raise InvalidRequestError(f"Cannot create voice {echo(upload.name)}: {exc}.",
                                      param=param, code="invalid_voice_audio"
                                      if param == "audio" else "invalid_voice") from exc
        with self._voice_lock:
            self._check_free(vid)
            try:
                write_voice_atomic(voice, self.saved_dir, model=self.name,
                                   speech_token_size=self.models.lm.speech_token_size)
            except OSError as exc:  # nothing was left behind (write_voice_atomic)
                raise storage_error(exc, f"save voice {echo(upload.name)}", self.saved_dir) from exc
            self.voice_models[vid] = voice
            self._prompts[vid] = voice.flow_prompt(self.models.device)
            self._saved.add(vid)
            served = dict(self.voices)
            served[vid] = ServedVoice(vid, voice.language, self._sample_rate(), self._family())
            self.set_voices(served, self.default_voice)
        log.info("model %s: voice %s created (%d prompt tokens)", self.name, vid,
                 voice.prompt_tokens)
        return vid

    # ---- helpers -----------------------------------------------------------------------------
    def _family(self) -> str:
        return str(getattr(self, "family", "cosyvoice3"))

    def _sample_rate(self) -> int:
        from voxflow.models.cosyvoice3.weights import SAMPLE_RATE

        return SAMPLE_RATE

    def _check_free(self, vid: str) -> None:
        with self._voice_lock:
            if vid in self.voices:
                raise ConflictError(f"Model '{self.name}' already has a voice '{vid}'; delete "
                                    "it first or choose another name.", param="name",
                                    code="voice_exists")
            if vid in self._retired:
                raise ConflictError(
                    f"Voice '{vid}' was deleted but {self._holds[vid]} request(s) still speak "
                    "with it; create it again once they finish.", param="name",
                    code="voice_in_use")

    def _forget(self, vid: str) -> None:
        self._retired.discard(vid)
        self.voice_models.pop(vid, None)
        self._prompts.pop(vid, None)

    def _voice_from_audio(self, upload: VoiceUpload) -> Voice:
        if upload.audio is None:
            raise PromptAudioError("no audio")
        with self._voice_lock:
            if self._encoder is None:
                self._encoder = PromptEncoder.load(self.settings.prompt_models_folder)
            encoder = self._encoder
        text = check_transcript(upload.text or "")
        ids = self.tokenizer.prompt_text_ids(text)
        return encoder.build_voice(upload.name, upload.audio, text, ids,
                                   upload.language or DEFAULT_UPLOAD_LANGUAGE)

    def _voice_from_features(self, upload: VoiceUpload) -> Voice:
        """A voice from an uploaded voice file (spec §9.5), checked key by key."""
        from safetensors import SafetensorError
        from safetensors.torch import load

        data = upload.features or b""
        try:
            metadata = _safetensors_metadata(data)
            tensors = load(data)
        except (SafetensorError, ValueError) as exc:
            raise PromptAudioError("the features file is not a readable safetensors voice "
                                   f"file ({exc})") from exc
        language = upload.language or metadata.get("language", "")
        metadata = {**metadata, "language": language}
        size = self.models.lm.speech_token_size
        try:
            validate_voice(tensors, metadata, speech_token_size=size, source="upload")
            check_model_metadata(metadata, model=self.name, speech_token_size=size,
                                 source="upload")
        except VoiceError as exc:
            raise PromptAudioError(str(exc).removeprefix("voice upload: ")) from exc
        return Voice(name=upload.name, language=language, prompt_text=metadata["prompt_text"],
                     source="upload", **{k: tensors[k] for k in TENSOR_KEYS})


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` strings of a safetensors file's bytes (header only).

    Raises ValueError: too short, a header length past the data or over MAX_HEADER_BYTES, or
    not a JSON object of strings.
    """
    if len(data) < 8:
        raise ValueError("too short")
    (length,) = struct.unpack("<Q", data[:8])
    if length > min(len(data) - 8, MAX_HEADER_BYTES):
        raise ValueError("bad header length")
    try:
        header = json.loads(data[8:8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError("header is not JSON") from exc
    meta = header.get("__metadata__", {}) if isinstance(header, dict) else None
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("metadata is not a map of strings")
    return meta


def tensor_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """A safetensors file's bytes (for tests and tools that make feature files)."""
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata)


__all__ = ["SavedVoices", "tensor_bytes"]
