"""Start and stop a real `voxflow serve` (configs/multi.yaml) for the conformance suite.

Standard library only: the runner (`run.py`, under the project's .venv) and the client venvs'
conftest (when no server URL is given) both use it. The server is the project's own
`.venv/bin/voxflow`, a separate process on a free loopback port; Kokoro's model is joined into
a cache directory on first start (a temporary one unless `VOXFLOW_CONFORMANCE_KOKORO_CACHE`
names one to keep between runs).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "multi.yaml"
VOXFLOW = REPO / ".venv" / "bin" / "voxflow"
START_TIMEOUT_S = 300.0  # a fresh machine joins Kokoro's ~92 MB model first (about 10 s here)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A running `voxflow serve` process and where it listens."""

    url: str
    process: subprocess.Popen
    wyoming_port: int
    log_path: Path
    _tmp: list[tempfile.TemporaryDirectory] = field(default_factory=list)

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's output."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM (uvicorn's graceful stop), SIGKILL after 30 s; removes its temporary dirs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        for tmp in self._tmp:
            tmp.cleanup()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start(log_dir: Path | None = None) -> Server:
    """Start `voxflow serve --config configs/multi.yaml` on a free port (and its Wyoming
    listener on another, for Home Assistant's check) and wait for /health.

    Raises RuntimeError (with the server's last log lines) if it exits or is not healthy
    within START_TIMEOUT_S.
    """
    if not VOXFLOW.exists():
        raise RuntimeError(f"{VOXFLOW} is missing: run `make install` first")
    temps: list[tempfile.TemporaryDirectory] = []
    cache = os.environ.get("VOXFLOW_CONFORMANCE_KOKORO_CACHE")
    if not cache:
        temps.append(tempfile.TemporaryDirectory(prefix="voxflow-conformance-kokoro-"))
        cache = temps[-1].name
    if log_dir is None:
        temps.append(tempfile.TemporaryDirectory(prefix="voxflow-conformance-log-"))
        log_dir = Path(temps[-1].name)
    log_path = Path(log_dir) / "voxflow-server.log"
    port, wyoming_port = free_port(), free_port()
    command = [str(VOXFLOW), "serve", "--config", str(CONFIG), "--host", "127.0.0.1",
               "--port", str(port), "--wyoming", str(wyoming_port),
               "--set", f"models.1.options.cache_dir={cache}"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    server = Server(f"http://127.0.0.1:{port}", process, wyoming_port, log_path, temps)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _healthy(server.url):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"voxflow serve did not become healthy ({' '.join(command)}); "
                               f"last log lines:\n{tail}")
        time.sleep(0.25)
    return server
