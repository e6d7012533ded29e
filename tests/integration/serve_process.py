"""`voxflow serve` in a subprocess, for tests of what only a real process shows: signals, exit
codes, uvicorn's proxy-header handling, a proxy in front."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from voxflow.bench.arms import free_port


class Server:
    """`voxflow serve` in a subprocess on free ports, its log in `log` (appended to: a server
    started again in the same folder adds its lines); `config` a YAML file (None: the default
    Piper voice), `env` variables added to the environment (`voxflow.failpoints`)."""

    def __init__(self, tmp_path: Path, *sets: str, wyoming: bool = False,
                 config: Path | None = None, env: dict[str, str] | None = None):
        self.port, self.wyoming_port = free_port(), free_port()
        self.log = tmp_path / "serve.log"
        argv = [sys.executable, "-m", "voxflow", "serve", "--port", str(self.port)]
        if config is not None:
            argv += ["--config", str(config)]
        for item in sets:
            argv += ["--set", item]
        if wyoming:
            argv += ["--wyoming", str(self.wyoming_port)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready: {self.log.read_text()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        os.kill(self.proc.pid, sig)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
