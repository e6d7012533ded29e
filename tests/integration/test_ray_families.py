"""Every family behind Ray Serve (issue 45 item 4): one replica serving Kokoro (real weights)
and CosyVoice3 and MagpieTTS on tiny random weights from one config, as the plain server does.

- seeded requests of each family give the plain server's bytes through Ray's proxy (whole and
  streamed), and the random-weight families are labelled noise (``X-Voxflow-Weights``);
- a replica killed while a CosyVoice3 stream is in flight: that request ends as documented
  (a cut body or a 503 ``replica_failed``), Serve starts a new replica (fresh engine, none of
  the lost one's per-request state), and it serves the same seeded bytes.

Skipped, with the reason, only when Ray is not installed.
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
from conftest import start_server

from voxflow.config import load_settings

pytest.importorskip("ray.serve", reason="Ray is not installed: pip install -e '.[ray]'")
pytest.importorskip("torch")

import ray  # noqa: E402
from ray import serve  # noqa: E402

from voxflow.ray.app import APP_NAME, DEPLOYMENT_NAME, application  # noqa: E402
from voxflow.ray.proxy import CALLBACK, CALLBACK_ENV  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.ray]

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TEXT = "The little red kite circled twice above the harbor."
# (model, voice, stream): seeded pcm at each model's own rate
REQUESTS = [("kokoro", "jm_kumo", False), ("cosyvoice3", "random-tiny", False),
            ("cosyvoice3", "random-tiny", True), ("magpie", "random-0", False)]
LONG = " ".join(f"Sentence number {i} keeps the tiny model busy for a while." for i in range(12))


def _model(path: Path, name: str) -> dict:
    models = yaml.safe_load(path.read_text())["models"]
    return next(m for m in models if m["name"] == name)


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> str:
    """One file with the three families (each model as its shipped config gives it; MagpieTTS
    greedy so that its bytes are a function of the request)."""
    base = yaml.safe_load((CONFIGS / "cosyvoice3-tiny.yaml").read_text())
    magpie = _model(CONFIGS / "magpie-tiny.yaml", "magpie")
    magpie["options"]["greedy"] = True
    base["models"] = [_model(CONFIGS / "multi.yaml", "kokoro"),
                      _model(CONFIGS / "cosyvoice3-tiny.yaml", "cosyvoice3"), magpie]
    base["engine"]["max_inflight_requests"] = 8
    path = tmp_path_factory.mktemp("families") / "families.yaml"
    path.write_text(yaml.safe_dump(base))
    return str(path)


def speak(url: str, model: str, voice: str, stream: bool, text: str = TEXT,
          timeout: float = 120.0) -> httpx.Response:
    body = {"model": model, "voice": voice, "input": text, "seed": 5, "stream": stream,
            "response_format": "pcm", "sample_rate": "native"}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=timeout)


@pytest.fixture(scope="module")
def reference(config: str) -> Iterator[dict[tuple, bytes]]:
    """The plain server's bytes, with torch on one thread as in a replica of one CPU (Ray sets
    a replica's ``OMP_NUM_THREADS`` to its ``num_cpus``): float sums in another order give
    other bytes, which is the thread count's doing, not Ray's."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    live = start_server(config=config)
    try:
        out = {}
        for kind in REQUESTS:
            r = speak(live.url, *kind)
            assert r.status_code == 200, r.text
            out[kind] = r.content
        out[("long",)] = speak(live.url, "cosyvoice3", "random-tiny", True, LONG).content
    finally:
        live.stop()
        torch.set_num_threads(threads)
    yield out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def replica(config: str) -> Iterator[str]:
    """A local Ray instance (2 CPUs), Serve's proxy on a free port, one replica of `config`."""
    os.environ.setdefault(CALLBACK_ENV, CALLBACK)
    # "local": a new instance even where a `ray start` cluster runs (or left its address
    # file behind, as test_ray_cluster's killed nodes do)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(application(load_settings(config, {"server.port": port})),
                  name=APP_NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def _replica_names() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT_NAME}#")}


def test_each_family_gives_the_plain_servers_seeded_bytes_through_ray(replica, reference):
    for kind in REQUESTS:
        r = speak(replica, *kind)
        assert r.status_code == 200, (kind, r.text)
        assert r.content == reference[kind], kind
        assert len(r.content) > 1000, kind
        noise = r.headers.get("x-voxflow-weights")
        assert noise == (None if kind[0] == "kokoro" else "random"), (kind, noise)
    models = {m["id"] for m in httpx.get(f"{replica}/v1/models", timeout=30).json()["data"]}
    assert {"kokoro", "cosyvoice3", "magpie"} <= models


def test_a_lost_replica_ends_its_stream_and_its_replacement_serves_the_same_bytes(replica,
                                                                                   reference):
    before = _replica_names()
    assert len(before) == 1
    body = {"model": "cosyvoice3", "voice": "random-tiny", "input": LONG, "seed": 5,
            "stream": True, "response_format": "pcm", "sample_rate": "native"}
    got = b""
    outcome = "ok"
    with httpx.stream("POST", f"{replica}/v1/audio/speech", json=body, timeout=120) as r:
        if r.status_code != 200:
            outcome = f"status {r.status_code}"
            got = r.read()
        else:
            try:
                for chunk in r.iter_bytes():
                    if not got:  # first audio: the stream is running on the replica
                        ray.kill(ray.get_actor(next(iter(before)), namespace="serve"),
                                 no_restart=True)
                    got += chunk
            except httpx.HTTPError:
                outcome = "cut"
    print(f"killed mid-stream: {outcome}, {len(got)} of {len(reference[('long',)])} bytes")
    if outcome == "cut" or outcome == "ok":  # ok: the body ended short, never a clean full end
        assert 0 < len(got) < len(reference[("long",)])
    else:
        assert outcome == "status 503", (outcome, got[:300])
        assert httpx.Response(503, content=got).json()["error"]["code"] == "replica_failed"
    deadline = time.monotonic() + 180
    while not (_replica_names() - before):
        assert time.monotonic() < deadline, "no replica replaced the killed one"
        time.sleep(0.5)
    while True:  # the new replica answers once its engine is loaded and warmed up
        r = speak(replica, *REQUESTS[2])
        if r.status_code == 200:
            break
        assert r.status_code == 503 and time.monotonic() < deadline, r.text
        time.sleep(1)
    assert r.content == reference[REQUESTS[2]]
    assert speak(replica, *REQUESTS[0]).content == reference[REQUESTS[0]]
