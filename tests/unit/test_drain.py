"""`voxflow.engine.drain.Drain`: what a stopping server waits for, what it refuses, and how
it ends what is left (the signals and protocols end to end:
tests/integration/test_graceful_stop.py)."""

from __future__ import annotations

import asyncio

import pytest

from voxflow.engine.drain import Drain
from voxflow.errors import ShuttingDownError
from voxflow.server.errors import error_response
from voxflow.server.stream_protocol import close_code


def test_new_work_is_refused_only_once_draining_begins():
    drain = Drain(retry_after_s=7)
    drain.check()
    drain.begin()
    with pytest.raises(ShuttingDownError) as caught:
        drain.check()
    error = caught.value
    assert (error.status, error.code, error.retry_after) == (503, "shutting_down", 7)
    response = error_response(error)
    assert (response.status_code, response.headers["retry-after"]) == (503, "7")
    assert close_code(error) == 1001  # WebSocket: going away


def test_activities_and_aborts_are_what_is_in_flight():
    drain = Drain()
    forget = drain.on_abort(lambda: None)
    with drain.activity():
        with drain.activity(abort=lambda: None):
            assert drain.in_flight == 4  # two activities, two aborts (one an activity's)
            assert drain.describe() == "2 requests or sessions, 1 engine requests"
        assert drain.in_flight == 2
    forget()
    forget()  # idempotent
    assert drain.in_flight == 0


def test_wait_idle_returns_when_the_work_ends_or_at_the_timeout():
    drain = Drain()

    async def work_for(seconds: float) -> None:
        with drain.activity():
            await asyncio.sleep(seconds)

    async def scenario():
        task = asyncio.create_task(work_for(0.2))
        await asyncio.sleep(0)
        idle_early = await drain.wait_idle(0.05)
        idle_later = await drain.wait_idle(5)
        await task
        return idle_early, idle_later

    assert asyncio.run(scenario()) == (False, True)


def test_abort_all_calls_every_abort_even_past_a_failing_one():
    drain = Drain()
    called = []

    def broken() -> None:
        called.append("broken")
        raise RuntimeError("boom")

    drain.on_abort(broken)
    drain.on_abort(lambda: called.append("second"))
    assert drain.abort_all() == 2
    assert called == ["broken", "second"]
