"""``POST /v1/audio/voices`` and ``DELETE /v1/audio/voices/{name}``: saved voices (issue 11).

POST takes ``multipart/form-data``: ``name`` and ``model`` (required), then either ``audio`` (a
recording) with ``text`` (its transcript), or ``features`` (a precomputed prompt-feature file),
and optionally ``language``. The body is read with a byte limit (`server.max_voice_upload_bytes`:
a larger ``Content-Length`` is refused before reading, a larger body as soon as it passes the
limit, both 413), then parsed; the model's family builds and saves the voice
(`voxflow.models.cloning.VoiceCloning`, in a worker thread). A family that cannot clone answers
400 naming the model. Every error is in the OpenAI shape (docs/api.md, "Saved voices").

DELETE takes the voice id and, optionally, ``?model=`` (needed only when several models have a
voice of that id).

Under Ray Serve (``app.state.voice_sync``, `voxflow.server.voice_sync`) a voice is created and
deleted on every replica: the family publishes a new voice before serving it, and DELETE
publishes the deletion before deleting it here; a voice this replica does not know yet is looked
up in the store first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from voxflow.engine.engine import Engine
from voxflow.errors import (
    InvalidRequestError,
    PayloadTooLargeError,
    VoiceForbiddenError,
    VoiceNotFoundError,
    echo,
)
from voxflow.models.base import ModelFamily
from voxflow.models.cloning import VoiceCloning, VoiceUpload
from voxflow.server.listings import voice_entry
from voxflow.server.voice_sync import SharedVoices, VoiceSync

TEXT_FIELDS = ("name", "model", "text", "language")
FILE_FIELDS = ("audio", "features")
MAX_TEXT_FIELD_BYTES = 64_000  # a transcript is at most 1,000 characters; a field this big is junk

FORM_EXAMPLE = ("curl -F name=alice -F model=cosyvoice3 -F features=@alice.safetensors "
                "http://HOST/v1/audio/voices")


def _too_large(limit: int, size: int | None = None) -> PayloadTooLargeError:
    got = f" ({size:,} bytes)" if size is not None else ""
    return PayloadTooLargeError(
        f"The upload is larger than the server's limit of {limit:,} bytes{got} "
        "(server.max_voice_upload_bytes); send a shorter recording (3-10 s is best) or raise "
        "the limit.")


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The request body, refused as soon as it passes `limit` bytes.

    Raises:
        PayloadTooLargeError: ``Content-Length`` over `limit`, or more bytes than that sent.
        InvalidRequestError: a ``Content-Length`` that is not a number.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise InvalidRequestError("Content-Length is not a number.",
                                      code="invalid_body") from None
        if size > limit:
            raise _too_large(limit, size)
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def _parse_form(request: Request, body: bytes) -> FormData:
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise InvalidRequestError(
            "POST /v1/audio/voices takes multipart/form-data (fields name, model, and audio + "
            f"text or features), e.g. {FORM_EXAMPLE}.", code="invalid_body")

    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    parser = MultiPartParser(request.headers, stream(), max_files=len(FILE_FIELDS),
                             max_fields=len(TEXT_FIELDS), max_part_size=MAX_TEXT_FIELD_BYTES)
    try:
        return await parser.parse()
    except MultiPartException as exc:
        raise InvalidRequestError(f"The multipart body could not be read: {exc.message}.",
                                  code="invalid_body") from exc


def _upload(text: dict[str, str], files: dict[str, bytes]) -> VoiceUpload:
    """The upload of a form's checked fields and files (`_check_files`)."""
    _check_files(text, files)
    return VoiceUpload(name=text["name"], audio=files.get("audio"), text=text.get("text"),
                       features=files.get("features"), language=text.get("language") or None)


async def _fields(form: FormData) -> tuple[dict[str, str], dict[str, bytes]]:
    """The text fields and the files' bytes; refuses unknown, repeated or mistyped fields."""
    for key in form.keys():
        if key not in TEXT_FIELDS + FILE_FIELDS:
            raise InvalidRequestError(
                f"Unrecognized form field supplied: {echo(key)}; the fields are "
                f"{', '.join(TEXT_FIELDS + FILE_FIELDS)}.", param=key, code="unknown_parameter")
        if len(form.getlist(key)) > 1:
            raise InvalidRequestError(f"Form field {echo(key)} is given more than once.",
                                      param=key, code="invalid_value")
    text: dict[str, str] = {}
    for key in TEXT_FIELDS:
        value = form.get(key)
        if isinstance(value, UploadFile):
            raise InvalidRequestError(f"Form field '{key}' must be text, not a file.",
                                      param=key, code="invalid_type")
        if value is not None:
            text[key] = value
    files: dict[str, bytes] = {}
    for key in FILE_FIELDS:
        value = form.get(key)
        if isinstance(value, str):
            raise InvalidRequestError(f"Form field '{key}' must be a file upload, not text.",
                                      param=key, code="invalid_type")
        if value is not None:
            files[key] = await value.read()
    return text, files


def _check_required(text: dict[str, str]) -> None:
    """The fields every upload needs: name and model."""
    for key in ("name", "model"):
        if not text.get(key):
            raise InvalidRequestError(f"Missing required parameter: '{key}'.", param=key,
                                      code="missing_required_parameter")


def _check_files(text: dict[str, str], files: dict[str, bytes]) -> None:
    """Either audio + text or features, none empty."""
    if ("audio" in files) == ("features" in files):
        raise InvalidRequestError(
            "Send either 'audio' (a recording, with 'text' its transcript) or 'features' (a "
            "prompt-feature file), not " + ("both." if files else "neither."),
            param="audio", code="missing_required_parameter" if not files else "invalid_value")
    if "audio" in files and not text.get("text", "").strip():
        raise InvalidRequestError("Missing required parameter: 'text' (the transcript of the "
                                  "recording).", param="text", code="missing_required_parameter")
    if "features" in files and "text" in text:
        raise InvalidRequestError("'text' goes with 'audio'; a features file carries its own "
                                  "transcript.", param="text", code="invalid_value")
    for key, data in files.items():
        if not data:
            raise InvalidRequestError(f"The '{key}' file is empty.", param=key,
                                      code="invalid_value")


def cloning_family(engine: Engine, model: str) -> tuple[str, VoiceCloning]:
    """The served model name and family for `model` (an alias too).

    Raises:
        ModelNotFoundError: not served (404); EngineNotReadyError (503).
        InvalidRequestError: the model's family cannot clone voices (400, names the model).
    """
    name = engine.aliases.models.get(model, model)
    if name not in engine.models:
        raise engine.aliases.model_not_found(engine, model)
    family = engine.family(name)
    if not isinstance(family, VoiceCloning):
        able = [n for n, m in engine.models.items() if isinstance(m.family, VoiceCloning)]
        raise InvalidRequestError(
            f"Model '{name}' ({family.family}) does not support voice cloning; its voices are "
            f"fixed. Models that do: {', '.join(able) or 'none served here'}.",
            param="model", code="voice_cloning_unsupported")
    return name, family


async def create_voice(request: Request) -> dict:
    """`POST /v1/audio/voices` (see the module docstring). Returns the voice's list entry."""
    engine: Engine = request.app.state.engine
    limit = request.app.state.settings.server.max_voice_upload_bytes
    body = await read_limited_body(request, limit)
    form = await _parse_form(request, body)
    try:
        text, files = await _fields(form)
    finally:
        await form.close()
    _check_required(text)
    # a model that cannot clone is refused before its files are judged: no fix to them helps
    name, family = cloning_family(engine, text["model"])
    upload = _upload(text, files)
    voice_id = await asyncio.to_thread(family.create_voice, upload)
    return voice_entry(name, engine.family(name), voice_id) | {"saved": True}


async def delete_voice(request: Request, name: str, model: str | None = None) -> dict:
    """`DELETE /v1/audio/voices/{name}`: remove a saved voice (``?model=`` to choose)."""
    engine: Engine = request.app.state.engine
    sync: VoiceSync | None = getattr(request.app.state, "voice_sync", None)
    if sync is not None and not any(m.family is not None and name in m.family.voices
                                    for m in engine.models.values()):
        await sync.refresh()  # made on another replica a moment ago
    candidates: list[tuple[str, ModelFamily]]
    if model is not None:
        served = engine.aliases.models.get(model, model)
        if served not in engine.models:
            raise engine.aliases.model_not_found(engine, model)
        one = engine.family(served)
        candidates = [(served, one)] if name in one.voices else []
    else:
        candidates = [(n, m.family) for n, m in engine.models.items()
                      if m.family is not None and name in m.family.voices]
    if not candidates:
        where = f"model '{model}'" if model is not None else "any served model"
        raise VoiceNotFoundError(f"No voice {echo(name)} in {where}; GET /v1/audio/voices "
                                 "lists them.", param="name")
    if len(candidates) > 1:
        raise InvalidRequestError(
            f"Voice {echo(name)} exists in several models ({', '.join(n for n, _ in candidates)});"
            " name one with ?model=.", param="model", code="ambiguous_voice")
    served, family = candidates[0]
    if not isinstance(family, VoiceCloning):
        raise VoiceForbiddenError(
            f"Voice '{name}' of model '{served}' is a built-in voice of a model that does not "
            "support voice cloning; it cannot be deleted.", param="name",
            code="voice_not_deletable")
    aliases = sorted(a for a, v in engine.aliases.voices.get(served, {}).items() if v == name)
    if aliases:  # the alias would name a voice that is gone: refused, not left dangling
        raise VoiceForbiddenError(
            f"Voice '{name}' of model '{served}' is named by the voice alias(es) "
            f"{', '.join(aliases)} in the configuration (voice_aliases); remove them there "
            "first.", param="name", code="voice_not_deletable")
    if sync is not None and isinstance(family, SharedVoices):
        family.check_deletable(name)  # every refusal before the other replicas hear of it
        shared = family.shared_name(name)
        if shared is not None:
            await asyncio.to_thread(sync.publish_delete, served, shared)
    family.delete_voice(name)
    cache = getattr(request.app.state, "audio_cache", None)
    if cache is not None:  # its audio is gone with it (voxflow.server.audio_cache)
        cache.drop_voice(served, name)
    return {"id": name, "object": "voice", "model": served, "deleted": True}


__all__ = ["cloning_family", "create_voice", "delete_voice", "read_limited_body"]
