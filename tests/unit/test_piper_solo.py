"""Piper's solo sessions: an encoder or decoder run that starts while no other Piper run is in
progress gets more threads (the bench: a lone request ran 1.7x slower than piper's own server on
one-thread workers), while a seeded request always runs on the fixed-thread sessions, so its
bytes never depend on the load."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fakes import make_state, run_stage, stage_item

from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.models.piper.model import PiperAcousticStage, PiperDecoderStage, PiperFamily
from voxflow.models.piper.settings import PiperSettings
from voxflow.stages.items import StageItem


class RecordingSession:
    """Passes runs to a real ONNX Runtime session and records that it was used."""

    def __init__(self, session):
        self._session = session
        self.runs = 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self._session.run(*args, **kwargs)


def _recording(graph):
    frames = dataclasses.replace(graph.frames, decoder=RecordingSession(graph.frames.decoder))
    return dataclasses.replace(graph, session=RecordingSession(graph.session), frames=frames)


@pytest.fixture
def family(tiny_voice_dir):
    settings = PiperSettings(include_default_voice=False, voices_dir=tiny_voice_dir,
                             default_voice="tiny", solo_threads=2)
    fam = PiperFamily("piper", settings)
    voice = fam.voice_models["tiny"]
    assert voice.solo_graph is not None
    fam.voice_models["tiny"] = dataclasses.replace(
        voice,
        graph=_recording(voice.graph),
        solo_graph=_recording(voice.solo_graph),
    )
    return fam


def _item(seed: int | None) -> StageItem:
    state, _ = make_state(voice="tiny", seed=seed)
    ids = np.asarray([1, 0, 20, 0, 31, 0, 2], np.int64)
    return stage_item(state, 0, PhonemeSegment("x", ids))


def _runs(voice) -> tuple[int, int, int, int]:
    """(solo encoder, fixed encoder, solo decoder, fixed decoder) runs."""
    return (voice.solo_graph.session.runs, voice.graph.session.runs,
            voice.solo_graph.frames.decoder.runs, voice.graph.frames.decoder.runs)


def _decode(family, item: StageItem, windows) -> list[np.ndarray]:
    stage = PiperDecoderStage(family)
    return [run_stage(stage, [dataclasses.replace(item, payload=w)])[0] for w in windows]


def test_a_lone_unseeded_segment_runs_on_the_solo_sessions(family):
    item = _item(seed=None)
    [windows] = run_stage(PiperAcousticStage(family), [item])
    [audio] = _decode(family, item, windows)
    assert _runs(family.voice_models["tiny"]) == (1, 0, 1, 0)
    assert audio.size > 0


def test_a_seeded_segment_always_runs_on_the_fixed_sessions(family):
    item = _item(seed=3)
    [windows] = run_stage(PiperAcousticStage(family), [item])
    _decode(family, item, windows)
    assert _runs(family.voice_models["tiny"]) == (0, 1, 0, 1)


def test_a_segment_beside_another_run_uses_the_fixed_sessions_in_line(family):
    item = _item(seed=None)
    with family.runs.run() as alone:  # another worker is mid-run
        assert alone
        [audio] = run_stage(PiperAcousticStage(family), [item])
    assert audio.size > 0  # decoded in line by the acoustic stage: no decoder stage run
    assert _runs(family.voice_models["tiny"]) == (0, 1, 0, 1)
    with family.runs.run() as alone:
        assert alone  # the count went back to 0


def test_solo_threads_zero_loads_no_second_session(tiny_voice_dir):
    settings = PiperSettings(include_default_voice=False, voices_dir=tiny_voice_dir,
                             default_voice="tiny", solo_threads=0)
    assert PiperFamily("piper", settings).voice_models["tiny"].solo_graph is None
