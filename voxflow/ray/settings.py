"""Typed settings of the Ray Serve deployment (`ray:` in a deployment YAML).

The Ray layer owns its section: `voxflow.config.Settings` keeps ``ray:`` as the file gives it,
and `ray_settings` validates it (every command does at start-up, `voxflow.cli.common`; the Ray
deployment reads it through `ray_settings`). Pure pydantic: importing this never imports Ray,
so every config validates without the ``ray`` extra. Used only by ``voxflow serve --ray`` and
``serve run voxflow.ray.app:build`` (docs/scale-out.md); the plain server ignores the section.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from voxflow.config import ConfigError, Settings, format_validation_error


class RaySettings(BaseModel):
    """Replicas, autoscaling and queueing of the Ray Serve deployment (one engine per replica)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str | None = Field(
        None,
        description="Ray cluster `voxflow serve --ray` joins: `auto` (the cluster `ray start` "
        "runs on this machine), `HOST:6379`, or `ray://HOST:10001`; null = the `RAY_ADDRESS` "
        "environment variable if set, else a new Ray instance on this machine for this process.",
    )
    min_replicas: int = Field(
        1, ge=1, le=1000,
        description="Fewest replicas (each loads every model of the file: one engine per "
        "replica). Not 0: a replica loads and warms up its models for seconds before its first "
        "request.",
    )
    max_replicas: int = Field(
        1, ge=1, le=1000,
        description="Most replicas the autoscaler starts; equal to `min_replicas` = a fixed "
        "number of replicas.",
    )
    target_ongoing_requests: float = Field(
        8.0, gt=0,
        description="Autoscaling target: the average number of requests in progress per "
        "replica (streams count until their last byte) the autoscaler steers towards by adding "
        "or removing replicas.",
    )
    max_ongoing_requests: int | None = Field(
        None, ge=1,
        description="Most requests Ray sends one replica at once; the rest wait in Ray's queue. "
        "null = `engine.max_inflight_requests` (as many as the replica's engine runs at once). "
        "At least `target_ongoing_requests`, and at most `engine.max_inflight_requests` + "
        "`engine.max_queued_requests` so the replica's engine never refuses what Ray sends it.",
    )
    max_queued_requests: int = Field(
        128, ge=0,
        description="Requests waiting in Ray's queue for a replica with room (every replica at "
        "`max_ongoing_requests`); past it the answer is a 429 with `Retry-After` "
        "(`engine.retry_after_s`) in the OpenAI error shape.",
    )
    replica_cpus: float = Field(
        1.0, ge=0,
        description="CPUs Ray reserves for each replica (its actor's `num_cpus`): a node runs "
        "at most its CPUs / this many replicas. Each replica still runs the model's own threads "
        "(Piper: `workers` x `intra_op_threads`).",
    )
    upscale_delay_s: float = Field(
        30.0, ge=0,
        description="Seconds the load must stay above the target before a replica is added.",
    )
    downscale_delay_s: float = Field(
        600.0, ge=0,
        description="Seconds the load must stay below the target before a replica is removed.",
    )
    min_stream_chunk_ms: int = Field(
        100, ge=0, le=10_000,
        description="A streamed response leaves a replica in pieces of at least this much "
        "audio (the engine's chunks are joined until they hold it; the last piece may be "
        "shorter): each piece costs a hop through Ray's streaming path. 0 = every engine "
        "chunk as it comes, as the plain server sends it.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> RaySettings:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas ({self.max_replicas}) must be at least min_replicas "
                f"({self.min_replicas})"
            )
        if (self.max_ongoing_requests is not None
                and self.max_ongoing_requests < self.target_ongoing_requests):
            raise ValueError(
                f"max_ongoing_requests ({self.max_ongoing_requests}) must be at least "
                f"target_ongoing_requests ({self.target_ongoing_requests:g}): a replica could "
                "never reach the load the autoscaler aims for"
            )
        return self

    def ongoing_limit(self, engine_inflight: int) -> int:
        """`max_ongoing_requests`, or `engine_inflight` (the engine's
        ``max_inflight_requests``) when it is null."""
        return self.max_ongoing_requests or engine_inflight


def ray_settings(settings: Settings) -> RaySettings:
    """The ``ray:`` section of `settings`, validated, and checked against the engine's.

    Raises:
        ConfigError: a field is invalid (the message names it, e.g. ``ray.min_replicas``), or
            ``ray.max_ongoing_requests`` is more than the replica's engine admits
            (``engine.max_inflight_requests + engine.max_queued_requests``): it would answer
            429 to requests Ray sent it.
    """
    try:
        ray = RaySettings.model_validate(settings.ray)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "ray", RaySettings)) from exc
    # only a value the file sets: the plain server ignores ray:, so its default must never
    # refuse an engine configured small (the Ray path checks the derived one)
    room = settings.engine.max_inflight_requests + settings.engine.max_queued_requests
    if ray.max_ongoing_requests is not None and ray.max_ongoing_requests > room:
        raise ConfigError(
            f"invalid configuration: ray.max_ongoing_requests ({ray.max_ongoing_requests}) "
            f"must be at most engine.max_inflight_requests + engine.max_queued_requests "
            f"({room}): a replica's engine would refuse with a 429 requests Ray sent it")
    return ray


__all__ = ["RaySettings", "ray_settings"]
