"""FastAPI app factory: the engine's lifespan, the OpenAI-compatible routes, health and metrics.

Routes:
- ``POST /v1/audio/speech``: speech (see `voxflow.server.speech`).
- ``POST /v1/audio/speech/timestamps``: speech and its word timings as one JSON
  (`voxflow.server.timestamps`).
- ``WS /v1/audio/speech/stream``: speech from text sent in pieces, audio frames and events
  back (`voxflow.server.speech_stream`).
- ``GET /v1/models``: served models, OpenAI list shape, with their family and voices, then
  their aliases (``alias_of``; `voxflow.engine.aliases`).
- ``GET /v1/models/{id}``: one entry of that list, an alias too (the openai client's
  ``models.retrieve``); 404 ``model_not_found`` otherwise.
- ``GET /v1/audio/voices``: every voice (id, model, family, language, every language it
  accepts, sample rate); ``?model=``.
- ``POST /v1/audio/voices``, ``DELETE /v1/audio/voices/{name}``: saved voices of models that
  clone voices (`voxflow.server.voices`).
- ``GET /health``: 200 once every model is loaded and warmed up, else 503; per-model status,
  and whether the other routes need an API key (``api_key_required``).
- ``GET /metrics``: Prometheus text format.
- ``GET /``: the playground page (and ``/playground.js``, ``/playground.css``;
  `voxflow.server.playground`), open without a key.
- ``GET /docs`` (Swagger UI), ``/redoc`` and ``/openapi.json``: the API pages, their scripts
  and styles served from ``/docs/assets/`` (fastapi-offline's copies: no CDN, so they work
  offline), open without a key.

With ``server.api_keys`` set, every route but ``/health``, the docs pages, the playground and (with
``server.metrics_public``) ``/metrics`` needs ``Authorization: Bearer KEY``
(`voxflow.server.auth`: 401s in the OpenAI error shape).

Every response carries ``X-Request-Id`` and each speech request leaves one ``voxflow.access``
log line (`voxflow.server.request_id`). With ``server.cors_origins`` set, Starlette's
CORSMiddleware (`voxflow.server.cors`: refusals in the OpenAI error shape) answers preflights
and adds ``Access-Control-Allow-Origin`` for those origins. Every route declares the error
responses it can send (`voxflow.server.openapi`), for ``/docs``. A trailing slash is not
redirected: ``/v1/audio/speech/`` is a 404 like any unknown route.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from voxflow import __version__
from voxflow.config import ConfigError, Settings
from voxflow.engine.engine import Engine
from voxflow.jobs.manager import running_jobs
from voxflow.models.files import ModelFileError
from voxflow.server.audio_cache import AudioCache, AudioCacheCollector
from voxflow.server.auth import (
    DOCS_ASSETS,
    ApiKeyMiddleware,
    KeyRing,
    document_bearer_auth,
    open_paths,
)
from voxflow.server.body_limit import BodyLimitMiddleware
from voxflow.server.cors import OpenAICORSMiddleware
from voxflow.server.disk_cache import DiskCacheError
from voxflow.server.draining import DrainMiddleware
from voxflow.server.errors import install_error_handlers
from voxflow.server.jobs import (
    cancel_job,
    create_job,
    delete_job,
    get_job,
    get_job_audio,
    get_job_captions,
    list_jobs,
)
from voxflow.server.lexicons import delete_lexicon, get_lexicon, list_lexicons, put_lexicon
from voxflow.server.listings import audio_models_list, models_list, voices_list
from voxflow.server.openapi import error_responses, install_openapi
from voxflow.server.playground import install_playground
from voxflow.server.request_id import RequestIdMiddleware
from voxflow.server.speech import create_speech
from voxflow.server.speech_stream import STREAM_PATH, speech_stream
from voxflow.server.startup import StartupErrorMiddleware
from voxflow.server.timestamps import create_speech_timestamps
from voxflow.server.voice_sync import VoiceStore, refresh_voices, sharing_voices
from voxflow.server.voices import create_voice, delete_voice
from voxflow.wyoming.server import WyomingServer

log = logging.getLogger(__name__)

SPEECH_TYPES = ("audio/mpeg", "audio/wav", "audio/pcm", "audio/flac", "audio/ogg", "audio/aac",
                "text/event-stream")
"""Content types of a speech response (`response_format`; SSE with ``stream_format: "sse"``)."""

EXPOSED_HEADERS = ("X-Request-Id", "X-Sample-Rate", "X-Dropped-Letters", "X-Voxflow-Ignored",
                   "X-Voxflow-Instructions", "X-Voxflow-Unspeakable", "X-Voxflow-Cache",
                   "Retry-After")
"""Response headers a browser page may read when CORS is on (`server.cors_origins`)."""


VOICE_FORM = {
    "required": True,
    "content": {"multipart/form-data": {"schema": {
        "type": "object",
        "required": ["name", "model"],
        "properties": {
            "name": {"type": "string", "description": "1-64 of A-Z a-z 0-9 _ . - (a letter "
                     "or digit first)"},
            "model": {"type": "string", "description": "a model that clones voices"},
            "audio": {"type": "string", "format": "binary",
                      "description": "a 1-30 s recording (with text)"},
            "text": {"type": "string", "description": "the recording's transcript"},
            "features": {"type": "string", "format": "binary",
                         "description": "a prompt-feature file (instead of audio)"},
            "language": {"type": "string", "description": "the voice's language tag"},
        },
    }}},
}
"""The multipart form of ``POST /v1/audio/voices``, for /docs (the route parses it itself)."""


# The routes read the engine from `request.app.state`, never from a closure: FastAPI caches
# endpoint functions process-wide (lru_cache in fastapi.dependencies), so a closure over the
# engine would keep every app's models loaded after the app is gone (tests build many apps).


async def list_models(request: Request) -> dict:
    """`GET /v1/models`."""
    state = request.app.state
    return models_list(state.engine, state.engine.aliases)


async def get_model(request: Request, model_id: str) -> dict:
    """`GET /v1/models/{model_id}`: the entry `GET /v1/models` lists for it (an alias too,
    with ``alias_of``), as the openai client's ``models.retrieve`` expects; else a 404."""
    for entry in (await list_models(request))["data"]:
        if entry["id"] == model_id:
            return entry
    engine: Engine = request.app.state.engine
    raise engine.aliases.model_not_found(engine, model_id)  # the message speech gives


async def list_voices(request: Request, model: str | None = None) -> dict:
    """`GET /v1/audio/voices` (``?model=`` filters, aliases included)."""
    state = request.app.state
    await refresh_voices(state)  # replicas: the voices saved on the others too
    return voices_list(state.engine, model, state.engine.aliases)


async def list_audio_models(request: Request) -> dict:
    """`GET /v1/audio/models`: the models as Open WebUI reads them (``{"models": [{"id"}]}``)."""
    state = request.app.state
    return audio_models_list(state.engine, state.engine.aliases)


async def health(request: Request) -> JSONResponse:
    """`GET /health`: 200 once every model is ready, else 503 (``status``: ``not_ready``, or
    ``draining`` once the server is stopping); ``api_key_required`` tells a
    client (a web page) whether to ask for a key before calling the other routes."""
    engine: Engine = request.app.state.engine
    settings: Settings = request.app.state.settings
    body = {**engine.health(), "api_key_required": bool(settings.server.api_keys)}
    return JSONResponse(body, status_code=200 if engine.ready else 503)


async def metrics(request: Request) -> Response:
    """`GET /metrics`: Prometheus text format."""
    engine: Engine = request.app.state.engine
    return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def voices_served(engine: Engine) -> str:
    """``6 voices in 2 models (piper 1, kokoro 5)``: the loaded voices, counted per model, for
    the start-up log's ready line."""
    counts = {name: len(served.family.voices) for name, served in engine.models.items()
              if served.family is not None}
    total = sum(counts.values())
    each = ", ".join(f"{name} {n}" for name, n in counts.items())
    return (f"{total} voice{'s' if total != 1 else ''} in {len(counts)} "
            f"model{'s' if len(counts) != 1 else ''} ({each})")


def install_job_routes(app: FastAPI) -> None:
    """The long-form job routes (`voxflow.server.jobs`), where ``jobs.enabled``."""
    app.add_api_route(
        "/v1/audio/jobs", create_job, methods=["POST"], summary="Create a long-form job",
        status_code=201, responses=error_responses(400, 404, 413, 429, 503, 507),
    )
    app.add_api_route(
        "/v1/audio/jobs", list_jobs, methods=["GET"], summary="The jobs, newest first",
        responses=error_responses(400),
    )
    app.add_api_route(
        "/v1/audio/jobs/{job_id}", get_job, methods=["GET"], summary="A job's state",
        responses=error_responses(404),
    )
    app.add_api_route(
        "/v1/audio/jobs/{job_id}/cancel", cancel_job, methods=["POST"],
        summary="Cancel a job and keep it", responses=error_responses(404, 409),
    )
    app.add_api_route(
        "/v1/audio/jobs/{job_id}", delete_job, methods=["DELETE"],
        summary="Cancel and delete a job", responses=error_responses(404),
    )
    app.add_api_route(
        "/v1/audio/jobs/{job_id}/audio", get_job_audio, methods=["GET"],
        summary="A finished job's audio", response_class=Response,
        responses={200: {"description": "The audio in the job's format.",
                         "content": {t: {} for t in SPEECH_TYPES[:-1]}},
                   **error_responses(400, 404, 409)},
    )
    app.add_api_route(
        "/v1/audio/jobs/{job_id}/captions", get_job_captions, methods=["GET"],
        summary="A finished job's WebVTT captions", response_class=Response,
        responses={200: {"description": "WebVTT from the word timings.",
                         "content": {"text/vtt": {}}},
                   **error_responses(400, 404, 409)},
    )


def install_audio_cache(settings: Settings, engine: Engine) -> AudioCache | None:
    """The audio cache of `settings` (None when off): responses whose audio is fixed,
    answered again from memory (`voxflow.server.audio_cache`), counted on ``/metrics``, and
    its entries read with a lexicon dropped when the lexicon changes or is deleted; with
    ``cache.disk_directory``, its disk tier read back from the folder.

    Raises:
        ConfigError: ``cache.disk_directory`` cannot be created, listed or written (one line
            naming the folder; `voxflow serve` exits 2 before loading any model, as for an
            unreadable lexicons folder).
    """
    try:
        cache = AudioCache.from_settings(settings.cache, settings.models)
    except DiskCacheError as exc:
        raise ConfigError(f"cache.disk_directory: {exc}") from None
    if cache is not None:
        engine.metrics.registry.register(AudioCacheCollector(cache))

        def lexicon_changed(name: str, _version: str | None) -> None:
            cache.drop_lexicon(name)

        engine.lexicons.store.add_listener(lexicon_changed)
    return cache


async def close_audio_cache(cache: AudioCache | None) -> None:
    """Write the entries still queued for the cache's disk tier and stop its writer (in a
    worker thread: the writes fsync); nothing without a cache."""
    if cache is not None:
        await asyncio.to_thread(cache.close)


def create_app(settings: Settings, engine: Engine | None = None, *,
               min_stream_chunk_s: float = 0.0, wyoming: bool = True,
               voice_store: VoiceStore | None = None,
               voice_sync_interval_s: float = 1.0) -> FastAPI:
    """Build the app; its lifespan starts `engine` (a new one from `settings` by default).

    A model that fails to load fails start-up (the server exits with the error logged).

    Args:
        min_stream_chunk_s: a streamed response's body pieces hold at least this many seconds
            of audio (the engine's chunks joined, `voxflow.server.coalesce`; the last may be
            shorter); 0 = each chunk as the engine produces it. Ray Serve replicas set it
            (``ray.min_stream_chunk_ms``), since each piece is a hop through Ray.
        wyoming: whether the lifespan also starts the Wyoming server when
            ``wyoming.enabled`` (`voxflow.wyoming.server`; Ray Serve replicas do not: they
            would all bind its port).
        voice_store: a store shared by every replica (Ray Serve's, `voxflow.ray.voice_store`):
            the saved voices are kept the same on every replica through it
            (`voxflow.server.voice_sync`); None (the plain server): each server its own.
        voice_sync_interval_s: seconds between two looks at `voice_store` for the other
            replicas' changes.

    Raises:
        ConfigError: ``server.api_keys_file`` is set but `settings` hold no key (they did not
            come from `load_settings`, which reads the file).
        ValueError: `min_stream_chunk_s` is negative.
    """
    keys = [key.get_secret_value() for key in settings.server.api_keys]
    serve_wyoming = wyoming and settings.wyoming.enabled
    if min_stream_chunk_s < 0:
        raise ValueError(f"min_stream_chunk_s must be >= 0, not {min_stream_chunk_s}")
    if settings.server.api_keys_file is not None and not keys:
        # only settings that skipped load_settings (which reads the file) get here: fail
        # closed rather than serve openly
        raise ConfigError("server.api_keys_file is set but no key was read from it: build the "
                          "settings with voxflow.config.load_settings")
    engine = engine or Engine(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        try:
            await engine.start()
        except ModelFileError as exc:  # logged as one line (voxflow.server.startup)
            app.state.startup_error = exc
            raise
        log.info("ready after %.2f s: %s", engine.ready_after_s or 0.0, voices_served(engine))
        # Home Assistant's Wyoming protocol, once the voices are loaded (voxflow.wyoming)
        wyoming = WyomingServer(engine, settings) if serve_wyoming else None
        app.state.wyoming = wyoming
        try:
            if wyoming is not None:
                await wyoming.start()
            # replicas: saved voices from the shared store first (voxflow.server.voice_sync);
            # long-form jobs; unfinished ones on disk resume (voxflow.jobs)
            async with sharing_voices(app.state, voice_store, voice_sync_interval_s), \
                    running_jobs(settings.jobs, engine) as app.state.jobs:
                yield
        finally:
            if wyoming is not None:
                await wyoming.stop()
            engine.stop()
            await close_audio_cache(getattr(app.state, "audio_cache", None))

    # redirect_slashes=False: `/v1/audio/speech/` is a 404 in our shape, not a 307 that
    # clients follow as a GET or not at all. FastAPIOffline: /docs and /redoc load Swagger UI
    # and ReDoc from the files fastapi-offline ships, not from a CDN, so they work offline.
    app = FastAPIOffline(title="voxflow", version=__version__, lifespan=lifespan,
                         redirect_slashes=False, static_url=DOCS_ASSETS)
    app.state.engine = engine
    app.state.settings = settings
    app.state.min_stream_chunk_s = min_stream_chunk_s
    app.state.voice_sync = None  # set by the lifespan under Ray Serve
    app.state.audio_cache = install_audio_cache(settings, engine)
    install_error_handlers(app)
    public = open_paths(settings.server)
    # no 422 in /docs (never sent); with keys, the bearer scheme and the 401s
    install_openapi(app, partial(document_bearer_auth, public=public) if keys else None)
    if keys:  # inside CORS and request ids: a 401 carries both headers
        app.add_middleware(ApiKeyMiddleware, keys=KeyRing(keys), public=public)
    if settings.server.cors_origins:
        app.add_middleware(
            OpenAICORSMiddleware,
            allow_origins=list(settings.server.cors_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"],
            allow_headers=["*"],  # the OpenAI SDKs send Authorization and x-stainless-* headers
            expose_headers=list(EXPOSED_HEADERS),
            max_age=600,
        )
    # JSON bodies over server.max_body_bytes: 413 before they are read whole
    app.add_middleware(BodyLimitMiddleware, limit=settings.server.max_body_bytes)
    # refuses new requests while the server drains, tracks the others (inside request ids)
    app.add_middleware(DrainMiddleware, drain=engine.drain)
    app.add_middleware(RequestIdMiddleware)  # outermost: every response carries X-Request-Id
    app.add_middleware(StartupErrorMiddleware, state=app.state)  # lifespan only
    app.add_api_route(
        "/v1/audio/speech", create_speech, methods=["POST"], summary="Create speech",
        response_class=Response,
        responses={200: {"description": "The audio, streamed by default (docs/api.md).",
                         "content": {t: {} for t in SPEECH_TYPES}},
                   **error_responses(400, 404, 405, 429, 500, 503, 504)},
    )
    app.add_api_route(
        "/v1/audio/speech/timestamps", create_speech_timestamps, methods=["POST"],
        summary="Create speech with word timestamps",
        responses={200: {"description": "JSON: the base64 audio and each word's start and "
                         "end (docs/api.md)."},
                   **error_responses(400, 404, 405, 429, 500, 503, 504)},
    )
    app.add_api_websocket_route(STREAM_PATH, speech_stream, name="speech_stream")
    app.add_api_route(
        "/v1/audio/voices", create_voice, methods=["POST"], summary="Create a saved voice",
        responses=error_responses(400, 404, 409, 413, 500, 503, 507),
        openapi_extra={"requestBody": VOICE_FORM},
    )
    app.add_api_route(
        "/v1/audio/voices/{name}", delete_voice, methods=["DELETE"],
        summary="Delete a saved voice", responses=error_responses(400, 403, 404, 405),
    )
    app.add_api_route(
        "/v1/audio/lexicons/{name}", put_lexicon, methods=["PUT"],
        summary="Save a pronunciation lexicon", responses=error_responses(400, 413, 500, 507),
    )
    app.add_api_route(
        "/v1/audio/lexicons/{name}", delete_lexicon, methods=["DELETE"],
        summary="Delete a pronunciation lexicon", responses=error_responses(403, 404),
    )
    if settings.jobs.enabled:
        install_job_routes(app)
    for path, endpoint, errors in (
        ("/v1/audio/lexicons", list_lexicons, (405,)),
        ("/v1/audio/lexicons/{name}", get_lexicon, (404, 405)),
        ("/v1/models", list_models, (405,)),
        ("/v1/models/{model_id}", get_model, (404, 405)),
        ("/v1/audio/voices", list_voices, (404, 405)),
        ("/v1/audio/models", list_audio_models, (405,)),
        ("/health", health, (405,)),
        ("/metrics", metrics, (405,)),
    ):
        responses: dict = error_responses(*errors)
        if endpoint is health:
            responses[503] = {"description": "Not every model is ready yet (same body)."}
        app.add_api_route(path, endpoint, methods=["GET"], responses=responses)
    install_playground(app)
    return app


__all__ = ["create_app"]
