"""A Piper segment streams out in decoder windows (`Parts` -> the decoder stage), through the
real engine on the tiny generated voice: the first chunk is the small first window, every part
is in order, and the whole is the same audio as the acoustic run decoding everything itself."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import SpeechRequest
from voxflow.models.piper.frontend import text_to_segments
from voxflow.models.piper.model import PiperAcousticStage, PiperFamily
from voxflow.models.piper.synth import synthesize_batch

HOP = 256
TEXT = "Short words stream. A second sentence follows it."


def _settings(tiny_voice_dir, **options):
    base = {"include_default_voice": False, "voices_dir": str(tiny_voice_dir),
            "default_voice": "tiny", "first_chunk_frames": 4, "decoder_chunk_frames": 16,
            "solo_threads": 0, "bulk_workers": 0, **options}
    return load_settings(None, {"engine.warmup": False,
                                "models": [{"name": "piper", "family": "piper",
                                            "options": base}]})


def _speak(settings, seed: int | None = 11):
    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            request = SpeechRequest("piper", TEXT, "tiny", seed=seed)
            return await engine.submit(request).collect()
        finally:
            engine.stop()

    return asyncio.run(main())


def test_the_first_chunk_is_the_first_window_and_the_parts_make_the_whole(tiny_voice_dir):
    settings = _settings(tiny_voice_dir)
    family = PiperFamily("piper", settings.models[0].options)
    assert [s.name for s in family.stages()] == ["frontend", "acoustic", "decoder"]
    chunks = _speak(settings)
    sizes = [c.samples.size for c in chunks]
    assert sizes[0] == 4 * HOP  # audio starts after the encoder and a 4-frame window
    assert len(chunks) > 3 and chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
    voice = family.voice_models["tiny"]
    segments = text_to_segments(voice.config, TEXT, 300, 120, 400)
    whole = [synthesize_batch(voice.graph, voice.config, [s.phoneme_ids], [(11, i)], 1.0, 12.0)[0]
             for i, s in enumerate(segments)]
    streamed = np.concatenate([c.samples for c in chunks])
    np.testing.assert_array_equal(streamed[: whole[0].size], whole[0])
    np.testing.assert_array_equal(streamed[streamed.size - whole[1].size:], whole[1])


def test_windows_of_one_request_give_the_same_bytes_every_run(tiny_voice_dir):
    settings = _settings(tiny_voice_dir)
    a, b = (np.concatenate([c.samples for c in _speak(settings)]) for _ in range(2))
    assert a.tobytes() == b.tobytes()


def test_only_the_first_segment_gets_the_small_first_window(tiny_voice_dir):
    settings = _settings(tiny_voice_dir)
    family = PiperFamily("piper", settings.models[0].options)
    stage = PiperAcousticStage(family)
    plan = stage._plan
    assert plan.windows(40, first=True)[0][1:3] == (0, 4)
    assert plan.windows(40)[0][1:3] == (0, 14)  # 40 frames in 3 equal windows of <= 16


def test_under_load_a_segment_is_decoded_in_line_with_the_same_bytes_when_seeded(tiny_voice_dir):
    from fakes import make_state, run_stage, stage_item

    from voxflow.models.piper.frontend import PhonemeSegment
    from voxflow.models.piper.model import PiperDecoderStage

    settings = _settings(tiny_voice_dir)
    family = PiperFamily("piper", settings.models[0].options)
    stage = PiperAcousticStage(family)
    ids = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 12, 0, 2], np.int64)

    def result(seed: int | None, busy: bool):
        state, _ = make_state(voice="tiny", seed=seed)
        item = stage_item(state, 0, PhonemeSegment("x", ids))
        if busy:
            with family.runs.run():  # another worker is mid-run
                return item, run_stage(stage, [item])[0]
        return item, run_stage(stage, [item])[0]

    item, windows = result(5, busy=False)
    assert isinstance(windows, list) and windows[0].keep[1] - windows[0].keep[0] == 4
    decoder = PiperDecoderStage(family)
    parts = np.concatenate([run_stage(decoder, [dataclasses.replace(item, payload=w)])[0]
                            for w in windows])
    _, whole = result(5, busy=True)  # the same windows, decoded in line: one part
    assert isinstance(whole, np.ndarray) and whole.tobytes() == parts.tobytes()
    _, unseeded = result(None, busy=True)
    assert isinstance(unseeded, np.ndarray) and unseeded.size > 0


def test_a_long_request_whose_segments_go_in_line_and_as_parts_completes(tiny_voice_dir):
    # Two acoustic workers: a segment encoded beside another run is decoded in line and
    # passed through the in_order decoder stage, one encoded alone goes as windows; the stage
    # must see every segment or the next waits forever (a hang first seen in `voxflow speak`).
    settings = _settings(tiny_voice_dir, workers=2)
    text = " ".join(f"Sentence number {n} is here." for n in range(12))

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            stream = engine.submit(SpeechRequest("piper", text, "tiny"))
            return await asyncio.wait_for(stream.collect(), timeout=60)
        finally:
            engine.stop()

    for _ in range(3):
        chunks = asyncio.run(main())
        assert chunks[-1].is_last and sum(c.is_last for c in chunks) == 1
        assert {c.index for c in chunks} >= set(range(12))


def test_a_whole_unseeded_response_alone_gets_the_fewest_windows_no_small_first(tiny_voice_dir):
    from fakes import make_state, run_stage, stage_item

    from voxflow.models.piper.frontend import PhonemeSegment

    settings = _settings(tiny_voice_dir)
    family = PiperFamily("piper", settings.models[0].options)
    stage = PiperAcousticStage(family)
    ids = np.asarray([1, 0, 20, 0, 31, 0, 7, 0, 12, 0, 2], np.int64)

    def kept(streamed: bool, seed: int | None) -> list[int]:
        state, _ = make_state(voice="tiny", seed=seed, streamed=streamed)
        windows = run_stage(stage, [stage_item(state, 0, PhonemeSegment("x", ids))])[0]
        return [w.keep[1] - w.keep[0] for w in windows]

    streamed, whole, seeded_whole = kept(True, None), kept(False, None), kept(False, 5)
    assert streamed[0] == 4 and sum(streamed) == sum(whole)
    frames = sum(whole)
    assert whole == [e - s for _, s, e, _ in stage._plan.windows(frames)]  # no small first
    assert len(whole) < len(streamed) and all(k > 4 for k in whole)
    assert seeded_whole == kept(True, 5)  # a seeded request's windows never depend on it
