"""Waiting for ``voxflow.access`` lines in a test's `caplog`.

The server writes a request's access line when its response is over, which the client may see a
moment before the line is logged; a test that reads `caplog.records` right after the response
races that. Set the logger's level for the whole test (`caplog.set_level`, not a `with
caplog.at_level` block the line may land after), then wait here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest


def access_lines(caplog: pytest.LogCaptureFixture, request_id: str | None = None, *,
                 where: Callable[[logging.LogRecord], bool] = lambda record: True,
                 timeout_s: float = 10.0) -> list[logging.LogRecord]:
    """The ``voxflow.access`` records for `request_id` (any, if None) that `where` accepts,
    waiting up to `timeout_s` seconds for the first; an empty list if none came by then."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in caplog.records if r.name == "voxflow.access"
                 and (request_id is None or getattr(r, "request_id", None) == request_id)
                 and where(r)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)
