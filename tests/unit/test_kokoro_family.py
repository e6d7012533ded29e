"""The Kokoro family's stages on the real int8 model (no server), and the engine's check of a
request's `language` against what the voice speaks."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
from fakes import register_fake_family, run_stage, stage_item

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import RequestState, SpeechRequest
from voxflow.errors import InvalidRequestError
from voxflow.models.kokoro.frontend import TokenSegment
from voxflow.models.kokoro.model import KokoroFamily
from voxflow.models.kokoro.pace import RunPace
from voxflow.models.kokoro.settings import KokoroSettings
from voxflow.models.kokoro.synth import run_graph
from voxflow.stages.items import StageBatch
from voxflow.stages.outputs import Audio, Continued
from voxflow.text.document import parse_plain


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> KokoroFamily:
    cache = tmp_path_factory.mktemp("kokoro_cache")
    return KokoroFamily("kokoro", KokoroSettings(cache_dir=cache, workers=3))


def item(text_or_segment, voice="jf_alpha", speed=1.0, seed=None, language=None, index=-1,
         streamed=True):
    request = SpeechRequest("kokoro", "x", voice, speed=speed, seed=seed, language=language,
                            streamed=streamed)
    state = RequestState(request, seed or 0, 24000, lambda chunk, error: None)
    if isinstance(text_or_segment, str):
        text_or_segment = parse_plain(text_or_segment)
    return stage_item(state, index, text_or_segment)


def test_voices_languages_and_stage_limits(family):
    assert family.default_voice == "jf_alpha"
    assert {v.language for v in family.voices.values()} == {"ja"}
    assert {v.sample_rate for v in family.voices.values()} == {24000}
    assert family.languages("jm_kumo") == ("ja", "en-us", "en-gb")
    frontend, acoustic = family.stages()
    assert frontend.fans_out and frontend.max_batch_size == 1
    # The exported graph has a fixed batch of one: no batching, parallel workers instead.
    assert acoustic.max_batch_size == 1 and acoustic.workers == 3
    assert family.describe()["sha256"].startswith("6e742170d309")


def test_a_default_voice_that_does_not_exist_fails_at_load(tmp_path):
    with pytest.raises(ValueError, match="default_voice 'af_heart'"):
        KokoroFamily("kokoro", KokoroSettings(cache_dir=tmp_path, default_voice="af_heart"))


def test_frontend_fans_out_by_the_request_language(family):
    frontend, _ = family.stages()
    [english] = run_stage(frontend, [item("Good morning. How are you?")])
    assert [s.language for s in english] == ["en-us", "en-us"]
    [japanese] = run_stage(frontend, [item("おはようございます。元気ですか？")])
    assert [s.language for s in japanese] == ["ja", "ja"]
    [forced] = run_stage(frontend, [item("Good morning.", language="en-GB")])
    assert forced[0].language == "en-gb"
    [nothing] = run_stage(frontend, [item("🙂 ...")])
    assert nothing == []  # nothing speakable: no segment, the request is a short silence


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I love 寿司 for dinner.", "en-us"),  # any kanji made it Japanese: garbled
        ("We went to Tokyo and ate ラーメン every single day of the trip.", "en-us"),
        ("今日はAppleの発表会です。", "ja"),
        ("Hello there.", "en-us"),
        ("今日は晴れ。", "ja"),
    ],
)
def test_language_is_the_majority_of_letters_among_the_voices_languages(family, text, expected):
    assert family.resolve_language("jm_kumo", None, text) == expected
    assert family.resolve_language("jm_kumo", "en-GB", text) == "en-gb"


def test_latin_words_inside_japanese_are_kept_and_nothing_inside_english():
    assert KokoroFamily.kept_scripts(None, "jm_kumo", "ja") == {"Latn"}
    assert KokoroFamily.kept_scripts(None, "jm_kumo", "en-us") == frozenset()


def test_frontend_reads_the_language_decided_at_validation(family):
    frontend, _ = family.stages()
    document = replace(parse_plain("東京 and 大阪"), language="ja")
    [segments] = run_stage(frontend, [item(document)])
    assert [s.language for s in segments] == ["ja"]
    [segments] = run_stage(frontend, [item(replace(document, language="en-us"))])
    assert [s.language for s in segments] == ["en-us"]


def test_acoustic_output_is_deterministic_whatever_the_seed(family):
    frontend, acoustic = family.stages()
    [[segment]] = run_stage(frontend, [item("Hello there.")])
    assert isinstance(segment, TokenSegment)
    a = run_stage(acoustic, [item(segment, seed=1, index=0)])[0]
    b = run_stage(acoustic, [item(segment, seed=2, index=0)])[0]
    assert a.dtype == np.float32 and a.ndim == 1
    assert np.array_equal(a, b)  # no random ops in the graph: the seed changes nothing
    assert 0.4 < a.size / 24000 < 2.0
    # Trimmed: a slice of the graph's output without most of its padding silence.
    rendered = run_graph(family.graph.session, segment.token_ids,
                         family.voice_models["jf_alpha"].table, 1.0)
    raw = rendered.audio
    # durations: frames per token, the two pads included, 600 samples each
    assert rendered.durations.shape == (segment.token_ids.size + 2,)
    assert rendered.durations.sum() * 600 == raw.size
    start = int(np.flatnonzero(raw == a[0])[0])
    assert np.array_equal(raw[start : start + a.size], np.clip(a, -1, 1))
    assert start / 24000 > 0.15 and (raw.size - a.size) / 24000 > 0.3
    loud = np.flatnonzero(np.abs(a) > 0.01)
    assert loud[0] / 24000 < 0.1


def test_speed_two_is_native_then_stretched_to_half_the_duration(family):
    # 2.0 is past the clean native range (0.6-1.1): rendered at 1.1, then stretched by 2 / 1.1.
    frontend, acoustic = family.stages()
    [[segment]] = run_stage(frontend, [item("Good morning to you all.")])
    normal = run_stage(acoustic, [item(segment, index=0)])[0]
    fast = run_stage(acoustic, [item(segment, speed=2.0, index=0)])[0]
    assert 0.45 < fast.size / normal.size < 0.55


LONG = ("The little red kite circled twice above the harbor, then it settled on the mast of "
        "a fishing boat where the gulls watched it.")


def _acoustic_run(acoustic, stage_item, slack_s: float):
    [out] = acoustic.run(StageBatch.of([stage_item], key=None, slack_s=(slack_s,)))
    return out


def test_a_segment_late_whole_is_cut_where_its_head_ends_in_time(family, monkeypatch):
    monkeypatch.setattr(family, "pace", RunPace(start=0.02))  # this host's speed aside
    _, acoustic = family.stages()
    [segment] = family.frontend.segments(LONG, "en-us", 300, None)
    tokens = segment.token_ids.size
    assert tokens > 80
    before = acoustic.events()["deadline_cut"]
    # 1 s to first audio: a head of at most (0.95 / 1.25) / 0.02 - 13 = 25 tokens
    out = _acoustic_run(acoustic, item(segment, index=0), 1.0)
    assert isinstance(out, Continued)
    rest = out.rest
    head_tokens = tokens - rest.token_ids.size - 1  # one space dropped at the cut
    assert 12 <= head_tokens <= 25
    assert segment.phonemes == f"{segment.phonemes[:head_tokens]} {rest.phonemes}"
    assert rest.offset_s == out.audio.samples.size / 24000
    assert 0.5 < rest.offset_s < 2.5  # a few words and a comma's pause
    assert acoustic.events()["deadline_cut"] == before + 1
    # the rest with the audio just sent to play (1 s and more): a longer head, or all of it
    again = _acoustic_run(acoustic, item(rest, index=0), rest.offset_s)
    if isinstance(again, Continued):
        assert again.rest.token_ids.size < rest.token_ids.size - head_tokens


@pytest.mark.parametrize(("seed", "slack_s", "streamed"), [
    (None, 60.0, True), (None, 0.3, True), (7, 1.0, True), (None, 1.0, False)])
def test_no_cut_on_time_late_anyway_seeded_or_whole(family, monkeypatch, seed, slack_s,
                                                    streamed):
    monkeypatch.setattr(family, "pace", RunPace(start=0.02))
    rendered = []

    def first_tokens_only(session, token_ids, table, speed):
        # records what the stage asked for, renders a few tokens of it (each case would
        # otherwise render a 5 s sentence: the cut test above renders real pieces)
        rendered.append(token_ids.size)
        return run_graph(session, token_ids[:4], table, speed)

    monkeypatch.setattr("voxflow.models.kokoro.model.run_graph", first_tokens_only)
    _, acoustic = family.stages()
    [segment] = family.frontend.segments(LONG, "en-us", 300, None)
    before = acoustic.events()["deadline_cut"]
    out = _acoustic_run(acoustic, item(segment, seed=seed, index=0, streamed=streamed),
                        slack_s)
    assert isinstance(out, Audio)
    assert rendered == [segment.token_ids.size]  # the whole sentence, in one run
    assert acoustic.events()["deadline_cut"] == before


def test_engine_refuses_a_language_the_voice_does_not_speak(monkeypatch):
    register_fake_family(monkeypatch)
    settings = load_settings(None, {
        "engine.warmup": False,
        "models": [{"name": "fake", "family": "fake", "options": {}}],
    })

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            voice = engine.family("fake").default_voice  # an en-US voice
            for ok in ("en", "en-US", "EN_us"):
                engine.validate(SpeechRequest("fake", "hi", voice, language=ok))
            with pytest.raises(InvalidRequestError) as err:
                engine.validate(SpeechRequest("fake", "hi", voice, language="ja"))
            assert err.value.param == "language" and err.value.code == "unsupported_language"
            assert "it speaks: en-US" in err.value.message
        finally:
            engine.stop()

    asyncio.run(main())
