"""The `ray:` settings (scale-out on Ray Serve): defaults, bounds and cross-checks, validated
by the Ray layer's `ray_settings` without Ray installed (every command calls it at start-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxflow.config import ConfigError, load_settings
from voxflow.ray.settings import RaySettings, ray_settings

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_one_fixed_replica_with_a_queue_and_100_ms_pieces():
    ray = ray_settings(load_settings(None))
    assert ray == RaySettings()
    assert (ray.min_replicas, ray.max_replicas) == (1, 1)
    assert (ray.target_ongoing_requests, ray.max_ongoing_requests) == (8.0, None)
    assert ray.ongoing_limit(32) == 32  # null: as many as the engine runs at once
    assert ray.max_queued_requests == 128
    assert ray.min_stream_chunk_ms == 100
    assert ray.address is None


def test_the_default_file_spells_the_defaults():
    assert ray_settings(load_settings(REPO / "configs" / "piper.yaml")) == RaySettings()


def test_overrides_reach_the_section():
    ray = ray_settings(load_settings(None, {"ray.min_replicas": 2, "ray.max_replicas": 4,
                                            "ray.address": "auto"}))
    assert (ray.min_replicas, ray.max_replicas, ray.address) == (2, 4, "auto")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"ray.min_replicas": 3, "ray.max_replicas": 2},
     "ray: Value error, max_replicas (2) must be at least min_replicas (3)"),
    ({"ray.target_ongoing_requests": 40, "ray.max_ongoing_requests": 32},
     "max_ongoing_requests (32) must be at least target_ongoing_requests (40)"),
    ({"ray.min_replicas": 0}, "ray.min_replicas: Input should be greater than or equal to 1"),
    ({"ray.target_ongoing_requests": 0},
     "ray.target_ongoing_requests: Input should be greater than 0"),
    ({"ray.min_stream_chunk_ms": -1},
     "ray.min_stream_chunk_ms: Input should be greater than or equal to 0"),
    ({"ray.replicas": 2}, "ray.replicas: Extra inputs are not permitted"),
])
def test_bad_values_stop_start_up_naming_the_field(overrides, message):
    with pytest.raises(ConfigError) as err:
        ray_settings(load_settings(None, overrides))
    assert message in str(err.value)


def test_a_replica_is_never_sent_more_than_its_engine_admits():
    # 4 in flight + 2 queued = 6 < 8 Ray could send: the engine would 429 Ray's requests
    with pytest.raises(ConfigError) as err:
        ray_settings(load_settings(None, {"engine.max_inflight_requests": 4,
                                          "engine.max_queued_requests": 2,
                                          "ray.max_ongoing_requests": 8,
                                          "ray.target_ongoing_requests": 2}))
    assert ("ray.max_ongoing_requests (8) must be at most engine.max_inflight_requests + "
            "engine.max_queued_requests (6)") in str(err.value)
    ok = load_settings(None, {"engine.max_inflight_requests": 4, "engine.max_queued_requests": 4,
                              "ray.max_ongoing_requests": 8, "ray.target_ongoing_requests": 2})
    assert ray_settings(ok).max_ongoing_requests == 8


def test_the_plain_server_with_a_small_engine_is_not_refused_for_rays_defaults():
    settings = load_settings(None, {"engine.max_inflight_requests": 1,
                                    "engine.max_queued_requests": 0})
    assert ray_settings(settings).ongoing_limit(settings.engine.max_inflight_requests) == 1
