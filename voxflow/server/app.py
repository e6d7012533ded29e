"""FastAPI app factory: the engine's lifespan, the OpenAI-compatible routes, health and metrics.

Routes:
- ``POST /v1/audio/speech``: speech (see `voxflow.server.speech`).
- ``GET /v1/models``: served models, OpenAI list shape, with their family and voices, then
  their aliases (``alias_of``; `voxflow.server.aliases`).
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
from voxflow.config import ConfigError, Settings
from voxflow.engine.engine import Engine
from voxflow.server.aliases import Aliases
from voxflow.server.errors import install_error_handlers
from voxflow.server.listings import models_list, voices_list
from voxflow.server.request_id import RequestIdMiddleware
from voxflow.server.speech import create_speech

log = logging.getLogger(__name__)

EXPOSED_HEADERS = ("X-Request-Id", "X-Sample-Rate", "X-Dropped-Letters", "Retry-After")
"""Response headers a browser page may read when CORS is on (`server.cors_origins`)."""


def create_app(settings: Settings, engine: Engine | None = None) -> FastAPI:
    """Build the app; its lifespan starts `engine` (a new one from `settings` by default).

    A model that fails to load fails start-up (the server exits with the error logged).
    """
    engine = engine or Engine(settings)
    aliases = Aliases.from_settings(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await engine.start()
        try:
            aliases.check(engine)  # voice aliases need the loaded voices
        except ConfigError:
            engine.stop()
            raise
        log.info("ready after %.2f s", engine.ready_after_s or 0.0)
        try:
            yield
        finally:
            engine.stop()

    app = FastAPI(title="voxflow", version=__version__, lifespan=lifespan)
    app.state.engine = engine
    app.state.settings = settings
    app.state.aliases = aliases
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

    @app.get("/v1/models")
    async def models() -> dict:
        return models_list(engine, aliases)

    @app.get("/v1/audio/voices")
    async def voices(model: str | None = None) -> dict:
        return voices_list(engine, model, aliases)

    @app.get("/health")
    async def health() -> JSONResponse:
        body = engine.health()
        return JSONResponse(body, status_code=200 if engine.ready else 503)

    @app.get("/metrics")
    async def metrics(_: Request) -> Response:
        return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


__all__ = ["create_app"]
