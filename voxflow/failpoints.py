"""Failpoints: faults injected on purpose into a real server, for fault testing only
(benchmarks/faults.py, tests/integration/test_faults.py). Never set them in a deployment.

Read once, at import, from the environment variable `ENV`: ``name=marker`` pairs separated by
``;``, e.g. ``VOXFLOW_FAILPOINTS="stage_raise=FAULT-RAISE;worker_die=FAULT-DIE"``. A failpoint
fires for a batch of which some request's `input` contains its marker (a request without the
marker is never touched, so the test's other requests show what its fault does to them):

- ``stage_raise``: the stage's run raises `FailpointError`, an ordinary exception, as a model
  that fails on one input does (`voxflow.engine.worker.run_safely` isolates it to its request).
  ``stage_raise=MARKER@STAGE`` fires in the stage named STAGE only (e.g. ``acoustic``).
- ``worker_die``: the worker loop raises `WorkerDeath`, a `BaseException`, which no ``except
  Exception`` catches: the worker thread's loop dies, as it would on a bug in the engine's own
  code around a run (routing, the memory gate). It fires once per request: the restarted loop
  must not die on the same request's next item.

Unset (every deployment), each check is one dict lookup on an empty dict.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

ENV = "VOXFLOW_FAILPOINTS"
"""The environment variable read at import."""

STAGE_RAISE = "stage_raise"
WORKER_DIE = "worker_die"
NAMES = (STAGE_RAISE, WORKER_DIE)


class FailpointError(RuntimeError):
    """Raised by the ``stage_raise`` failpoint inside a stage's run."""


class WorkerDeath(BaseException):  # noqa: N818 (a death, not an error a caller handles)
    """Raised by the ``worker_die`` failpoint in a worker loop: not an `Exception`, so only a
    supervisor that catches `BaseException` stops it from ending the thread."""


def parse(spec: str) -> dict[str, str]:
    """``name=marker;...`` as {name: marker}.

    Raises:
        ValueError: a pair without ``=``, an empty marker, or a name not in `NAMES`.
    """
    points: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, marker = pair.partition("=")
        name = name.strip()
        if not sep or not marker or name not in NAMES:
            raise ValueError(f"{ENV}: {pair!r} is not NAME=MARKER with NAME one of "
                             f"{', '.join(NAMES)}")
        points[name] = marker
    return points


ACTIVE: dict[str, str] = parse(os.environ.get(ENV, ""))
"""The failpoints set for this process (empty in every deployment)."""

_died: set[str] = set()  # request ids whose worker_die has fired
_died_lock = threading.Lock()


def _marked(name: str, texts: Iterable[str]) -> str | None:
    """The marker of failpoint `name` (its ``@STAGE`` part cut off) if set and in a text."""
    marker = ACTIVE.get(name)
    if marker is None:
        return None
    marker = marker.partition("@")[0]
    return marker if any(marker in text for text in texts) else None


def stage_raise(stage: str, texts: Iterable[str]) -> None:
    """Raise `FailpointError` if ``stage_raise`` is set for `stage` (or for every stage) and
    one of `texts` (the batch's request inputs) holds its marker."""
    if STAGE_RAISE not in ACTIVE:
        return
    only = ACTIVE[STAGE_RAISE].partition("@")[2]
    if (not only or only == stage) and _marked(STAGE_RAISE, texts):
        raise FailpointError(f"failpoint {STAGE_RAISE} in stage '{stage}'")


def worker_die(requests: Iterable[tuple[str, str]]) -> None:
    """Raise `WorkerDeath` if ``worker_die`` is set and one of `requests` ((request id, input)
    pairs of the batch a worker took) holds its marker and has not fired it yet."""
    if WORKER_DIE not in ACTIVE:
        return
    for request_id, text in requests:
        if _marked(WORKER_DIE, (text,)):
            with _died_lock:
                if request_id in _died:
                    continue
                _died.add(request_id)
            raise WorkerDeath(f"failpoint {WORKER_DIE} (request {request_id})")
