"""Arms of a comparison: the servers `bench compare` starts, health-checks, and always stops.

An arm is ``NAME[:ENGINE]=COMMAND``. The command is run by ``/bin/sh`` in its own process group
(its own session), with ``{port}`` replaced by a free port on 127.0.0.1 that the harness picked;
its output goes to a log file, and ``VOXFLOW_LOG_SETTINGS_JSON=1`` in its environment makes a
voxflow server log its whole settings there (`voxflow.bench.compare.logged_settings`). The
harness polls the arm's health (`Adapter.ready`) until it answers, the process exits, or the
start-up timeout passes. Stopping sends SIGTERM to the whole
group, then SIGKILL after a grace period; `ArmServer` is a context manager, so this happens on
errors and on Ctrl-C too.

Rotation: with arms a, b the starts go a b b a a b ...; with a, b, c: a b c c b a a b c ...;
each arm is started `runs` times, and every arm sees early and late positions alike.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from voxflow.bench.adapters import ENGINES, Adapter
from voxflow.bench.errors import EXIT_FAILED, BenchError
from voxflow.logging_setup import SETTINGS_JSON_ENV

PORT_PLACEHOLDER = "{port}"
HOST = "127.0.0.1"
STOP_GRACE_S = 15.0
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class Arm:
    """One server to compare: a name, the engine adapter it needs, the command that starts it,
    and the folder the command runs in (None: the working directory)."""

    name: str
    engine: str
    command: str
    cwd: str | None = None


def parse_arm(text: str, default_engine: str = "openai") -> Arm:
    """Parse ``NAME[:ENGINE]=COMMAND``.

    Raises:
        ValueError: no ``=``, an empty or odd name, an unknown engine, or no ``{port}``.
    """
    spec, sep, command = text.partition("=")
    name, _, engine = spec.partition(":")
    name, engine, command = name.strip(), (engine.strip() or default_engine), command.strip()
    if not sep or not command:
        raise ValueError(f"arm {text!r} is not NAME[:ENGINE]=COMMAND")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"arm name {name!r} must be letters, digits, '-' or '_'")
    if engine not in ENGINES:
        raise ValueError(f"arm {name}: unknown engine {engine!r}; engines: {', '.join(ENGINES)}")
    if PORT_PLACEHOLDER not in command:
        raise ValueError(f"arm {name}: the command must contain {PORT_PLACEHOLDER}, where the "
                         "harness puts the port the server must listen on")
    return Arm(name, engine, command)


def rotation(names: list[str], runs: int) -> list[str]:
    """The order of server starts: blocks of all arms, alternately forward and reversed."""
    order: list[str] = []
    for block in range(runs):
        order.extend(names if block % 2 == 0 else reversed(names))
    return order


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ArmServer:
    """A running arm: ``with ArmServer(arm, port, log_path) as server: ...`` stops it on exit."""

    def __init__(self, arm: Arm, port: int, log_path: Path):
        self.arm, self.port, self.log_path = arm, port, log_path
        self.command = arm.command.replace(PORT_PLACEHOLDER, str(port))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """Where the arm's server listens: ``tcp://`` for a Wyoming arm, else ``http://``."""
        scheme = "tcp" if self.arm.engine == "wyoming" else "http"
        return f"{scheme}://{HOST}:{self.port}"

    def __enter__(self) -> ArmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command, shell=True, cwd=self.arm.cwd, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                # a voxflow arm logs its whole settings at INFO, for the record
                env={**os.environ, SETTINGS_JSON_ENV: "1"},
            )
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after `STOP_GRACE_S`; idempotent."""
        proc, self.process = self.process, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                _reap_group(proc.pid)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    async def wait_ready(self, adapter: Adapter, client, timeout_s: float) -> float:
        """Poll the arm's health until it answers; returns the seconds it took.

        Raises:
            BenchError: the process exited, or no answer within `timeout_s`.
        """
        start = time.monotonic()
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise BenchError(f"arm {self.arm.name} exited (status {code}) before it was "
                                 f"ready; log {self.log_path}:\n{self.log_tail()}", EXIT_FAILED)
            if await adapter.ready(client):
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise BenchError(f"arm {self.arm.name} not ready after {timeout_s:.0f} s; "
                                 f"log {self.log_path}:\n{self.log_tail()}", EXIT_FAILED)
            await asyncio.sleep(0.25)


def _reap_group(pgid: int) -> None:
    """Kill what is left of the group once its leader has exited (children that outlived sh)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
