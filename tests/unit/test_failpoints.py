"""`voxflow.failpoints`: the fault-test hooks parse strictly, fire only for a marked request
(and a named stage), and a dying worker's failpoint fires once per request."""

import pytest

from voxflow import failpoints
from voxflow.failpoints import FailpointError, WorkerDeath


def test_parse_reads_pairs_and_refuses_unknown_names_and_empty_markers():
    assert failpoints.parse("stage_raise=BOOM@acoustic; worker_die=DIE;") == {
        "stage_raise": "BOOM@acoustic", "worker_die": "DIE"}
    assert failpoints.parse("") == {}
    for bad in ("stage_raise", "stage_raise=", "explode=X"):
        with pytest.raises(ValueError, match="VOXFLOW_FAILPOINTS"):
            failpoints.parse(bad)


def test_stage_raise_fires_for_a_marked_input_in_the_named_stage_only(monkeypatch):
    monkeypatch.setattr(failpoints, "ACTIVE", {"stage_raise": "BOOM@acoustic"})
    failpoints.stage_raise("acoustic", ["a plain sentence"])  # no marker: nothing
    failpoints.stage_raise("frontend", ["BOOM here"])  # another stage: nothing
    with pytest.raises(FailpointError, match="stage 'acoustic'"):
        failpoints.stage_raise("acoustic", ["fine", "BOOM here"])


def test_stage_raise_without_a_stage_fires_in_every_stage(monkeypatch):
    monkeypatch.setattr(failpoints, "ACTIVE", {"stage_raise": "BOOM"})
    with pytest.raises(FailpointError, match="stage 'frontend'"):
        failpoints.stage_raise("frontend", ["BOOM"])


def test_worker_die_raises_a_base_exception_once_per_request(monkeypatch):
    monkeypatch.setattr(failpoints, "ACTIVE", {"worker_die": "DIE"})
    failpoints.worker_die([("r0", "fine")])
    with pytest.raises(WorkerDeath) as caught:
        failpoints.worker_die([("r0", "fine"), ("r1", "DIE now")])
    assert not isinstance(caught.value, Exception)  # no `except Exception` stops it
    failpoints.worker_die([("r1", "DIE now")])  # fired already for r1
    with pytest.raises(WorkerDeath, match="request r2"):
        failpoints.worker_die([("r2", "DIE again")])
