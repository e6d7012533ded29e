"""The Ray Serve deployment: the voxflow FastAPI app on every replica, one engine per replica.

Each replica builds the same app as ``voxflow serve`` (`voxflow.server.app.create_app`) from
the deployment's validated settings; the app's lifespan loads and warms up the replica's own
engine before Ray sends it a request. Ray's proxy spreads requests over the replicas, at most
``ray.max_ongoing_requests`` in progress on one; the rest wait in Ray's queue up to
``ray.max_queued_requests``, past which Ray answers 429 with ``Retry-After``
(``engine.retry_after_s``). The autoscaler keeps about ``ray.target_ongoing_requests`` in
progress per replica between ``ray.min_replicas`` and ``ray.max_replicas``.

``serve run voxflow.ray.app:build config=configs/piper.yaml [section.field=VALUE ...]`` deploys
it on a running Ray cluster (docs/scale-out.md); ``voxflow serve --ray`` does the same from a
config file (`voxflow.ray.launch`). Importing this module needs the ``ray`` extra.
"""

from __future__ import annotations

import logging
from typing import Any

import yaml
from fastapi import FastAPI
from ray import serve
from ray.serve import Application
from ray.serve.config import BackpressureConfig

from voxflow.config import ConfigError, Settings, load_settings
from voxflow.logging_setup import configure_logging
from voxflow.ray.settings import check_gpus, ray_settings
from voxflow.ray.voice_store import RayKVVoiceStore
from voxflow.server.app import create_app

log = logging.getLogger(__name__)

APP_NAME = "voxflow"
"""The Serve application's name (``serve status``, the replicas' actor names)."""

DEPLOYMENT_NAME = "voxflow"
"""The deployment's name: its replicas are the actors ``SERVE_REPLICA::voxflow#voxflow#...``."""


@serve.ingress()
class VoxflowReplica:
    """One replica: the voxflow app and its engine, built on the replica from `settings`.

    Ray calls ``__serve_build_asgi_app__`` after the constructor, then runs the app's lifespan
    (the engine loads and warms up every model, and the saved voices of the other replicas are
    loaded from Ray's KV store, `voxflow.ray.voice_store`), and ``check_health`` every few
    seconds: a replica whose engine is not ready is replaced.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._app: FastAPI | None = None

    def __serve_build_asgi_app__(self) -> FastAPI:
        """The app `voxflow serve` runs, with streamed pieces of ``ray.min_stream_chunk_ms``."""
        configure_logging(self._settings.server.log_level)
        ray = ray_settings(self._settings)
        self._app = create_app(
            self._settings,
            min_stream_chunk_s=ray.min_stream_chunk_ms / 1000,
            wyoming=False,  # every replica would bind the one Wyoming port
            # saved voices: the same on every replica of this application
            voice_store=RayKVVoiceStore(serve.get_replica_context().app_name or APP_NAME),
            voice_sync_interval_s=ray.voice_sync_interval_s,
        )
        return self._app

    def check_health(self) -> None:
        """Raises RuntimeError once the app's engine is no longer ready (Ray replaces us)."""
        if self._app is not None and not self._app.state.engine.ready:
            raise RuntimeError("the voxflow engine of this replica is not ready")


def deployment_options(settings: Settings) -> dict[str, Any]:
    """The Serve deployment options for `settings.ray` (keyword arguments of
    `serve.deployment`): fixed ``num_replicas`` when ``min_replicas == max_replicas``, else
    an ``autoscaling_config`` on ongoing requests; Ray's queue answers 429 with
    ``Retry-After: engine.retry_after_s`` when full; open responses get
    ``server.drain_timeout_s`` when a replica stops.

    Raises:
        ConfigError: ``ray.target_ongoing_requests`` is more than a replica takes at once
            (``ray.max_ongoing_requests``, else ``engine.max_inflight_requests``), or
            ``ray.replica_gpus`` does not fit the models' devices (`check_gpus`), or
            ``cache.disk_directory`` is set (every replica would use the one folder, each
            with its own index and bound: their deletes and evictions would undo each
            other's).
    """
    ray = ray_settings(settings)
    check_gpus(settings, ray)
    if settings.cache.enabled and settings.cache.disk_directory is not None:
        raise ConfigError(
            "invalid configuration: cache.disk_directory is not supported with Ray Serve: "
            "every replica would share the one folder; set it to null (each replica keeps "
            "its cache in memory)")
    ongoing = ray.ongoing_limit(settings.engine.max_inflight_requests)
    if ongoing < ray.target_ongoing_requests:
        raise ConfigError(
            f"invalid configuration: ray.target_ongoing_requests "
            f"({ray.target_ongoing_requests:g}) is more than a replica takes at once "
            f"({ongoing}: ray.max_ongoing_requests, else engine.max_inflight_requests)"
        )
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": ongoing,
        "max_queued_requests": ray.max_queued_requests,
        "backpressure_config": BackpressureConfig(
            status_code=429, retry_after_s=settings.engine.retry_after_s,
        ),
        "ray_actor_options": {"num_cpus": ray.replica_cpus, "num_gpus": ray.replica_gpus},
        "graceful_shutdown_timeout_s": settings.server.drain_timeout_s,
        # voxflow's own access line (server.access_log) is the one documented; Serve's would be
        # a second line per request, written and flushed by the replica on its event loop
        "logging_config": {"enable_access_log": False},
    }
    if ray.min_replicas == ray.max_replicas:
        options["num_replicas"] = ray.min_replicas
    else:
        options["autoscaling_config"] = {
            "min_replicas": ray.min_replicas,
            "initial_replicas": ray.min_replicas,
            "max_replicas": ray.max_replicas,
            "target_ongoing_requests": ray.target_ongoing_requests,
            "upscale_delay_s": ray.upscale_delay_s,
            "downscale_delay_s": ray.downscale_delay_s,
        }
    return options


def application(settings: Settings) -> Application:
    """The Serve application of `settings` (validated by `load_settings`, and the ``ray:``
    section by `ray_settings`), to pass to `serve.run`. Each replica gets a copy of
    `settings` (API keys included).

    Raises:
        ConfigError: the ``ray:`` section is invalid or does not fit the engine's settings."""
    return serve.deployment(**deployment_options(settings))(VoxflowReplica).bind(settings)


def build(args: dict[str, str]) -> Application:
    """The builder ``serve run`` calls: ``serve run voxflow.ray.app:build
    config=configs/piper.yaml ray.max_replicas=4``. ``config`` is the deployment file
    (default: the built-in settings); every other argument overrides a setting (dotted key,
    VALUE read as YAML, as ``--set``).

    Raises:
        ConfigError: missing or invalid file or override (the message names the field).
    """
    args = dict(args)
    path = args.pop("config", None)
    overrides: dict[str, Any] = {}
    for key, value in args.items():
        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {key}={value!r} is not valid YAML: {exc}") from exc
    return application(load_settings(path, overrides))


__all__ = ["APP_NAME", "DEPLOYMENT_NAME", "VoxflowReplica", "application", "build",
           "deployment_options"]
