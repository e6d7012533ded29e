"""A parsed input through the front end and the engine: pauses become silence in the audio,
prosody rates become per-segment speeds, and a bad pause is a 400 before anything is queued."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from fakes import SAMPLES_PER_CHAR, FakeFrontend, fake_audio, register_fake_family

from voxflow.config import load_settings
from voxflow.engine.engine import Engine
from voxflow.engine.request import RequestState, SpeechRequest
from voxflow.errors import InvalidRequestError
from voxflow.models.base import UNSPEAKABLE_SILENCE_S
from voxflow.stages.items import StageItem
from voxflow.text.document import SpeechDocument, TextRun, parse_input, parse_plain

RATE = 8000  # the fake family's sample rate


def test_plain_text_is_one_run_without_pauses():
    doc = parse_input("Hello there. How are you?")
    assert doc == SpeechDocument((TextRun("Hello there. How are you?"),))
    assert doc.text == "Hello there. How are you?"


def test_pause_markers_split_runs_and_a_leading_one_is_lead_silence():
    doc = parse_plain("[pause:1s] Welcome back. [PAUSE: 250ms]Next [pause:1.5 s]")
    assert doc.lead_silence_s == 1.0
    assert doc.runs == (
        TextRun(" Welcome back. ", break_after_s=0.25),
        TextRun("Next ", break_after_s=1.5),
    )


def test_a_pause_longer_than_ten_seconds_is_refused():
    with pytest.raises(InvalidRequestError, match=r"longer than 10 s") as err:
        parse_plain("Wait [pause:11s] now.")
    assert err.value.param == "input" and err.value.code == "invalid_pause"


@pytest.mark.parametrize("marker", ["[pause:-1s]", "[pause:1min]", "[pause:1e3ms]", "[pause]",
                                    "[PAUSE 2s]", "[pause:1s"])
def test_text_that_starts_like_a_pause_marker_but_is_not_one_is_refused(marker):
    with pytest.raises(InvalidRequestError, match="is not a pause marker") as err:
        parse_input(f"Text {marker} more text.")
    assert err.value.code == "invalid_pause" and marker in err.value.message


def test_pause_markers_inside_ssml_point_to_break():
    with pytest.raises(InvalidRequestError, match=r"use <break") as err:
        parse_input("<speak>ssml [pause:1s] marker</speak>")
    assert err.value.code == "invalid_ssml"


def _item(document: SpeechDocument, speed: float = 1.0) -> StageItem:
    request = SpeechRequest("fake", "x", "alice", speed=speed)
    state = RequestState(request, 0, RATE, lambda chunk, error: None)
    return StageItem(state.info, -1, document, speed=speed)


def test_front_end_records_speeds_and_pauses_per_segment():
    document = SpeechDocument(
        (
            TextRun("a|b", break_after_s=0.5),
            TextRun("c", rate=2.0),
            TextRun("   ", break_after_s=0.25),  # nothing to say: its pause joins segment 2's
            TextRun("d|e", rate=0.5, break_after_s=1.0),
        ),
        lead_silence_s=0.1,
    )
    [plan] = FakeFrontend().run([_item(document, speed=1.5)])
    assert plan.payloads == ["a", "b", "c", "d", "e"]
    assert plan.speeds == {2: 3.0, 3: 0.75, 4: 0.75}  # the others run at the request's 1.5
    assert plan.pauses_after == {1: 0.5, 2: 0.25, 4: 1.0}
    assert plan.lead_silence_s == 0.1


def test_pauses_before_any_speech_add_to_the_lead_silence():
    document = SpeechDocument((TextRun("", break_after_s=0.5), TextRun("a")), lead_silence_s=0.25)
    [plan] = FakeFrontend().run([_item(document)])
    assert plan.lead_silence_s == 0.75 and plan.pauses_after == {}


def test_a_document_with_only_pauses_is_their_silence():
    doc = SpeechDocument((TextRun("", break_after_s=1.0),), ssml=True)
    [plan] = FakeFrontend().run([_item(doc)])
    assert plan.payloads == [] and plan.lead_silence_s == 1.0


def test_a_document_with_nothing_speakable_is_a_short_silence():
    doc = SpeechDocument((TextRun(""),))  # what parsing leaves of "." or "🙂"
    [plan] = FakeFrontend().run([_item(doc)])
    assert plan.payloads == [] and plan.lead_silence_s == UNSPEAKABLE_SILENCE_S == 0.2


def _engine(monkeypatch) -> Engine:
    register_fake_family(monkeypatch)
    overrides = {
        "engine.warmup": False,
        "models": [{"name": "fake", "family": "fake", "options": {}}],
    }
    return Engine(load_settings(None, overrides))


def test_pauses_are_exact_runs_of_zeros_in_the_audio(monkeypatch):
    engine = _engine(monkeypatch)

    async def main():
        await engine.start()
        try:
            request = SpeechRequest("fake", "[pause:0.5s]ab|c[pause:250ms]dd", "alice", seed=3)
            return await engine.submit(request).collect()
        finally:
            engine.stop()

    chunks = asyncio.run(main())
    audio = np.concatenate([c.samples for c in chunks])
    lead, pause = int(0.5 * RATE), int(0.25 * RATE)
    expected = np.concatenate([
        np.zeros(lead, np.float32), fake_audio(3, 0, "ab"), fake_audio(3, 1, "c"),
        np.zeros(pause, np.float32), fake_audio(3, 2, "dd"),
    ])
    assert audio.size == lead + pause + SAMPLES_PER_CHAR * 5
    assert np.array_equal(audio, expected)


def test_prosody_times_speed_out_of_range_is_a_400_before_queueing(monkeypatch):
    engine = _engine(monkeypatch)

    async def main():
        await engine.start()
        try:
            doc = SpeechDocument((TextRun("fast", rate=3.0),))
            monkeypatch.setattr("voxflow.engine.engine.parse_input", lambda text, **_: doc)
            message = r"prosody rate> 3 .* times speed 2 is 6, outside"
            with pytest.raises(InvalidRequestError, match=message):
                engine.submit(SpeechRequest("fake", "fast", "alice", speed=2.0))
            assert engine.health()["inflight_requests"] == 0
        finally:
            engine.stop()

    asyncio.run(main())


@pytest.mark.parametrize(
    "text",
    ['<speak>Hi <break time="1s"/> there</speak>', '  \n<speak version="1.0">Hi</speak>',
     '<?xml version="1.0"?>\n<speak>Hi</speak>', '\ufeff<speak>Hi</speak>',
     '\u200b <speak>Hi</speak>', '<!-- greeting --><speak>Hi</speak>',
     '<?xml-stylesheet href="a"?><speak>Hi</speak>'],
)
def test_inputs_that_start_as_xml_are_parsed_as_ssml(text):
    assert parse_input(text).ssml


@pytest.mark.parametrize("text", ["<speaker> is a word", "Say <speak> aloud.", "speak up"])
def test_text_that_merely_mentions_speak_is_plain(text):
    assert not parse_input(text).ssml


def test_a_doctype_is_refused_never_expanded():
    bomb = '<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]><speak>&lol2;</speak>'
    with pytest.raises(InvalidRequestError, match=r"DOCTYPE.*line 1, column \d+") as err:
        parse_input(bomb)
    assert err.value.code == "invalid_ssml"


def test_a_prefixed_speak_root_is_a_400_not_read_aloud():
    text = '<ssml:speak xmlns:ssml="http://www.w3.org/2001/10/synthesis">x</ssml:speak>'
    with pytest.raises(InvalidRequestError, match=r"<ssml:speak> at line 1, column 1") as err:
        parse_input(text)
    assert err.value.code == "invalid_ssml"
