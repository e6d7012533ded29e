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
    replica_gpus: float = Field(
        0.0, ge=0,
        description="GPUs Ray reserves for each replica (its actor's `num_gpus`): 0 for CPU "
        "models; 1 (or a fraction below 1 to share a GPU between replicas, or a whole number "
        "above 1) where a model runs on `cuda`. Ray gives the replica only those GPUs "
        "(`CUDA_VISIBLE_DEVICES`), numbered from 0: a model's `device: cuda:N` needs N below "
        "this count. Checked at start-up against the models' devices.",
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
    voice_sync_interval_s: float = Field(
        1.0, ge=0.1, le=60.0,
        description="Saved voices (`POST /v1/audio/voices`) are shared by every replica "
        "through Ray's KV store: each replica looks for the others' new and deleted voices "
        "every this many seconds (one small read of the store while nothing changed), and "
        "before it lists voices or answers a request naming a voice it does not know. A "
        "voice created or deleted on one replica is served or gone on every other within "
        "about this long (docs/scale-out.md).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> RaySettings:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas ({self.max_replicas}) must be at least min_replicas "
                f"({self.min_replicas})"
            )
        if self.replica_gpus > 1 and not self.replica_gpus.is_integer():
            raise ValueError(
                f"replica_gpus ({self.replica_gpus:g}) must be a whole number above 1: Ray "
                "shares a GPU only in fractions below 1"
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


def _cuda_index(device: str) -> int | None:
    """The GPU index of a torch device string (``cuda`` -> 0, ``cuda:N`` -> N); None for
    another device."""
    if not device.startswith("cuda"):
        return None
    _, _, index = device.partition(":")
    return int(index) if index else 0


def check_gpus(settings: Settings, ray: RaySettings) -> None:
    """Raises ConfigError unless ``ray.replica_gpus`` fits the models' devices: a model on
    ``cuda:N`` needs ``replica_gpus`` above N (Ray numbers a replica's GPUs from 0), and GPUs
    reserved with every model on the CPU would sit idle, kept from other replicas. Only the
    Ray path checks it (`voxflow.ray.app.deployment_options`): the plain server ignores
    ``ray:``."""
    gpus = 0 if ray.replica_gpus == 0 else max(1, int(ray.replica_gpus))
    on_gpu = []
    for model in settings.models:
        device = getattr(model.options, "device", None)
        index = _cuda_index(device) if isinstance(device, str) else None
        if index is None:
            continue
        on_gpu.append(model.name)
        if index >= gpus:
            raise ConfigError(
                f"invalid configuration: model {model.name!r} runs on {device!r} but "
                f"ray.replica_gpus is {ray.replica_gpus:g}: Ray gives a replica only the "
                f"GPUs it reserves, numbered from 0: set ray.replica_gpus to at least "
                f"{index + 1}" + (", or the device to cuda" if index else ""))
    if gpus and not on_gpu:
        raise ConfigError(
            f"invalid configuration: ray.replica_gpus is {ray.replica_gpus:g} but no model "
            "runs on a GPU (device: cuda): the reserved GPUs would sit idle")


__all__ = ["RaySettings", "check_gpus", "ray_settings"]
