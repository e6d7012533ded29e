"""Goodput of a two-node Ray cluster through the loss of a node (issue 45 item 2).

A head and a second node on this machine (`voxflow.ray.local_cluster`, one CPU each), two
replicas of configs/piper.yaml (one a node), Serve's proxy on the head. `voxflow bench run`
offers an open-loop load (seeded Poisson arrivals, the sentences file) twice at the same rate:
once with both nodes up throughout ("steady"), once with the second node SIGKILLed
`--kill-at` seconds into the run and started again `--back-after` seconds later ("loss").
Each run's table and JSON (`--out`) are the bench's own: goodput is the share of requests
with first audio within 1 s and no stall. Run it through ``benchmarks/cluster.sh``.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ray import serve

from voxflow.config import load_settings
from voxflow.ray.app import APP_NAME, application
from voxflow.ray.local_cluster import LocalCluster, replica_nodes

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bench(url: str, rate: float, duration: float, out: Path) -> subprocess.Popen:
    """`voxflow bench run`'s open loop at `rate` against `url`, started now. Its idle gate is
    cut to 1 s (``--allow-busy``): the cluster's own processes never look idle, and the node
    must be lost while the window is measured, which the gate's wait would shift."""
    command = [str(Path(sys.executable).with_name("voxflow")), "bench", "run", "--url", url,
               "--request-rate", str(rate), "--duration", str(duration), "--warmup-s", "5",
               "--allow-busy", "--idle-timeout", "1", "--out", str(out)]
    return subprocess.Popen(command)


def _wait_replicas(count: int, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while len(set(replica_nodes(APP_NAME).values())) != count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {count} nodes with a replica: {replica_nodes(APP_NAME)}")
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.5, help="offered requests/s (0.5)")
    parser.add_argument("--duration", type=float, default=60, help="measured seconds (60)")
    parser.add_argument("--kill-at", type=float, default=20,
                        help="seconds after the measured window opens (20)")
    parser.add_argument("--back-after", type=float, default=20,
                        help="seconds the node stays down (20)")
    parser.add_argument("--out", type=Path, default=Path("bench-cluster"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    nodes = LocalCluster()
    try:
        nodes.start_node("head")
        nodes.start_node("second")
        nodes.connect()
        nodes.wait_alive(2)
        port = _free_port()
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        serve.run(application(load_settings(REPO / "configs" / "piper.yaml", {
            "ray.min_replicas": 2, "ray.max_replicas": 2})), name=APP_NAME, route_prefix="/")
        _wait_replicas(2)
        url = f"http://127.0.0.1:{port}"
        print(f"== steady: two nodes, {args.rate} requests/s", flush=True)
        _bench(url, args.rate, args.duration, args.out / "steady.json").wait()
        print(f"== loss: node 'second' SIGKILLed {args.kill_at:g} s into the measured window, "
              f"back {args.back_after:g} s later", flush=True)
        bench = _bench(url, args.rate, args.duration, args.out / "loss.json")
        time.sleep(5 + args.kill_at)  # the bench's warm-up, then into the window
        killed = nodes.kill_node("second")
        lost = time.monotonic()
        print(f"   killed {killed} processes of node 'second'", flush=True)
        time.sleep(args.back_after)
        nodes.start_node("second")
        returned = threading.Event()

        def watch() -> None:
            _wait_replicas(2)
            print(f"   a replica on 'second' again {time.monotonic() - lost:.0f} s after the "
                  "loss", flush=True)
            returned.set()

        threading.Thread(target=watch, daemon=True).start()
        bench.wait()
        returned.wait(180)
    finally:
        try:
            serve.shutdown()
        finally:
            nodes.disconnect()
            nodes.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
