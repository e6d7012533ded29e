"""Each family's clean native speed range: the settings that declare it, Piper batching by the
native speed (each row stretched by its own rest) on the tiny generated voice, and Kokoro's
kept silence following the speed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fakes import make_state, run_stage, stage_item
from pydantic import ValidationError

from voxflow.models.kokoro.settings import KokoroSettings
from voxflow.models.kokoro.synth import trim_silence
from voxflow.models.piper.frontend import PhonemeSegment
from voxflow.models.piper.model import PiperAcousticStage, PiperDecoderStage, PiperFamily
from voxflow.models.piper.settings import PiperSettings
from voxflow.models.piper.synth import synthesize_batch
from voxflow.stages.items import StageItem

IDS = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 12, 0, 2], np.int64)


@pytest.fixture
def family(tiny_voice_dir) -> PiperFamily:
    settings = PiperSettings(
        include_default_voice=False, voices_dir=tiny_voice_dir, default_voice="tiny",
        max_batch_size=4, native_speed_min=0.5, native_speed_max=2.0,
    )
    return PiperFamily("piper", settings)


def _item(speed: float, seed: int = 5) -> StageItem:
    state, _ = make_state(voice="tiny", seed=seed, speed=speed)
    return stage_item(state, 0, PhonemeSegment("x", IDS))


def _audio(family: PiperFamily, items: list[StageItem]) -> list[np.ndarray]:
    """Each item's samples: the acoustic stage's `Audio`, or its decoder windows decoded."""
    decoder = PiperDecoderStage(family)
    out = []
    for item, result in zip(items, run_stage(PiperAcousticStage(family), items), strict=True):
        if isinstance(result, list):  # Parts: decoder windows
            result = np.concatenate([run_stage(decoder, [dataclasses.replace(item, payload=w)])[0]
                                     for w in result])
        out.append(result)
    return out


@pytest.mark.parametrize("settings_class", [PiperSettings, KokoroSettings])
@pytest.mark.parametrize(("field", "value"), [
    ("native_speed_min", 1.2), ("native_speed_min", 0.2),
    ("native_speed_max", 0.9), ("native_speed_max", 4.5),
])
def test_a_native_range_that_leaves_out_speed_one_or_the_api_range_is_refused(
    settings_class, field, value
):
    with pytest.raises(ValidationError, match=field):
        settings_class(**{field: value})


def test_speeds_beyond_the_native_range_batch_together_at_its_end(family):
    stage = PiperAcousticStage(family)
    keys = {speed: stage.batch_key(_item(speed)) for speed in (0.25, 0.4, 0.5, 1.0, 3.0, 4.0)}
    assert keys[3.0] == keys[4.0] == ("tiny", 2.0)
    assert keys[0.25] == keys[0.4] == keys[0.5] == ("tiny", 0.5)
    assert keys[1.0] == ("tiny", 1.0)


def test_each_row_of_a_batch_at_native_two_is_stretched_by_its_own_rest(family):
    [native] = _audio(family, [_item(2.0)])
    fast3, fast4 = _audio(family, [_item(3.0), _item(4.0)])
    assert fast3.size == round(native.size / 1.5)
    assert fast4.size == round(native.size / 2.0)
    [slow] = _audio(family, [_item(0.25)])
    [half] = _audio(family, [_item(0.5)])
    assert slow.size == round(half.size / 0.5)


def test_speeds_inside_the_native_range_are_the_graphs_own_length_scale(family):
    voice = family.voice_models["tiny"]
    for speed in (0.5, 0.8, 2.0):
        [audio] = _audio(family, [_item(speed)])
        [graph] = synthesize_batch(voice.graph, voice.config, [IDS], [(5, 0)], speed, 12.0)
        assert np.array_equal(audio, graph)  # nothing stretched


def test_kokoro_silence_kept_around_speech_follows_the_speed():
    rate = 24000
    t = np.arange(rate) / rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    pad = np.full(rate, 1e-6, np.float32)  # Kokoro's padding is around -110 dB
    audio = np.concatenate([pad, tone, pad])
    for speed, expected_s in [(1.0, 0.05 + 1.0 + 0.25), (2.0, 0.025 + 1.0 + 0.125),
                              (0.5, 0.1 + 1.0 + 0.5)]:
        out = trim_silence(audio, rate, pause_s=0.25, speed=speed)
        assert out.size / rate == pytest.approx(expected_s, abs=0.011)
