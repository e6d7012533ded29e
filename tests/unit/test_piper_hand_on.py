"""Piper under load with `hand_on`, without lanes (`PiperAcousticStage._hand_on`): the
acoustic stage keeps only a first segment's first audio and hands the rest of the decoding to
the decoder stage, so its workers stay free for newcomers' first segments."""

from __future__ import annotations

import numpy as np
from fakes import make_state, stage_item

from voxflow.config import load_settings
from voxflow.models.piper.decode import DecodeWindow, decode_window
from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.models.piper.model import PiperAcousticStage, PiperFamily
from voxflow.models.piper.pace import DecodePace
from voxflow.stages.items import StageBatch
from voxflow.stages.outputs import Next, Parts, StreamedParts

IDS = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 12, 0, 20, 0, 31, 0, 2], np.int64)  # 41 frames
HOP = 256


def _family(tiny_voice_dir, **options) -> PiperFamily:
    base = {"include_default_voice": False, "voices_dir": str(tiny_voice_dir),
            "default_voice": "tiny", "first_chunk_frames": 4, "decoder_chunk_frames": 64,
            "loaded_first_chunk_frames": 16, "solo_threads": 0, "hand_on": True, **options}
    settings = load_settings(None, {"engine.warmup": False,
                                    "models": [{"name": "piper", "family": "piper",
                                                "options": base}]})
    family = PiperFamily("piper", settings.models[0].options)
    family.pace = DecodePace(start=1e-6)  # decoding is fast: nothing needs early windows
    return family


def _busy_run(family: PiperFamily, slack_s: float = 0.9, segment: int = 0,
              seed: int | None = None, streamed: bool = True):
    """The acoustic stage's output for one segment while another run is in progress."""
    stage = PiperAcousticStage(family)
    state, _ = make_state(voice="tiny", seed=seed, streamed=streamed)
    item = stage_item(state, segment, PhonemeSegment("x", IDS))
    batch = StageBatch.of([item], key=stage.batch_key(item), slack_s=(slack_s,))
    with family.runs.run():  # another worker is mid-run: not alone
        return stage.run(batch)[0]


def _kept(windows) -> list[int]:
    return [w.keep[1] - w.keep[0] for w in windows]


def _decode(family: PiperFamily, window: DecodeWindow) -> np.ndarray:
    graph = family.voice_models["tiny"].graph
    return np.clip(decode_window(graph.frames, window, HOP), -1.0, 1.0)


def test_a_first_segment_decodes_its_head_here_and_hands_on_the_rest(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    out = _busy_run(family)
    assert isinstance(out, Parts)
    head, *rest = out.payloads
    assert isinstance(head, np.ndarray) and head.shape == (16 * HOP,)  # its first audio
    assert all(isinstance(w, DecodeWindow) for w in rest) and _kept(rest) == [25]
    # the same samples as the whole segment decoded in line (a head of 64 frames: all of it)
    whole = _busy_run(_family(tiny_voice_dir, loaded_first_chunk_frames=64))
    assert isinstance(whole, Next) and whole.payload.shape == (41 * HOP,)
    joined = np.concatenate([head, *(_decode(family, w) for w in rest)])
    np.testing.assert_allclose(joined, whole.payload, atol=1e-4)


def test_later_segments_and_whole_responses_hand_on_all_their_windows(tiny_voice_dir):
    family = _family(tiny_voice_dir, decoder_chunk_frames=16)
    for out in (_busy_run(family, slack_s=5.0, segment=1), _busy_run(family, streamed=False)):
        assert isinstance(out, Parts)
        assert all(isinstance(w, DecodeWindow) for w in out.payloads)
        kept = _kept(out.payloads)  # the fewest windows of at most 16 frames: no seam added
        assert len(kept) == -(-sum(kept) // 16) == 3 and max(kept) - min(kept) <= 1


def test_a_continuation_due_soon_is_decoded_here(tiny_voice_dir):
    family = _family(tiny_voice_dir, decoder_chunk_frames=16)

    def run(**kwargs):
        family.pace = DecodePace(start=0.01)  # 15 ids predict 37 frames: 0.37 s in line
        return _busy_run(family, **kwargs)

    # a continuation whose in-line decode would leave less than urgent_margin_s (1 s) of its
    # slack: decoded here now, whole; with more, handed on
    soon = run(slack_s=1.3, segment=1)
    assert isinstance(soon, Next) and soon.payload.size > 16 * HOP  # beyond a head: all
    assert isinstance(run(slack_s=1.5, segment=1), Parts)
    # a first segment, even late, keeps only its head here; a whole response is sent at its
    # end: handed on whatever their slack
    late = run(slack_s=-0.1)
    assert isinstance(late, Parts) and late.payloads[0].shape == (16 * HOP,)
    assert isinstance(run(slack_s=-0.1, streamed=False), Parts)


def test_a_head_that_would_be_late_streams_small_windows_then_hands_on(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    family.pace = DecodePace(start=0.01)  # head 16 + 12 frames x 1.5: 0.42 s; window 4: 0.16 s
    out = _busy_run(family, slack_s=0.3)
    assert isinstance(out, StreamedParts) and out.count == 3
    parts = list(out.produce())
    # windows of 4 and 10 frames (growth 2.5) decoded here, one by one; the rest handed on
    assert [p.shape for p in parts[:2]] == [(4 * HOP,), (10 * HOP,)]
    assert isinstance(parts[2], DecodeWindow) and _kept(parts[2:]) == [27]
    assert family.pace.early_windows == 1


def test_seeded_segments_are_decoded_in_line_as_before(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    # a seeded request's windows must not depend on the load: no head, nothing handed on
    assert isinstance(_busy_run(family, seed=3, segment=1), Next)
    out = _busy_run(family, seed=3, segment=0)
    assert isinstance(out, Next) and out.payload.shape == (41 * HOP,)


def test_with_lanes_or_hand_on_off_nothing_is_handed_on_this_way(tiny_voice_dir):
    family = _family(tiny_voice_dir, bulk_workers=2)
    assert isinstance(_busy_run(family, slack_s=-0.1), Next)  # late: in line, as with lanes
    for family in (_family(tiny_voice_dir, hand_on=False),
                   _family(tiny_voice_dir, hand_on=False, loaded_first_chunk_frames=200)):
        assert isinstance(_busy_run(family), Next)  # in line, whole
        assert isinstance(_busy_run(family, segment=1), Next)
