"""Arm servers: started in their own process group, always stopped, health polled."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from voxflow.bench import arms
from voxflow.bench.arms import Arm, ArmServer, free_port
from voxflow.bench.errors import BenchError


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def wait_gone(pgid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class ReadyAfter:
    """A fake adapter that answers its health check from the `n`-th poll on."""

    def __init__(self, n: int):
        self.n, self.polls = n, 0

    async def ready(self, client) -> bool:
        self.polls += 1
        return self.polls >= self.n


def test_stop_kills_the_whole_process_group_even_after_an_error(tmp_path):
    arm = Arm("a", "openai", "sleep 300 & sleep 300 # port {port}")
    with pytest.raises(RuntimeError), ArmServer(arm, free_port(), tmp_path / "a.log") as server:
        pgid = server.process.pid
        assert group_alive(pgid)
        raise RuntimeError("the bench failed")
    assert wait_gone(pgid)


def test_a_server_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path, monkeypatch):
    monkeypatch.setattr(arms, "STOP_GRACE_S", 0.3)
    arm = Arm("stubborn", "openai", "trap '' TERM; sleep 300; sleep 300 # {port}")
    with ArmServer(arm, free_port(), tmp_path / "s.log") as server:
        pgid = server.process.pid
        time.sleep(0.2)  # let the shell install its trap
    assert wait_gone(pgid)


def test_wait_ready_polls_until_healthy(tmp_path, monkeypatch):
    monkeypatch.setattr(arms.asyncio, "sleep", _no_sleep)
    adapter = ReadyAfter(3)
    with ArmServer(Arm("a", "openai", "sleep 30 # {port}"), 1, tmp_path / "a.log") as server:
        asyncio.run(server.wait_ready(adapter, None, timeout_s=30))
    assert adapter.polls == 3


def test_a_server_that_exits_fails_with_its_log(tmp_path):
    arm = Arm("broken", "openai", "echo 'cannot load model' >&2; exit 3 # {port}")
    with ArmServer(arm, free_port(), tmp_path / "b.log") as server:
        server.process.wait(timeout=5)
        with pytest.raises(BenchError, match=r"(?s)broken exited \(status 3\).*cannot load model"):
            asyncio.run(server.wait_ready(ReadyAfter(10**6), None, timeout_s=30))


def test_not_ready_in_time_fails(tmp_path):
    with ArmServer(Arm("slow", "openai", "sleep 30 # {port}"), 1, tmp_path / "s.log") as server:
        with pytest.raises(BenchError, match="slow not ready after 0 s"):
            asyncio.run(server.wait_ready(ReadyAfter(10**6), None, timeout_s=0.1))


def test_port_placeholder_is_substituted(tmp_path):
    out = tmp_path / "port.txt"
    with ArmServer(Arm("a", "openai", f"echo {{port}} > {out}"), 4321, tmp_path / "a.log") as s:
        s.process.wait(timeout=5)
    assert out.read_text().strip() == "4321"


async def _no_sleep(seconds: float) -> None:
    return None
