"""Kokoro's solo session (issue 17): a segment that starts while no other model run is in
progress runs on the `solo_threads` session (a lone request was held to one core: first audio
2.03 s, RTF 0.63), a segment beside another run or of a seeded request on the fixed one."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import make_state, run_stage, stage_item

from voxflow.models.kokoro.frontend import TokenSegment
from voxflow.models.kokoro.model import KokoroAcousticStage, KokoroFamily
from voxflow.models.kokoro.settings import KokoroSettings
from voxflow.models.solo import CPU_RUNS


class RecordingSession:
    """Passes runs to a real ONNX Runtime session and counts them."""

    def __init__(self, session):
        self._session = session
        self.runs = 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self._session.run(*args, **kwargs)


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> KokoroFamily:
    cache = tmp_path_factory.mktemp("kokoro_cache")
    fam = KokoroFamily("kokoro", KokoroSettings(cache_dir=cache, intra_op_threads=1,
                                                solo_threads=2))
    assert fam.solo_session is not None and fam.describe()["solo_threads"] == 2
    fam.graph = type(fam.graph)(RecordingSession(fam.graph.session), fam.graph.path,
                                fam.graph.sha256)
    fam.solo_session = RecordingSession(fam.solo_session)
    return fam


def _audio(family: KokoroFamily, seed: int | None) -> np.ndarray:
    state, _ = make_state(voice="jm_kumo", seed=seed)
    segment = family.frontend.segments("A short sentence.", "en-us", 300, None)[0]
    assert isinstance(segment, TokenSegment)
    [audio] = run_stage(KokoroAcousticStage(family), [stage_item(state, 0, segment)])
    return audio


def _runs(family: KokoroFamily) -> tuple[int, int]:
    """(solo, fixed) session runs so far."""
    return family.solo_session.runs, family.graph.session.runs


def test_a_lone_unseeded_segment_runs_on_the_solo_session(family):
    before = _runs(family)
    audio = _audio(family, seed=None)
    assert audio.size > 24000 // 2  # over half a second of speech
    assert np.subtract(_runs(family), before).tolist() == [1, 0]


def test_a_seeded_segment_runs_on_the_fixed_session(family):
    before = _runs(family)
    _audio(family, seed=7)
    assert np.subtract(_runs(family), before).tolist() == [0, 1]


def test_a_segment_beside_another_run_uses_the_fixed_session(family):
    before = _runs(family)
    with CPU_RUNS.run() as alone:  # another worker (of any family) is mid-run
        assert alone
        _audio(family, seed=None)
    assert np.subtract(_runs(family), before).tolist() == [0, 1]
    assert CPU_RUNS.running == 0


def test_no_solo_session_unless_it_has_more_threads(tmp_path):
    settings = KokoroSettings(cache_dir=tmp_path, intra_op_threads=2, solo_threads=2)
    assert KokoroFamily("kokoro", settings).solo_session is None
