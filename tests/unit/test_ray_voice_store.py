"""`voxflow.ray.voice_store.RayKVVoiceStore` over a stand-in for Ray's internal KV functions:
its keys under the application's prefix and namespace, and put-if-absent as VoiceStore says
(False when the key has a value). The real store runs in tests/integration/test_ray_voices.py."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.experimental.internal_kv", reason="Ray is not installed")

from ray.experimental import internal_kv  # noqa: E402

from voxflow.ray.voice_store import NAMESPACE, RayKVVoiceStore  # noqa: E402


@pytest.fixture
def kv(monkeypatch) -> dict:
    data: dict[tuple[bytes, str], bytes] = {}

    def put(key, value, overwrite=True, *, namespace=None):
        existed = (key.encode(), namespace) in data
        if overwrite or not existed:
            data[(key.encode(), namespace)] = value
        return existed  # Ray's: "whether the value already exists"

    monkeypatch.setattr(internal_kv, "_internal_kv_initialized", lambda: True)
    monkeypatch.setattr(internal_kv, "_internal_kv_put", put)
    monkeypatch.setattr(internal_kv, "_internal_kv_get",
                        lambda key, *, namespace=None: data.get((key.encode(), namespace)))
    monkeypatch.setattr(internal_kv, "_internal_kv_list", lambda prefix, *, namespace=None: [
        k for (k, ns) in data if ns == namespace and k.startswith(prefix.encode())])
    return data


def test_keys_live_under_the_apps_prefix_and_put_if_absent_refuses(kv):
    store = RayKVVoiceStore("app")
    assert store.put("cv/alice/1", b"v1", overwrite=False) is True
    assert store.put("cv/alice/1", b"v2", overwrite=False) is False
    assert store.get("cv/alice/1") == b"v1"
    assert store.put("cv/alice/1", b"v3", overwrite=True) is True
    assert store.get("cv/alice/1") == b"v3" and store.get("cv/bob/1") is None
    assert store.keys("cv/") == ["cv/alice/1"]
    assert list(kv) == [(b"saved-voices/app/cv/alice/1", NAMESPACE)]
    assert RayKVVoiceStore("other").keys("") == []


def test_without_ray_set_up_it_says_so(monkeypatch):
    monkeypatch.setattr(internal_kv, "_internal_kv_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="not set up"):
        RayKVVoiceStore("app").get("x")
