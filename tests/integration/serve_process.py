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
    """`voxflow serve` in a subprocess on free ports, its log in `log`."""

    def __init__(self, tmp_path: Path, *sets: str, wyoming: bool = False):
        self.port, self.wyoming_port = free_port(), free_port()
        self.log = tmp_path / "serve.log"
        argv = [sys.executable, "-m", "voxflow", "serve", "--port", str(self.port)]
        for item in sets:
            argv += ["--set", item]
        if wyoming:
            argv += ["--wyoming", str(self.wyoming_port)]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
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
