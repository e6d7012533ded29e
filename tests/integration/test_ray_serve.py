"""Scale-out on Ray Serve (issue 15): the app as a Serve deployment with two replicas of the
default Piper voice (configs/piper.yaml) on a local Ray instance of 2 CPUs.

- 40 concurrent seeded requests (wav and pcm, streamed and whole) all succeed with the bytes
  the plain server gives for the same requests;
- a replica killed mid-run (``ray.kill`` on its actor) is replaced, and only its in-flight
  requests fail, cleanly: an OpenAI-shaped 503 or a stream cut before its end, never a hang;
- Ray's full queue is a 429 with ``Retry-After`` in the OpenAI error shape.

Skipped, with the reason, only when Ray is not installed (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import concurrent.futures as futures
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import start_server

from voxflow.config import Settings, load_settings

pytest.importorskip("ray.serve", reason="Ray is not installed: pip install -e '.[ray]'")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from voxflow.ray.app import APP_NAME, DEPLOYMENT_NAME, application  # noqa: E402
from voxflow.ray.proxy import CALLBACK, CALLBACK_ENV  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.ray]

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "piper.yaml"
SHORT = "The little red kite circled twice above the harbor."
LONG = ("The little red kite circled twice above the harbor. Then it settled on the mast of "
        "a fishing boat, where the gulls watched it with suspicion. The fishermen laughed "
        "and threw it a piece of bread, which it ignored. When the wind turned, the kite "
        "rose again and drifted inland over the fields, the hedges and the old stone "
        "church, until nobody could see it any more.")
# (input, seed, format, stream): 4 kinds x 10 = the 40 concurrent requests
KINDS = [(SHORT, 7, "wav", False), (SHORT, 8, "pcm", True), (LONG[:200], 9, "pcm", False),
         (SHORT, 10, "wav", True)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _settings(port: int, **ray_fields: object) -> Settings:
    # no audio cache: the same seeded requests are sent again and again, and the killed
    # replica's and the rolling update's must be synthesized, never answered from memory
    overrides = {"server.port": port, "cache.enabled": False,
                 **{f"ray.{k}": v for k, v in ray_fields.items()}}
    return load_settings(CONFIG, overrides)


def speak(url: str, text: str, seed: int, fmt: str, stream: bool,
          timeout: float = 90.0) -> httpx.Response:
    """POST a seeded speech request; the body is read whole (raises if it was cut)."""
    body = {"model": "piper", "voice": "joe", "input": text, "seed": seed,
            "response_format": fmt, "stream": stream}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=timeout)


@pytest.fixture(scope="module")
def reference() -> dict[tuple, bytes]:
    """The plain server's bytes for each kind of request, and for the long one."""
    live = start_server(config=str(CONFIG))
    try:
        out = {kind: speak(live.url, *kind).content for kind in KINDS}
        out[("long",)] = speak(live.url, LONG, 11, "pcm", True).content
    finally:
        live.stop()
    return out


@pytest.fixture(scope="module")
def ray_serve() -> Iterator[int]:
    """A local Ray instance (2 CPUs) with Serve's proxy on a free port; yields the port."""
    os.environ.setdefault(CALLBACK_ENV, CALLBACK)  # the proxy reads it when it starts
    # "local": a new instance even where a `ray start` cluster runs (or left its address
    # file behind, as test_ray_cluster's killed nodes do)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()


def _replica_names() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT_NAME}#")}


def _running_replicas() -> int:
    app = serve.status().applications.get(APP_NAME)
    if app is None:
        return 0
    return app.deployments[DEPLOYMENT_NAME].replica_states.get("RUNNING", 0)


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def two_replicas(ray_serve: int) -> str:
    """configs/piper.yaml on 2 replicas (1 CPU each); yields the URL."""
    serve.run(application(_settings(ray_serve, min_replicas=2, max_replicas=2)),
              name=APP_NAME, route_prefix="/")
    assert _running_replicas() == 2
    return f"http://127.0.0.1:{ray_serve}"


def test_40_concurrent_seeded_requests_give_the_plain_servers_bytes(two_replicas, reference):
    kinds = [KINDS[i % len(KINDS)] for i in range(40)]
    with futures.ThreadPoolExecutor(40) as pool:
        responses = list(pool.map(lambda kind: speak(two_replicas, *kind), kinds))
    assert [r.status_code for r in responses] == [200] * 40
    for kind, response in zip(kinds, responses, strict=True):
        assert len(response.content) > 10_000
        assert len(response.headers.get_list("x-request-id")) == 1  # not Ray's second one
        assert response.content == reference[kind], kind
    health = httpx.get(f"{two_replicas}/health", timeout=10)
    assert health.status_code == 200
    assert health.json()["status"] == "ready"


def _long_stream(url: str, started: threading.Event) -> tuple[str, bytes]:
    """One long streamed request: ("ok", body), ("cut", bytes so far) when the body ended
    early, or (f"status {code}", body) for an error status. Sets `started` once its first
    bytes (or its error status) arrived."""
    body = {"model": "piper", "voice": "joe", "input": LONG, "seed": 11,
            "response_format": "pcm", "stream": True}
    got = bytearray()
    try:
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=90) as r:
            if r.status_code != 200:
                started.set()
                return f"status {r.status_code}", r.read()
            for piece in r.iter_bytes():
                got.extend(piece)
                started.set()
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return "cut", bytes(got)
    finally:
        started.set()
    return "ok", bytes(got)


def _ongoing(name: str) -> int:
    """The requests replica actor `name` is serving now (Ray Serve's own count)."""
    actor = ray.get_actor(name, namespace="serve")
    return ray.get(actor.get_num_ongoing_requests.remote(), timeout=30)


def test_a_killed_replica_is_replaced_and_only_its_requests_fail(two_replicas, reference):
    before = _replica_names()
    assert len(before) == 2
    with futures.ThreadPoolExecutor(8) as pool:
        started = time.monotonic()
        first_bytes = [threading.Event() for _ in range(8)]
        runs = [pool.submit(_long_stream, two_replicas, event) for event in first_bytes]
        # every stream has begun on one replica or the other; the victim is one that serves
        # some of them (Ray's router may put all eight on one replica)
        assert all(event.wait(60) for event in first_bytes)
        serving = {name: _ongoing(name) for name in sorted(before)}
        victim = max(serving, key=lambda name: (0 < serving[name] < 8, serving[name]))
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        results = [run.result(timeout=120) for run in runs]
        took = time.monotonic() - started
    outcomes = [outcome for outcome, _ in results]
    print(f"killed {victim} serving {serving}: {outcomes} in {took:.1f} s")
    assert took < 100  # nobody hangs
    assert serving[victim] >= 1, serving
    failed = [(o, b) for o, b in results if o != "ok"]
    assert len(failed) == serving[victim], (serving, outcomes)  # its requests and no other
    for outcome, body in results:
        if outcome == "ok":
            assert body == reference[("long",)]
        elif outcome == "cut":
            assert len(body) < len(reference[("long",)])
        else:  # killed before its answer started: ours, never a bare 500
            assert outcome == "status 503", (outcome, body[:300])
            assert httpx.Response(503, content=body).json()["error"]["code"] == "replica_failed"
    _wait_for(lambda: _running_replicas() == 2 and len(_replica_names() - before) == 1, 120,
              "a new replica in place of the killed one")
    assert victim not in _replica_names()
    with futures.ThreadPoolExecutor(4) as pool:
        again = list(pool.map(lambda kind: speak(two_replicas, *kind), KINDS))
    assert [r.content for r in again] == [reference[kind] for kind in KINDS]


def test_a_rolling_update_lets_the_old_replicas_streams_finish(ray_serve, two_replicas,
                                                                reference):
    # issue 40 item 1 under Ray Serve: a redeploy with other settings replaces every replica;
    # Serve stops routing to the old ones and waits up to graceful_shutdown_timeout_s
    # (server.drain_timeout_s, 30 s) for their open responses, so no listener is cut
    old = _replica_names()
    assert len(old) == 2
    with futures.ThreadPoolExecutor(6) as pool:
        first_bytes = [threading.Event() for _ in range(6)]
        runs = [pool.submit(_long_stream, two_replicas, event) for event in first_bytes]
        assert all(event.wait(60) for event in first_bytes)
        serving = {name: _ongoing(name) for name in sorted(old)}
        serve.run(application(_settings(ray_serve, min_replicas=1, max_replicas=1)),
                  name=APP_NAME, route_prefix="/")
        results = [run.result(timeout=120) for run in runs]
    print(f"rolling update with {serving} in flight: {[o for o, _ in results]}")
    assert sum(serving.values()) == 6, serving
    assert [outcome for outcome, _ in results] == ["ok"] * 6
    assert all(body == reference[("long",)] for _, body in results)
    _wait_for(lambda: not (_replica_names() & old), 60, "the old replicas to stop")
    assert _running_replicas() == 1
    assert speak(two_replicas, *KINDS[0]).content == reference[KINDS[0]]


def test_a_full_queue_is_a_429_with_retry_after_in_the_openai_shape(ray_serve, two_replicas):
    # one replica taking one request at a time, one waiting: of 6 at once, most are refused
    serve.run(application(_settings(ray_serve, min_replicas=1, max_replicas=1,
                                     max_ongoing_requests=1, target_ongoing_requests=1,
                                     max_queued_requests=1)),
              name=APP_NAME, route_prefix="/")
    url = f"http://127.0.0.1:{ray_serve}"
    with futures.ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda _: speak(url, LONG, 3, "pcm", False), range(6)))
    codes = sorted(r.status_code for r in responses)
    print(f"full queue: {codes}")
    assert codes.count(200) >= 1 and codes.count(429) >= 3, codes
    assert set(codes) <= {200, 429}, codes
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("rate_limit_error", "overloaded",
                                                            None)
    assert "max_queued_requests=1" in error["message"]


KEY = "sk-ray-replica-3e9d41"
ORIGIN = "https://app.example.com"


def test_api_keys_and_cors_hold_through_rays_proxy(ray_serve, two_replicas):
    # issue 45 item 5: the settings (keys included, SecretStr) reach every replica, and Ray's
    # proxy passes the Authorization and Origin headers and the app's answers through as they
    # are; last in the module: it redeploys the app
    serve.run(application(load_settings(CONFIG, {
        "server.port": ray_serve, "ray.min_replicas": 2, "ray.max_replicas": 2,
        "server.api_keys": [KEY], "server.cors_origins": [ORIGIN]})),
        name=APP_NAME, route_prefix="/")
    url = f"http://127.0.0.1:{ray_serve}"
    body = {"model": "piper", "voice": "joe", "input": SHORT, "seed": 7,
            "response_format": "wav"}
    for _ in range(4):  # both replicas, whichever Ray picks
        refused = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=90)
        assert refused.status_code == 401, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("invalid_request_error", "missing_api_key")
        assert refused.headers["www-authenticate"] == 'Bearer realm="voxflow"'
    wrong = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=90,
                       headers={"Authorization": "Bearer sk-not-this-one"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert KEY not in wrong.text
    keyed = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=90,
                       headers={"Authorization": f"Bearer {KEY}", "Origin": ORIGIN})
    assert keyed.status_code == 200, keyed.text
    assert keyed.headers["access-control-allow-origin"] == ORIGIN
    assert keyed.content == speak_reference(url, body, KEY)  # seeded: same bytes again
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200  # open without a key
    preflight = httpx.options(f"{url}/v1/audio/speech", timeout=30, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    other = httpx.options(f"{url}/v1/audio/speech", timeout=30, headers={
        "Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in other.headers


def speak_reference(url: str, body: dict, key: str) -> bytes:
    """The keyed request's bytes once more (whichever replica answers)."""
    r = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=90,
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.content
