"""A Ray cluster of separate nodes on one machine, for tests and ``benchmarks/cluster.sh``.

Each node is its own ``ray start --block`` process (a head, then workers joining it), with its
own CPUs and a custom resource naming it (``node_<name>: 1``), as on real machines where each
runs ``ray start`` (docs/scale-out.md, "A cluster"). Token authentication, which Ray 2.60's
``ray start --head`` turns on, is kept: one random token reaches every node and the driver
through ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` (`environment`). A node is lost the
way a machine is: its raylet and everything it started are sent SIGKILL (`kill_node`).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = Path(sys.executable).with_name("ray")
"""The ``ray`` command of this interpreter's environment."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalCluster:
    """Ray nodes started as processes of this machine (a head at `port`, then workers).

    Attributes:
        port: the head's GCS port (``address`` is ``127.0.0.1:port``).
        token: the cluster's authentication token, shared by every node and the driver.
        nodes: node name -> its ``ray start --block`` process.
    """

    port: int = field(default_factory=_free_port)
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The variables a node or a driver of this cluster needs: token authentication;
        voxflow's proxy middlewares for Serve's proxy (`voxflow.ray.proxy`); and no
        preference for the proxy's own node. Serve's proxy sends every request to a replica
        on its node while one has room (``RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING``, on by
        default): with one proxy, on the head, the other nodes' replicas would get nothing
        until the head's are full. Also Serve's slower timers, `voxflow.ray.launch.SERVE_ENV`."""
        from voxflow.ray.launch import SERVE_ENV
        from voxflow.ray.proxy import CALLBACK, CALLBACK_ENV

        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, CALLBACK_ENV: CALLBACK,
                "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0", **SERVE_ENV}

    def start_node(self, name: str, cpus: int = 1, timeout_s: float = 60.0) -> None:
        """Start node `name` (the head when it is the first) with `cpus` CPUs and the custom
        resource ``node_<name>``; returns once Ray counts it alive.

        Raises:
            RuntimeError: the node did not join within `timeout_s`.
        """
        head = not self.nodes
        where = (["--head", f"--port={self.port}", "--include-dashboard=false"] if head
                 else [f"--address={self.address}"])
        command = [str(RAY), "start", "--block", *where, "--node-ip-address=127.0.0.1",
                   f"--num-cpus={cpus}", f'--resources={{"node_{name}": 1}}',
                   "--disable-usage-stats"]
        env = {**os.environ, **self.environment()}
        self.nodes[name] = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while self._raylet(name) is None:
            if self.nodes[name].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Ray node {name} did not start")
            time.sleep(0.2)

    def connect(self) -> None:
        """Connect this process to the cluster as its driver (``ray.init``), with the
        cluster's token. Ray reads its authentication mode and token once per process and
        caches them: they are reloaded here (what Ray's own tests do, ``ray 2.60``'s
        ``reset_auth_token_state``), so a process that ran another Ray instance before can
        connect. `disconnect` undoes it."""
        import ray
        from ray._private.authentication_test_utils import reset_auth_token_state

        self._saved = {key: os.environ.get(key) for key in self.environment()}
        os.environ.update(self.environment())
        reset_auth_token_state()
        ray.init(address=self.address, log_to_driver=False)

    def disconnect(self) -> None:
        """``ray.shutdown`` and the environment as it was before `connect`."""
        import ray
        from ray._private.authentication_test_utils import reset_auth_token_state

        ray.shutdown()
        for key, value in getattr(self, "_saved", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reset_auth_token_state()

    @staticmethod
    def wait_alive(count: int, timeout_s: float = 60.0) -> None:
        """Wait until the connected driver's Ray counts `count` nodes alive (a raylet
        registers with the head a moment after it starts).

        Raises:
            RuntimeError: not within `timeout_s`.
        """
        import ray

        deadline = time.monotonic() + timeout_s
        while sum(1 for node in ray.nodes() if node["Alive"]) != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray did not count {count} nodes alive")
            time.sleep(0.2)

    def _raylet(self, name: str) -> psutil.Process | None:
        """Node `name`'s raylet (``ray start`` detaches it): the ``raylet`` process whose
        ``--static_resource_list`` holds ``node_<name>``."""
        for proc in psutil.process_iter(["cmdline"]):
            if _node_of(proc.info["cmdline"] or []) == f"node_{name}":
                return proc
        return None

    def kill_node(self, name: str) -> int:
        """SIGKILL node `name`'s raylet and every process it started (its workers, the
        replicas on it, its agents), and its ``ray start``; returns how many were killed."""
        raylet = self._raylet(name)
        victims = [] if raylet is None else [raylet, *raylet.children(recursive=True)]
        for proc in victims:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        process = self.nodes.pop(name, None)
        if process is not None:
            process.kill()
            process.wait(10)
        return len(victims)

    def stop(self) -> None:
        """Stop every node, workers first, the head last (SIGTERM, then SIGKILL)."""
        for name in reversed(list(self.nodes)):
            process = self.nodes[name]
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill_node(name)
        for name in list(self.nodes):
            self.kill_node(name)
        self.nodes.clear()
        _forget_address(self.port)


CURRENT_CLUSTER = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
"""Where ``ray start --head`` writes the head's address, and where ``ray.init()`` without an
address looks for a cluster to join (``ray stop`` removes it; a head stopped otherwise does
not)."""


def _forget_address(port: int) -> None:
    """Remove `CURRENT_CLUSTER` when it names the head at `port`: left behind, it sends a later
    ``ray.init()`` of this machine to a cluster that is gone."""
    try:
        if CURRENT_CLUSTER.read_text().strip().endswith(f":{port}"):
            CURRENT_CLUSTER.unlink()
    except OSError:
        pass


def _node_of(cmdline: list[str]) -> str | None:
    """The ``node_<name>`` resource of a raylet's command line; None for another process."""
    if not cmdline or not cmdline[0].endswith("/raylet"):
        return None
    for arg in cmdline:
        if arg.startswith("--static_resource_list="):
            items = arg.partition("=")[2].split(",")[::2]
            return next((item for item in items if item.startswith("node_")), "")
    return ""


def replica_nodes(deployment_prefix: str) -> dict[int, str]:
    """PID of each running Serve replica of `deployment_prefix` (the actor process title,
    ``ray::ServeReplica:APP:DEPLOYMENT``) -> the node it runs on (``node_<name>`` of its
    raylet's command line, "" when none is found)."""
    out = {}
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if not cmdline.startswith(f"ray::ServeReplica:{deployment_prefix}"):
            continue
        nodes = [_node_of(parent.cmdline()) for parent in proc.parents()]
        out[proc.pid] = next((node for node in nodes if node is not None), "")
    return out


__all__ = ["LocalCluster", "replica_nodes"]
