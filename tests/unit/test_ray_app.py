"""The Serve deployment options voxflow derives from the `ray:` settings, and the `serve run`
builder (needs Ray, starts none; skipped without the ray extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxflow.config import ConfigError, load_settings

pytest.importorskip("ray.serve", reason="Ray is not installed: pip install -e '.[ray]'")

from ray.serve import Application  # noqa: E402

from voxflow.ray.app import build, deployment_options  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "piper.yaml"


def test_equal_bounds_give_a_fixed_number_of_replicas():
    options = deployment_options(load_settings(CONFIG, {"ray.min_replicas": 2,
                                                        "ray.max_replicas": 2}))
    assert options["num_replicas"] == 2
    assert "autoscaling_config" not in options
    assert (options["max_ongoing_requests"], options["max_queued_requests"]) == (32, 128)
    assert options["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert options["graceful_shutdown_timeout_s"] == 30.0  # server.drain_timeout_s
    backpressure = options["backpressure_config"]
    assert (backpressure.status_code, backpressure.retry_after_s) == (429, 1)


def test_a_range_autoscales_on_ongoing_requests():
    options = deployment_options(load_settings(CONFIG, {
        "ray.min_replicas": 1, "ray.max_replicas": 4, "ray.target_ongoing_requests": 6,
        "engine.retry_after_s": 3}))
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "min_replicas": 1, "initial_replicas": 1, "max_replicas": 4,
        "target_ongoing_requests": 6.0, "upscale_delay_s": 30.0, "downscale_delay_s": 600.0}
    assert options["backpressure_config"].retry_after_s == 3
    assert options["max_ongoing_requests"] == 32  # null: engine.max_inflight_requests


def test_a_target_above_what_a_replica_takes_is_refused_on_the_ray_path():
    settings = load_settings(CONFIG, {"engine.max_inflight_requests": 4})  # target 8 > 4
    with pytest.raises(ConfigError, match=r"ray.target_ongoing_requests \(8\) is more than a "
                       r"replica takes at once \(4"):
        deployment_options(settings)


def test_the_cache_disk_tier_is_refused_on_the_ray_path(tmp_path):
    settings = load_settings(CONFIG, {"cache.disk_directory": str(tmp_path)})
    with pytest.raises(ConfigError, match="cache.disk_directory is not supported with Ray"):
        deployment_options(settings)
    off = load_settings(CONFIG, {"cache.disk_directory": str(tmp_path), "cache.enabled": False})
    assert deployment_options(off)["name"]  # a cache that is off uses no folder


def test_the_serve_run_builder_reads_the_file_and_overrides():
    assert isinstance(build({"config": str(CONFIG), "ray.max_replicas": "3"}), Application)
    with pytest.raises(ConfigError, match="max_replicas"):
        build({"config": str(CONFIG), "ray.max_replicas": "0"})


GPU_CONFIG = CONFIG.parent / "magpie-gpu.yaml"  # MagpieTTS with `device: cuda`


def test_a_gpu_replica_reserves_its_gpus_for_the_actor():
    options = deployment_options(load_settings(GPU_CONFIG, {"ray.replica_gpus": 0.5}))
    assert options["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 0.5}


@pytest.mark.parametrize(("config", "overrides", "message"), [
    (GPU_CONFIG, {},
     "model 'magpie' runs on 'cuda' but ray.replica_gpus is 0: Ray gives a replica only the "
     "GPUs it reserves, numbered from 0: set ray.replica_gpus to at least 1$"),
    ("cuda:1", {"ray.replica_gpus": 1},
     "runs on 'cuda:1' but ray.replica_gpus is 1: .* set ray.replica_gpus to at least 2, or "
     "the device to cuda$"),
    (CONFIG, {"ray.replica_gpus": 1},
     "ray.replica_gpus is 1 but no model runs on a GPU"),
])
def test_gpus_that_do_not_fit_the_models_devices_are_refused(config, overrides, message,
                                                            tmp_path):
    if config == "cuda:1":  # the GPU file with its model on the second GPU
        config = tmp_path / "magpie-gpu1.yaml"
        config.write_text(GPU_CONFIG.read_text().replace("device: cuda\n", "device: cuda:1\n"))
    settings = load_settings(config, overrides)  # the plain server takes it as it is
    with pytest.raises(ConfigError, match=message):
        deployment_options(settings)


def test_serves_own_access_log_is_off_and_its_timers_are_slowed_for_every_ray_start():
    from voxflow.ray.launch import SERVE_ENV
    from voxflow.ray.local_cluster import LocalCluster

    options = deployment_options(load_settings(CONFIG, {}))
    assert options["logging_config"] == {"enable_access_log": False}
    assert SERVE_ENV == {"RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
                         "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000"}
    env = LocalCluster(port=1, token="t").environment()
    assert {k: env[k] for k in SERVE_ENV} == SERVE_ENV
