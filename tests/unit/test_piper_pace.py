"""Early first windows under load: the decoder's measured pace, the deadline rule, and the
acoustic stage streaming a busy segment's first window only when that meets its deadline."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import make_state, stage_item

from voxflow.config import load_settings
from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.models.piper.model import PiperAcousticStage, PiperFamily
from voxflow.models.piper.pace import DecodePace, EarlyWindow
from voxflow.stages.items import StageBatch
from voxflow.stages.outputs import Next, StreamedParts


def test_pace_moves_toward_each_observation_by_its_weight():
    pace = DecodePace(weight=0.5, start=0.002)
    pace.observe(100, 0.4)  # 0.004 s per frame
    assert pace.seconds_per_frame == pytest.approx(0.003)
    pace.observe(0, 1.0)  # nothing decoded: ignored
    assert pace.seconds(1000) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="weight"):
        DecodePace(weight=0)


def test_early_window_only_where_it_turns_a_miss_into_a_hit():
    pace = DecodePace(start=0.001)  # 250 frames: 0.25 s; first window 32 + 12: 0.044 s
    rule = EarlyWindow(first_frames=32, pad_frames=12)
    assert rule.worth_it(0.1, 250, pace)        # whole misses, the window makes it
    assert not rule.worth_it(0.3, 250, pace)    # whole is on time: no seam
    assert not rule.worth_it(0.02, 250, pace)   # late either way: the cheaper path
    assert not rule.worth_it(-1.0, 250, pace)
    assert not rule.worth_it(0.1, 30, pace)     # no longer than the window itself
    assert not EarlyWindow(0, 12).worth_it(0.1, 250, pace)  # switched off


def test_early_window_safety_takes_the_whole_decode_as_slower_than_its_mean_pace():
    pace = DecodePace(start=0.001)  # 250 frames: 0.25 s predicted, 0.375 s with safety 1.5
    assert not EarlyWindow(32, 12).worth_it(0.3, 250, pace)      # the mean says on time
    assert EarlyWindow(32, 12, safety=1.5).worth_it(0.3, 250, pace)  # too close: stream
    assert not EarlyWindow(32, 12, safety=1.5).worth_it(0.4, 250, pace)


def _family(tiny_voice_dir, **options):
    base = {"include_default_voice": False, "voices_dir": str(tiny_voice_dir),
            "default_voice": "tiny", "first_chunk_frames": 4, "decoder_chunk_frames": 16,
            "solo_threads": 0, "bulk_workers": 0, "hand_on": False, **options}
    settings = load_settings(None, {"engine.warmup": False,
                                    "models": [{"name": "piper", "family": "piper",
                                                "options": base}]})
    return PiperFamily("piper", settings.models[0].options)


IDS = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 12, 0, 20, 0, 31, 0, 2], np.int64)


def _busy_run(family, slack_s: float | None, seed: int | None = None, segment: int = 0,
              streamed: bool = True):
    stage = PiperAcousticStage(family)
    state, _ = make_state(voice="tiny", seed=seed, streamed=streamed)
    item = stage_item(state, segment, PhonemeSegment("x", IDS))
    slack = () if slack_s is None else (slack_s,)
    batch = StageBatch.of([item], key=stage.batch_key(item), slack_s=slack)
    with family.runs.run():  # another worker is mid-run: not alone
        return stage.run(batch)[0], stage.events()["early_first_window"]


def test_a_busy_segment_streams_its_first_window_when_its_deadline_needs_it(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    # 1 s a frame: the whole segment (41 frames) cannot make 20 s, its first window (4 + 12
    # frames of context) can
    family.pace = DecodePace(start=1.0)
    out, early = _busy_run(family, slack_s=20.0)
    assert isinstance(out, StreamedParts) and early == 1
    parts = list(out.produce())
    assert len(parts) == out.count and parts[0].size == 4 * 256  # the small first window leads
    # the same audio as the whole segment decoded in line (the windows' float rounding aside)
    family.pace = DecodePace(start=1e-6)
    whole, _ = _busy_run(family, slack_s=20.0)
    assert isinstance(whole, Next)
    np.testing.assert_allclose(np.concatenate(parts), whole.payload, atol=1e-4)


def test_a_busy_segment_goes_in_line_with_time_to_spare_no_deadline_or_switched_off(
        tiny_voice_dir):
    family = _family(tiny_voice_dir)
    family.pace = DecodePace(start=1e-6)
    out, early = _busy_run(family, slack_s=10.0)  # whole decode well within the deadline
    assert isinstance(out, Next) and early == 0
    family.pace = DecodePace(start=1.0)
    out, early = _busy_run(family, slack_s=None)  # built outside the scheduler: no deadline
    assert isinstance(out, Next) and early == 0
    off = _family(tiny_voice_dir, early_first_window=False)
    off.pace = DecodePace(start=1.0)
    out, early = _busy_run(off, slack_s=10.0)
    assert isinstance(out, Next) and early == 0


def test_a_seeded_continuation_never_streams_early_its_windows_would_change(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    family.pace = DecodePace(start=1.0)
    out, early = _busy_run(family, slack_s=20.0, seed=3, segment=1)
    assert isinstance(out, Next) and early == 0
    out, early = _busy_run(family, slack_s=20.0, seed=3, segment=0)  # same windows either way
    assert isinstance(out, StreamedParts) and early == 1


def test_a_whole_response_never_streams_early_and_a_seeded_one_keeps_its_bytes(tiny_voice_dir,
                                                                               caplog):
    family = _family(tiny_voice_dir)
    family.pace = DecodePace(start=1.0)  # whole decode late, first window on time (above)
    caplog.set_level("DEBUG", logger="voxflow.models.piper.model")
    out, early = _busy_run(family, slack_s=20.0, streamed=False)
    assert isinstance(out, Next) and early == 0  # unseeded whole file: nothing to hurry
    [line] = [r.getMessage() for r in caplog.records]
    assert "segment 0: 41 frames, slack 20.000 s, in line, decoded in" in line
    out, early = _busy_run(family, slack_s=20.0, seed=3, streamed=False)
    assert isinstance(out, Next) and early == 0  # in line, with the windows it would stream
    streamed, early = _busy_run(family, slack_s=20.0, seed=3)
    assert isinstance(streamed, StreamedParts) and early == 1
    assert caplog.records[-1].getMessage().endswith("segment 0: 41 frames, slack 20.000 s, "
                                                    f"early, {streamed.count} windows")
    assert np.concatenate(list(streamed.produce())).tobytes() == out.payload.tobytes()
