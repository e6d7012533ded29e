"""FastAPI app factory: the engine's lifespan, the OpenAI-compatible routes, health and metrics.

Routes:
- ``POST /v1/audio/speech``: speech (see `voxflow.server.speech`).
- ``GET /v1/models``: served models, OpenAI list shape, with their family and voices.
- ``GET /v1/audio/voices``: every voice (id, model, family, language, sample rate); ``?model=``.
- ``GET /health``: 200 once every model is loaded and warmed up, else 503; per-model status.
- ``GET /metrics``: Prometheus text format.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from voxflow import __version__
from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.errors import ModelNotFoundError
from voxflow.server.errors import install_error_handlers
from voxflow.server.speech import create_speech

log = logging.getLogger(__name__)


def _models_list(engine: Engine) -> dict:
    data = []
    for name, served in engine.models.items():
        family = served.family
        data.append({
            "id": name,
            "object": "model",
            "created": int(engine.created_at),
            "owned_by": "voxflow",
            "family": family.family if family else None,
            "status": served.status,
            "voices": sorted(family.voices) if family else [],
        })
    return {"object": "list", "data": data}


def _voices_list(engine: Engine, model: str | None) -> dict:
    if model is not None and model not in engine.models:
        raise ModelNotFoundError(model, sorted(engine.models))
    data = []
    for name, served in engine.models.items():
        if served.family is None or (model is not None and name != model):
            continue
        for voice in served.family.voices.values():
            data.append({
                "id": voice.id,
                "object": "voice",
                "model": name,
                "family": voice.family,
                "language": voice.language,
                "sample_rate": voice.sample_rate,
                "default": voice.id == served.family.default_voice,
            })
    return {"object": "list", "data": data}


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
    app.add_api_route("/v1/audio/speech", create_speech, methods=["POST"])

    @app.get("/v1/models")
    async def models() -> dict:
        return _models_list(engine)

    @app.get("/v1/audio/voices")
    async def voices(model: str | None = None) -> dict:
        return _voices_list(engine, model)

    @app.get("/health")
    async def health() -> JSONResponse:
        body = engine.health()
        return JSONResponse(body, status_code=200 if engine.ready else 503)

    @app.get("/metrics")
    async def metrics(_: Request) -> Response:
        return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


__all__ = ["create_app"]
