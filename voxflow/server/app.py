"""FastAPI app factory: the engine's lifespan, the OpenAI-compatible routes, health and metrics.

Routes:
- ``POST /v1/audio/speech``: speech (see `voxflow.server.speech`).
- ``GET /v1/models``: served models, OpenAI list shape, with their family and voices, then
  their aliases (``alias_of``; `voxflow.engine.aliases`).
- ``GET /v1/audio/voices``: every voice (id, model, family, language, every language it
  accepts, sample rate); ``?model=``.
- ``GET /health``: 200 once every model is loaded and warmed up, else 503; per-model status.
- ``GET /metrics``: Prometheus text format.

Every response carries ``X-Request-Id`` and each speech request leaves one ``voxflow.access``
log line (`voxflow.server.request_id`). With ``server.cors_origins`` set, Starlette's
CORSMiddleware answers preflights and adds ``Access-Control-Allow-Origin`` for those origins.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from voxflow import __version__
from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.server.errors import install_error_handlers
from voxflow.server.listings import models_list, voices_list
from voxflow.server.request_id import RequestIdMiddleware
from voxflow.server.speech import create_speech

log = logging.getLogger(__name__)

EXPOSED_HEADERS = ("X-Request-Id", "X-Sample-Rate", "X-Dropped-Letters", "Retry-After")
"""Response headers a browser page may read when CORS is on (`server.cors_origins`)."""


# The routes read the engine from `request.app.state`, never from a closure: FastAPI caches
# endpoint functions process-wide (lru_cache in fastapi.dependencies), so a closure over the
# engine would keep every app's models loaded after the app is gone (tests build many apps).


async def list_models(request: Request) -> dict:
    """`GET /v1/models`."""
    state = request.app.state
    return models_list(state.engine, state.engine.aliases)


async def list_voices(request: Request, model: str | None = None) -> dict:
    """`GET /v1/audio/voices` (``?model=`` filters, aliases included)."""
    state = request.app.state
    return voices_list(state.engine, model, state.engine.aliases)


async def health(request: Request) -> JSONResponse:
    """`GET /health`: 200 once every model is ready, else 503."""
    engine: Engine = request.app.state.engine
    return JSONResponse(engine.health(), status_code=200 if engine.ready else 503)


async def metrics(request: Request) -> Response:
    """`GET /metrics`: Prometheus text format."""
    engine: Engine = request.app.state.engine
    return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(settings: Settings, engine: Engine | None = None) -> FastAPI:
    """Build the app; its lifespan starts `engine` (a new one from `settings` by default).

    A model that fails to load fails start-up (the server exits with the error logged).
    """
    engine = engine or Engine(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await engine.start()
        log.info("ready after %.2f s", engine.ready_after_s or 0.0)
        try:
            yield
        finally:
            engine.stop()

    app = FastAPI(title="voxflow", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.settings = settings
    install_error_handlers(app)
    if settings.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.server.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["*"],  # the OpenAI SDKs send Authorization and x-stainless-* headers
            expose_headers=list(EXPOSED_HEADERS),
            max_age=600,
        )
    app.add_middleware(RequestIdMiddleware)  # outermost: every response carries X-Request-Id
    app.add_api_route("/v1/audio/speech", create_speech, methods=["POST"])
    for path, endpoint in (("/v1/models", list_models), ("/v1/audio/voices", list_voices),
                           ("/health", health), ("/metrics", metrics)):
        app.add_api_route(path, endpoint, methods=["GET"])
    return app


__all__ = ["create_app"]
