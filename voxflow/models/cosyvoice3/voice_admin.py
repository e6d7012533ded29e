"""CosyVoice3's side of the voice API (`voxflow.models.cloning.VoiceCloning`, issue 11).

`SavedVoices` is mixed into `CosyVoice3Family`: it loads the saved voices at start-up, creates
voices from a recording (`prompt_audio.PromptEncoder`, when the ONNX models are there) or from a
prompt-feature file, writes them atomically (`saved_voices.voice_file_bytes`, `write_atomic`) and
deletes them.

In-flight requests: the stages look a request's voice up by id (`voice_models`, `flow_prompt`)
at each segment. A speech request holds its voice (`hold_voice`) from admission to its end; a
voice deleted while held leaves the served list at once (new requests get a 400, the file is
gone) but its features stay loaded, "retired", until the last holder ends, so a queued or
running request finishes with the voice it was admitted with. A voice of the same name cannot
be created while a retired one is still held (409): a request must never switch voices midway.

Replicas (Ray Serve): `voxflow.server.voice_sync.VoiceSync` shares the saved voices of every
replica through a store. It sets `voice_publisher`, which `create_voice` calls with the new
file's bytes after writing it and before serving it (a refusal removes the file again), and
applies the other replicas' changes through the `SharedVoices` methods at the end of the class
(`prepare_shared_voice` and `forget_shared_file` in a worker thread, the others on the event
loop).
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

from voxflow.atomic_files import write_atomic
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
    voice_file_bytes,
)
from voxflow.models.cosyvoice3.voices import (
    TENSOR_KEYS,
    VOICE_SUFFIX,
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
        self._pending: set[str] = set()  # written, being published to the other replicas
        self._voice_lock = threading.RLock()
        self._encoder: PromptEncoder | None = None
        # set by voxflow.server.voice_sync under Ray Serve: publishes a new voice (name, bytes)
        self.voice_publisher: Callable[[str, bytes], None] | None = None

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

    def check_deletable(self, voice_id: str) -> None:
        """Raise what `delete_voice` raises before it changes anything.

        Raises:
            VoiceNotFoundError: no voice by that id (404).
            VoiceForbiddenError: a built-in or the default voice (403).
        """
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

    def delete_voice(self, voice_id: str) -> None:
        """Delete a saved voice (file, then served list); see `VoiceCloning.delete_voice`."""
        with self._voice_lock:
            self.check_deletable(voice_id)
            try:
                delete_voice_file(self.saved_dir, self.voice_models[voice_id].name)
            except OSError as exc:
                raise storage_error(exc, f"delete voice {echo(voice_id)}",
                                    self.saved_dir) from exc
            self._unserve(voice_id)
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
        path = self.saved_dir / f"{voice.name}{VOICE_SUFFIX}"
        data = voice_file_bytes(voice, model=self.name, source=str(path),
                                speech_token_size=self.models.lm.speech_token_size)
        with self._voice_lock:
            self._check_free(vid)
            try:
                write_atomic(path, data)
            except OSError as exc:  # nothing was left behind (write_atomic)
                raise storage_error(exc, f"save voice {echo(upload.name)}", self.saved_dir) from exc
            publisher = self.voice_publisher
            if publisher is not None:
                self._pending.add(vid)
        if publisher is not None:  # the other replicas first, out of the lock (a store call)
            self._publish(publisher, vid, voice.name, data)
        with self._voice_lock:
            self._pending.discard(vid)
            self._serve(vid, voice)
        log.info("model %s: voice %s created (%d prompt tokens)", self.name, vid,
                 voice.prompt_tokens)
        return vid

    # ---- SharedVoices (voxflow.server.voice_sync): the other replicas' changes --------------
    def shared_voice_files(self) -> dict[str, bytes]:
        """The saved voices served now, name -> their file's bytes (a file that cannot be read
        is left out, with a warning)."""
        with self._voice_lock:
            names = sorted(self.voice_models[vid].name for vid in self._saved)
        files: dict[str, bytes] = {}
        for name in names:
            try:
                files[name] = (self.saved_dir / f"{name}{VOICE_SUFFIX}").read_bytes()
            except OSError as exc:
                log.warning("model %s: saved voice %s not shared: %s", self.name, name, exc)
        return files

    def shared_name(self, voice_id: str) -> str | None:
        """The file name of saved voice `voice_id`; None when it is not a saved voice."""
        with self._voice_lock:
            return self.voice_models[voice_id].name if voice_id in self._saved else None

    def shared_voice_id(self, name: str) -> str:
        """The id saved voice `name` is served as (``random-NAME`` with random weights)."""
        return voice_id(name, self._random)

    def prepare_shared_voice(self, name: str, data: bytes) -> Voice:
        """Check a voice file's bytes from another replica as a saved file is checked at
        start-up, and write them to `saved_dir` atomically (worker thread).

        Raises:
            VoiceError: a bad name, not a voice file, or one of another model.
            OSError: the file cannot be written.
        """
        path = self.saved_dir / f"{name}{VOICE_SUFFIX}"
        problem = name_problem(name)
        if problem is not None:
            raise VoiceError(f"voice {path}: bad voice name: {problem}")
        voice = voice_from_file(data, name, model=self.name, source=f"{path} (shared)",
                                speech_token_size=self.models.lm.speech_token_size)
        write_atomic(path, data)
        return voice

    def forget_shared_file(self, name: str) -> None:
        """Remove saved voice `name`'s file (missing is fine). Raises OSError."""
        delete_voice_file(self.saved_dir, name)

    def serve_shared_voice(self, name: str, voice: Voice) -> bool:
        """Serve a voice from another replica (event loop), replacing a saved one of that
        name. False while a deleted voice of that name is still held by requests (the one
        served is retired now, the new one comes at a later call)."""
        vid = self.shared_voice_id(name)
        with self._voice_lock:
            if vid in self.voices and (vid not in self._saved or vid == self.default_voice):
                log.error("model %s: voice %s from another replica not served: a built-in "
                          "or the default voice has its id here", self.name, vid)
                return True
            if vid in self._saved:
                self._unserve(vid)  # replaced: requests holding the old one keep it
            if vid in self._retired or vid in self._pending:
                return False
            self._serve(vid, voice)
        return True

    def drop_shared_voice(self, name: str) -> bool:
        """Stop serving saved voice `name`, deleted on another replica (event loop; the default
        voice is kept, with an error logged). Returns whether it was served here."""
        vid = self.shared_voice_id(name)
        with self._voice_lock:
            if vid not in self._saved:
                return False
            if vid == self.default_voice:
                log.error("model %s: voice %s deleted on another replica is the default voice "
                          "here; kept", self.name, vid)
                return False
            self._unserve(vid)
            return True

    # ---- helpers -----------------------------------------------------------------------------
    def _family(self) -> str:
        return str(getattr(self, "family", "cosyvoice3"))

    def _sample_rate(self) -> int:
        from voxflow.models.cosyvoice3.weights import SAMPLE_RATE

        return SAMPLE_RATE

    def _publish(self, publisher: Callable[[str, bytes], None], vid: str, name: str,
                 data: bytes) -> None:
        """`publisher(name, data)`; if it raises, the file written is removed and the error
        re-raised (the voice was never served)."""
        try:
            publisher(name, data)
        except BaseException:
            with self._voice_lock:
                self._pending.discard(vid)
                try:
                    delete_voice_file(self.saved_dir, name)
                except OSError as exc:
                    log.warning("model %s: voice %s not published; its file stays: %s",
                                self.name, vid, exc)
            raise

    def _serve(self, vid: str, voice: Voice) -> None:
        """Serve `voice` as saved voice `vid` (holding the lock)."""
        self.voice_models[vid] = voice
        self._prompts[vid] = voice.flow_prompt(self.models.device)
        self._saved.add(vid)
        served = dict(self.voices)
        served[vid] = ServedVoice(vid, voice.language, self._sample_rate(), self._family())
        self.set_voices(served, self.default_voice)

    def _unserve(self, vid: str) -> None:
        """Stop serving saved voice `vid` (holding the lock): forgotten now, or retired until
        the last request holding it ends."""
        self._saved.discard(vid)
        served = {k: v for k, v in self.voices.items() if k != vid}
        self.set_voices(served, self.default_voice)
        if self._holds[vid] > 0:
            self._retired.add(vid)  # requests still use it: freed by the last one
        else:
            self._forget(vid)

    def _check_free(self, vid: str) -> None:
        with self._voice_lock:
            if vid in self._pending:
                raise ConflictError(f"Voice '{vid}' of model '{self.name}' is being created "
                                    "by another request.", param="name", code="voice_exists")
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


def voice_from_file(data: bytes, name: str, *, model: str, speech_token_size: int,
                    source: str) -> Voice:
    """A saved voice file's bytes as voice `name`, checked as `load_saved_voices` checks a file
    (every key, and the model it was made for).

    Raises:
        VoiceError: not a readable voice file, an invalid one, or one of another model.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        metadata = _safetensors_metadata(data)
        tensors = load(data)
    except (SafetensorError, ValueError) as exc:
        raise VoiceError(f"voice {source}: not a readable safetensors file: {exc}") from exc
    validate_voice(tensors, metadata, speech_token_size=speech_token_size, source=source)
    check_model_metadata(metadata, model=model, speech_token_size=speech_token_size,
                         source=source)
    return Voice(name=name, language=metadata["language"], prompt_text=metadata["prompt_text"],
                 source=source, **{k: tensors[k] for k in TENSOR_KEYS})


def tensor_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """A safetensors file's bytes (for tests and tools that make feature files)."""
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata)


__all__ = ["SavedVoices", "tensor_bytes", "voice_from_file"]
