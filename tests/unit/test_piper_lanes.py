"""Piper with lanes (scheduler rule 7): under load the acoustic stage only encodes and hands
the decoder its windows; the decoder's fast lane takes a newcomer's first window and windows
about to be late, the bulk lane the rest."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from fakes import make_state, stage_item

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.models.piper.decode import DecodeWindow
from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.models.piper.model import PiperAcousticStage, PiperDecoderStage, PiperFamily
from voxflow.models.piper.pace import DecodePace
from voxflow.stages.items import StageBatch
from voxflow.stages.outputs import Next, Parts

INF = float("inf")

IDS = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 12, 0, 20, 0, 31, 0, 2], np.int64)


def _family(tiny_voice_dir, **options) -> PiperFamily:
    base = {"include_default_voice": False, "voices_dir": str(tiny_voice_dir),
            "default_voice": "tiny", "first_chunk_frames": 4, "decoder_chunk_frames": 64,
            "loaded_first_chunk_frames": 6, "solo_threads": 0, "bulk_workers": 2, **options}
    settings = load_settings(None, {"engine.warmup": False,
                                    "models": [{"name": "piper", "family": "piper",
                                                "options": base}]})
    return PiperFamily("piper", settings.models[0].options)


def _busy_run(family: PiperFamily, slack_s: float, seed: int | None = None, segment: int = 0):
    """The acoustic stage's output for one segment while another run is in progress."""
    stage = PiperAcousticStage(family)
    state, _ = make_state(voice="tiny", seed=seed)
    item = stage_item(state, segment, PhonemeSegment("x", IDS))
    batch = StageBatch.of([item], key=stage.batch_key(item), slack_s=(slack_s,))
    with family.runs.run():  # another worker is mid-run: not alone
        return stage.run(batch)[0]


def _kept(parts: Parts) -> list[int]:
    return [w.keep[1] - w.keep[0] for w in parts.payloads]


def test_under_load_a_first_segment_on_time_starts_with_one_small_window(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    out = _busy_run(family, slack_s=0.5)
    assert isinstance(out, Parts)
    kept = _kept(out)
    assert kept[0] == 6 and len(kept) == 2  # the fast lane's window, then the rest in one
    family.pace = DecodePace(start=1e-6)
    # already late, or a continuation: decoded in line as without lanes (no seam, no hop)
    assert isinstance(_busy_run(family, slack_s=-0.1), Next)
    assert isinstance(_busy_run(family, slack_s=0.5, segment=1), Next)


def test_under_load_a_seeded_segment_keeps_the_windows_it_has_alone(tiny_voice_dir):
    family = _family(tiny_voice_dir)
    loaded = _busy_run(family, slack_s=0.5, seed=3)
    stage = PiperAcousticStage(family)
    state, _ = make_state(voice="tiny", seed=3)
    item = stage_item(state, 0, PhonemeSegment("x", IDS))
    alone = stage.run(StageBatch.of([item], key=stage.batch_key(item)))[0]
    assert isinstance(loaded, Parts) and isinstance(alone, Parts)
    assert _kept(loaded) == _kept(alone) and _kept(alone)[0] == 4  # first_chunk_frames
    for a, b in zip(loaded.payloads, alone.payloads, strict=True):
        assert a.span == b.span and a.keep == b.keep
        np.testing.assert_array_equal(a.values[0], b.values[0])


def test_without_lanes_or_hand_on_a_busy_segment_is_decoded_in_line(tiny_voice_dir):
    family = _family(tiny_voice_dir, bulk_workers=0, hand_on=False)
    family.pace = DecodePace(start=1e-6)  # whole decode well within the deadline
    assert isinstance(_busy_run(family, slack_s=0.5), Next)


def test_a_window_is_urgent_before_first_audio_or_when_its_slack_runs_short(tiny_voice_dir):
    family = _family(tiny_voice_dir, urgent_margin_s=0.1)
    family.pace = DecodePace(start=0.01)  # 10 ms a frame
    stage = PiperDecoderStage(family)
    assert stage.bulk_workers == 2 and stage.bulk_nice == 10
    state, _ = make_state(voice="tiny")
    window = DecodeWindow([np.zeros((1, 2, 40), np.float32)], (0, 30), (0, 20))  # 30 frames
    item = stage_item(state, 0, window)
    assert stage.urgent_in(item, slack_s=5.0, audio_flowing=False) == 0.0  # a newcomer's
    # flowing: urgent once the slack is below 0.3 s of decoding plus the 0.1 s margin
    assert stage.urgent_in(item, slack_s=1.0, audio_flowing=True) == pytest.approx(0.6)
    assert stage.urgent_in(item, slack_s=0.3, audio_flowing=True) < 0
    decoded = stage_item(state, 0, np.zeros(256, np.float32))  # decoded in line: passed on
    assert stage.urgent_in(decoded, slack_s=5.0, audio_flowing=True) == 0.0


def test_an_acoustic_item_is_urgent_while_its_first_audio_can_be_on_time(tiny_voice_dir):
    family = _family(tiny_voice_dir, urgent_margin_s=0.1)
    family.pace = DecodePace(start=0.001)  # a whole 64-frame window: 0.064 s
    stage = PiperAcousticStage(family)
    assert stage.bulk_workers == 2
    state, _ = make_state(voice="tiny")
    item = stage_item(state, 0, PhonemeSegment("x", IDS))
    assert stage.urgent_in(item, slack_s=0.5, audio_flowing=False) == 0.0
    assert stage.urgent_in(item, slack_s=-0.1, audio_flowing=False) == INF  # late: bulk
    # a continuation: urgent once its slack is below a window's decode plus the margin
    assert stage.urgent_in(item, slack_s=1.0, audio_flowing=True) == pytest.approx(0.836)
    assert stage.urgent_in(item, slack_s=0.1, audio_flowing=True) < 0
    assert PiperAcousticStage(_family(tiny_voice_dir, bulk_workers=0)).bulk_workers == 0


def test_with_lanes_concurrent_seeded_requests_give_their_bytes_alone(tiny_voice_dir):
    options = {"include_default_voice": False, "voices_dir": str(tiny_voice_dir),
               "default_voice": "tiny", "first_chunk_frames": 4, "decoder_chunk_frames": 16,
               "loaded_first_chunk_frames": 6, "solo_threads": 0, "bulk_workers": 2}
    settings = load_settings(None, {"engine.warmup": False,
                                    "models": [{"name": "piper", "family": "piper",
                                                "options": options}]})
    texts = [f"Sentence number {i} is here. And one more after it." for i in range(6)]

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            threads = [t.name for t in threading.enumerate()]
            assert sum("piper-decoder-bulk" in n for n in threads) == 2
            assert sum("piper-acoustic-bulk" in n for n in threads) == 2

            async def speak(i: int):
                chunks = await engine.submit(SpeechRequest("piper", texts[i], "tiny",
                                                           seed=i)).collect()
                return np.concatenate([c.samples for c in chunks])

            alone = [await speak(i) for i in range(6)]
            together = await asyncio.gather(*(speak(i) for i in range(6)))
            return alone, together
        finally:
            engine.stop()

    alone, together = asyncio.run(main())
    for a, b in zip(alone, together, strict=True):
        assert a.size > 0 and a.tobytes() == b.tobytes()
