"""Piper's whole-graph path (`whole_alone`): a segment of a whole (non-streamed) response that
runs alone goes through the voice's packaged graph in one session; streamed, seeded, timed or
stretched segments, a run beside another, and a run the memory gate has no room for keep the
split graph. And a whole response's first sentence is not cut short for first audio."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import make_state, run_stage, stage_item

from voxflow.memory_gate import WorkingSetGate
from voxflow.models.piper import model as piper_model
from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.models.piper.model import PiperAcousticStage, PiperFamily
from voxflow.models.piper.settings import PiperSettings
from voxflow.models.piper.whole import WholeGraph, whole_piper_graph

IDS = np.asarray([1, 0, 20, 0, 31, 0, 2], np.int64)


@pytest.fixture
def family(tiny_voice_dir):
    settings = PiperSettings(include_default_voice=False, voices_dir=tiny_voice_dir,
                             default_voice="tiny", solo_threads=2)
    return PiperFamily("piper", settings)


def _run(family, seed=None, streamed=False, segment=0, speed=1.0):
    state, _ = make_state(voice="tiny", seed=seed, streamed=streamed, speed=speed)
    stage = PiperAcousticStage(family)
    [out] = run_stage(stage, [stage_item(state, segment, PhonemeSegment("x", IDS))])
    return out, stage.events()["whole_alone"]


def test_a_lone_segment_of_a_whole_response_runs_the_packaged_graph(family):
    voice = family.voice_models["tiny"]
    assert isinstance(voice.whole, WholeGraph)
    audio, whole = _run(family)
    assert whole == 1
    # the packaged graph's audio, cut to its durations: whole frames of the voice's hop
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size > 0 and audio.size % voice.config.hop_length == 0
    _, durations = voice.whole.synthesize(IDS, voice.config.length_scale)
    assert durations.shape == (IDS.size,)


@pytest.mark.parametrize("case", [
    {"streamed": True},              # a stream's segments keep their windows
    {"streamed": True, "segment": 1},
    {"seed": 3},                     # seeded bytes come from the split graph's noise
])
def test_streamed_and_seeded_segments_keep_the_split_graph(family, case):
    out, whole = _run(family, **case)
    assert whole == 0
    assert isinstance(out, list) and out  # decoder windows for the decoder stage


def test_a_segment_beside_another_run_keeps_the_split_graph(family):
    with family.runs.run():  # another worker is mid-run
        _, whole = _run(family)
    assert whole == 0


def test_no_room_in_the_memory_gate_keeps_the_split_graph(family, monkeypatch):
    gate = WorkingSetGate(1 << 20)  # 1 MiB: a whole decode does not fit
    monkeypatch.setattr(piper_model, "GATE", gate)
    with gate.hold(1000):
        _, whole = _run(family)
    assert whole == 0
    gate = WorkingSetGate(1 << 30)
    monkeypatch.setattr(piper_model, "GATE", gate)
    with gate.hold(1000):
        _, whole = _run(family)
        assert gate.reserved > 1000  # raised to the whole segment's predicted decode
    assert whole == 1


def test_whole_alone_off_or_no_solo_threads_loads_no_packaged_session(tiny_voice_dir):
    for options in ({"whole_alone": False}, {"solo_threads": 0}):
        settings = PiperSettings(include_default_voice=False, voices_dir=tiny_voice_dir,
                                 default_voice="tiny", **options)
        assert PiperFamily("piper", settings).voice_models["tiny"].whole is None


def test_a_graph_without_one_ceil_node_is_refused(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ValueError, match="expected one Ceil node"):
        whole_piper_graph(path)


OFFICE = ("Our office hours are Monday through Friday, from nine in the morning until five "
          "thirty in the evening. See you then.")


@pytest.mark.parametrize("streamed, seed, segments", [
    (True, None, 3),    # first sentence cut at its clause for first audio (first_clause_chars)
    (False, None, 2),   # a whole response has no first audio to hurry: sentences whole
    (False, 5, 3),      # seeded: the streamed cut, so streamed or not gives the same bytes
])
def test_only_a_streamed_or_seeded_request_cuts_its_first_sentence_short(
        family, streamed, seed, segments):
    from voxflow.engine.request import RequestState, SpeechRequest
    from voxflow.models.piper.model import PiperFrontendStage
    from voxflow.stages.items import StageItem
    from voxflow.text.document import parse_input

    request = SpeechRequest("piper", OFFICE, "tiny", seed=seed, streamed=streamed)
    state = RequestState(request, seed or 0, 22050, lambda chunk, error: None)
    assert state.info.hurries == (segments == 3)  # the streamed shape: streamed or seeded
    [plan] = PiperFrontendStage(family).run([StageItem(state.info, -1, parse_input(OFFICE))])
    assert [s.text for s in plan.payloads][-1] == "See you then."
    assert len(plan.payloads) == segments


def test_the_packaged_session_uses_the_split_graphs_weights_where_they_are_equal(family):
    voice = family.voice_models["tiny"]
    split = voice.graph.source
    theirs = {id(a) for part in (split.encoder, split.flow, split.decoder)
              for a in part.weights.arrays.values()}
    mine = voice.whole.session.weights.arrays
    shared = [name for name, a in mine.items() if id(a) in theirs]
    assert shared  # the text encoder's weights at least: one copy in the process
    assert all(n in split.encoder.weights.arrays or n in split.flow.weights.arrays
               or n in split.decoder.weights.arrays for n in shared)
