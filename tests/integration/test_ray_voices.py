"""Saved voices across replicas (issue 45 item 3): two replicas of the tiny CosyVoice3 config
on a local Ray instance share their saved voices through Ray's KV store
(voxflow/server/voice_sync.py, voxflow/ray/voice_store.py).

- a voice created through the HTTP API on one replica is served by the other within the poll
  interval (``ray.voice_sync_interval_s``, 0.5 s here) with no request reaching it meanwhile,
  and then speaks from both replicas;
- a delete removes it from both (the other replica within the interval);
- a replica started later (Serve's replacement of a killed one) loads the voices created
  before it and not the deleted one.

Which replica did what is read from each replica's own log file (Ray writes a worker's stderr
to ``logs/worker-*.err`` of its session): the proxy gives no replica identity. Skipped, with
the reason, only when Ray is not installed.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from voxflow.config import load_settings

pytest.importorskip("ray.serve", reason="Ray is not installed: pip install -e '.[ray]'")
pytest.importorskip("torch")
pytest.importorskip("tiktoken")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from voxflow.models.cosyvoice3.voice_admin import tensor_bytes  # noqa: E402
from voxflow.models.cosyvoice3.voices import tiny_voice  # noqa: E402
from voxflow.ray.app import APP_NAME, DEPLOYMENT_NAME, application  # noqa: E402
from voxflow.ray.proxy import CALLBACK, CALLBACK_ENV  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.ray]

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "cosyvoice3"
INTERVAL_S = 0.5
SEEN_WITHIN_S = INTERVAL_S + 3.0  # the poll, plus a pass on a machine shared with other work


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _features() -> bytes:
    voice = tiny_voice(FIXTURES)
    return tensor_bytes(voice.tensors(), voice.metadata())


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> str:
    """The tiny CosyVoice3 config, its saved voices in one folder per test run (the replicas
    share it, as replicas of one machine would), no audio cache, the warm-up off."""
    base = yaml.safe_load((ROOT / "configs" / "cosyvoice3-tiny.yaml").read_text())
    folder = tmp_path_factory.mktemp("ray_voices")
    base["models"][0]["options"]["saved_voices_dir"] = str(folder / "saved")
    base["engine"]["warmup"] = False
    base["cache"] = {"enabled": False}
    base["ray"] = {"replica_cpus": 0.5, "voice_sync_interval_s": INTERVAL_S}
    path = folder / "voices.yaml"
    path.write_text(yaml.safe_dump(base))
    return str(path)


@pytest.fixture(scope="module")
def cluster(config: str) -> Iterator[tuple[str, Path]]:
    """A local Ray instance (2 CPUs), Serve's proxy on a free port, two replicas of `config`;
    yields the URL and the session's log folder."""
    os.environ.setdefault(CALLBACK_ENV, CALLBACK)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(application(_settings(config, port, 2)), name=APP_NAME, route_prefix="/")
        logs = Path(ray._private.worker.global_worker.node.get_logs_dir_path())
        yield f"http://127.0.0.1:{port}", logs
    finally:
        serve.shutdown()
        ray.shutdown()


def _settings(config: str, port: int, replicas: int):
    return load_settings(config, {"server.port": port, "ray.min_replicas": replicas,
                                  "ray.max_replicas": replicas})


def _replica_names() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT_NAME}#")}


def replica_logs(logs: Path) -> dict[str, str]:
    """Each voxflow replica's log so far, by file name (replicas: the workers whose log has
    voxflow's start-up line)."""
    out = {}
    for path in logs.glob("worker-*.err"):
        text = path.read_text(errors="replace")
        if "saved voices shared between replicas" in text:
            out[path.name] = text
    return out


def wait_logs(logs: Path, condition, timeout_s: float, what: str) -> tuple[dict[str, str], float]:
    """Wait until `condition(replica_logs)` holds; returns them and the seconds it took."""
    start = time.monotonic()
    while True:
        found = replica_logs(logs)
        if condition(found):
            return found, time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out waiting for {what}: {list(found)}")
        time.sleep(0.05)


def spoke(logs: Path, voice: str) -> set[str]:
    """The replicas whose access log has a speech request of `voice` answered 200."""
    return {name for name, text in replica_logs(logs).items()
            if any("status=200" in line and f"voice={voice} " in line
                   for line in text.splitlines())}


def speak(url: str, voice: str) -> httpx.Response:
    body = {"model": "cosyvoice3", "voice": voice, "input": "A shared voice.", "seed": 3,
            "response_format": "pcm", "stream": False}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def create(url: str, name: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/voices", data={"name": name, "model": "cosyvoice3"},
                      files={"features": ("v.safetensors", _features(),
                                          "application/octet-stream")}, timeout=60)


def test_a_voice_is_shared_by_every_replica_deleted_everywhere_and_loaded_later(cluster,
                                                                                config):
    url, logs = cluster
    wait_logs(logs, lambda found: len(found) == 2, 60, "two replicas")
    r = create(url, "alice")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "random-alice" and r.json()["saved"] is True

    # the other replica, which got no request, serves it within the poll interval
    created = "voice random-alice created"
    served = "cosyvoice3/random-alice from another replica served"
    found, took = wait_logs(
        logs, lambda f: any(created in t for t in f.values())
        and any(served in t for t in f.values()), SEEN_WITHIN_S, "the other replica")
    print(f"created on one replica, served by the other {took:.2f} s later (poll "
          f"{INTERVAL_S} s)")
    makers = [n for n, t in found.items() if created in t]
    takers = [n for n, t in found.items() if served in t]
    assert len(makers) == 1 and len(takers) == 1 and makers != takers

    # it speaks from both replicas (requests until each has answered one)
    answered: set[str] = set()
    for _ in range(30):
        r = speak(url, "random-alice")
        assert r.status_code == 200, r.text
        assert len(r.content) > 1000
        answered = spoke(logs, "random-alice")
        if len(answered) == 2:
            break
    assert len(answered) == 2, "one replica answered every request"
    listed = httpx.get(f"{url}/v1/audio/voices", params={"model": "cosyvoice3"}).json()["data"]
    assert {"random-alice": True} == {v["id"]: v["saved"] for v in listed if v["saved"]}

    # a second voice of the same name, on whichever replica: a 409, never a second copy
    r = create(url, "alice")
    assert r.status_code == 409 and r.json()["error"]["code"] == "voice_exists", r.text

    # deleted through either replica: gone from both
    r = httpx.delete(f"{url}/v1/audio/voices/random-alice", timeout=30)
    assert r.status_code == 200 and r.json()["deleted"] is True, r.text
    _, took = wait_logs(
        logs, lambda f: any("random-alice deleted on another replica" in t
                            for t in f.values()), SEEN_WITHIN_S, "the delete elsewhere")
    print(f"deleted on one replica, gone from the other {took:.2f} s later")
    for _ in range(6):
        r = speak(url, "random-alice")
        assert r.status_code == 400 and r.json()["error"]["code"] == "voice_not_found", r.text

    # a replica started later loads what was created before it, and not the deleted voice;
    # its file is removed from the shared folder once both replicas wrote it (a new machine's
    # empty disk), so the new replica can only have it from the store
    assert create(url, "bob").status_code == 200
    wait_logs(logs, lambda f: any("random-bob from another replica served" in t
                                  for t in f.values()), SEEN_WITHIN_S, "bob on the other")
    saved = Path(yaml.safe_load(Path(config).read_text())["models"][0]["options"]
                 ["saved_voices_dir"])
    (saved / "bob.safetensors").unlink()
    before = set(replica_logs(logs))
    # one replica killed: the one Serve starts in its place is a replica started later
    ray.kill(ray.get_actor(sorted(_replica_names())[0], namespace="serve"), no_restart=True)
    found, _ = wait_logs(logs, lambda f: len(set(f) - before) == 1, 60, "a new replica")
    late = found[next(iter(set(found) - before))]
    print("the new replica, at start-up:", *[line for line in late.splitlines()
                                            if "saved voices" in line], sep="\n  ")
    assert "cosyvoice3/random-bob from another replica served" in late
    assert "random-alice from another replica served" not in late
    new = next(iter(set(found) - before))
    deadline = time.monotonic() + 60
    while new not in spoke(logs, "random-bob"):  # until the new replica answers one
        assert time.monotonic() < deadline, "the new replica never spoke with random-bob"
        r = speak(url, "random-bob")
        assert r.status_code in (200, 503), r.text  # 503: the killed one, not yet replaced
