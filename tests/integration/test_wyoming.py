"""Issue 39: the Wyoming server, driven as Home Assistant drives it (its
``homeassistant/components/wyoming/{data,tts}.py`` loops, rebuilt with the `wyoming` library's
client): ``describe`` within its 1 s timeout; a one-shot ``synthesize`` read until the first
``audio-stop``, a WAV built from the first chunk's format; streaming with the duplicate full
``synthesize`` Home Assistant sends, read until ``synthesize-stopped``. Piper and Kokoro, on
the shared multi-model server (`multi_server` serves Wyoming on a free port)."""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave

import httpx
import jiwer
import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from voxflow.eval.normalize import normalize_for_wer
from voxflow.wyoming.streaming import CHUNK_BYTES

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
TEXT = "The little red kite circled twice above the harbor. Then it settled on the mast."


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def describe(port: int) -> Info:
    """HA's `load_wyoming_info`: describe, then read until info, each read within 1 s."""
    async with AsyncTcpClient(HOST, port) as client:
        await client.write_event(Describe().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 1.0)
            assert event is not None
            if Info.is_type(event.type):
                return Info.from_event(event)


async def oneshot(port: int, text: str, voice: SynthesizeVoice | None = None
                  ) -> tuple[bytes, list[Event]]:
    """HA's `async_get_tts_audio`: synthesize, read until the first audio-stop, a WAV from the
    first chunk's rate/width/channels. Returns the WAV and every event read."""
    events: list[Event] = []
    async with AsyncTcpClient(HOST, port) as client:
        await client.write_event(Synthesize(text=text, voice=voice).event())
        buf, writer = io.BytesIO(), None
        while True:
            event = await client.read_event()
            assert event is not None, "closed before audio-stop"
            events.append(event)
            if AudioStop.is_type(event.type):
                break
            if Error.is_type(event.type):
                return b"", events
            if AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                if writer is None:
                    writer = wave.open(buf, "wb")
                    writer.setframerate(chunk.rate)
                    writer.setsampwidth(chunk.width)
                    writer.setnchannels(chunk.channels)
                writer.writeframes(chunk.audio)
        assert writer is not None
        writer.close()
        return buf.getvalue(), events


async def stream(port: int, pieces: list[str], voice: SynthesizeVoice | None = None
                 ) -> tuple[tuple[int, int, int], bytes, list[Event]]:
    """HA's `async_stream_tts_audio`: synthesize-start, the text in chunks, the duplicate full
    synthesize, synthesize-stop; reads until synthesize-stopped, the format from the first
    audio-start, every chunk's PCM appended."""
    events: list[Event] = []
    async with AsyncTcpClient(HOST, port) as client:
        await client.write_event(SynthesizeStart(voice=voice).event())
        for piece in pieces:
            await client.write_event(SynthesizeChunk(text=piece).event())
        await client.write_event(Synthesize(text="".join(pieces), voice=voice).event())
        await client.write_event(SynthesizeStop().event())
        fmt, pcm = None, bytearray()
        while True:
            event = await client.read_event()
            assert event is not None, "closed before synthesize-stopped"
            events.append(event)
            if AudioStart.is_type(event.type):
                start = AudioStart.from_event(event)
                got = (start.rate, start.width, start.channels)
                assert fmt in (None, got)
                fmt = got
            elif AudioChunk.is_type(event.type):
                assert fmt is not None, "audio-chunk before audio-start"
                chunk = AudioChunk.from_event(event)
                assert (chunk.rate, chunk.width, chunk.channels) == fmt
                pcm += chunk.audio
            elif SynthesizeStopped.is_type(event.type):
                return fmt, bytes(pcm), events
            elif Error.is_type(event.type):
                return fmt or (0, 0, 0), bytes(pcm), events


async def refused(port: int, events: list[Event], raw: bytes = b"") -> tuple[Error, bool]:
    """Send `events` (or `raw` bytes), read until an error; returns it and whether the server
    then closed the connection."""
    async with AsyncTcpClient(HOST, port) as client:
        assert client._writer is not None
        if raw:
            client._writer.write(raw)
            await client._writer.drain()
        for event in events:
            await client.write_event(event)
        while True:
            event = await client.read_event()
            assert event is not None, "closed without an error event"
            if Error.is_type(event.type):
                error = Error.from_event(event)
                return error, await client.read_event() is None


def wav_facts(data: bytes) -> tuple[int, np.ndarray]:
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getsampwidth(), w.getnchannels()) == (2, 1)
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), "<i2")


def http_wav(url: str, model: str, voice: str, text: str) -> tuple[int, np.ndarray]:
    r = httpx.post(f"{url}/v1/audio/speech", timeout=120, json={
        "model": model, "voice": voice, "input": text, "response_format": "wav",
        "stream": False})
    assert r.status_code == 200, r.text
    return wav_facts(r.content)


def test_describe_lists_every_voice_within_home_assistants_second(multi_server):
    info = run(describe(multi_server.wyoming_port))
    (program,) = info.tts
    assert (program.name, program.installed, program.supports_synthesize_streaming) == (
        "voxflow", True, True)
    voices = {v.name: v for v in program.voices}
    served = {v["id"] for v in httpx.get(f"{multi_server.url}/v1/audio/voices").json()["data"]
              if "alias_of" not in v}
    assert set(voices) == served  # every voice, no alias
    assert voices["joe"].languages == ["en_US"]
    assert voices["jm_kumo"].languages[0] == "ja" and "en_US" in voices["jm_kumo"].languages
    assert voices["joe"].attribution.name == "rhasspy"
    assert all(v.installed for v in program.voices)


@pytest.mark.parametrize(("model", "voice"), [("piper", "joe"), ("kokoro", "jm_kumo")])
def test_a_oneshot_is_the_http_audio_with_one_audio_stop(multi_server, transcribe, model, voice):
    data, events = run(oneshot(multi_server.wyoming_port, TEXT, SynthesizeVoice(name=voice)))
    types = [e.type for e in events]
    assert types[0] == "audio-start" and types[-1] == "audio-stop"
    assert types.count("audio-stop") == 1 and set(types[1:-1]) == {"audio-chunk"}
    rate, samples = wav_facts(data)
    http_rate, http_samples = http_wav(multi_server.url, model, voice, TEXT)
    assert rate == http_rate == (22050 if model == "piper" else 24000)
    # unseeded: another draw of the same sentence; the same length within 15%
    assert abs(samples.size / http_samples.size - 1) < 0.15
    heard = normalize_for_wer(transcribe(samples.astype(np.float32) / 32768, rate))
    # Whisper tiny on an unseeded draw: up to 5 of the 15 words (a CI run heard "the little red
    # kites are called twice ... then its settled", 4 wrong); another text would be near 1.
    assert jiwer.wer(normalize_for_wer(TEXT), heard) <= 0.34, heard


def test_a_oneshot_is_a_streamed_engine_request_sent_chunk_by_chunk(multi_server, monkeypatch):
    # a streamed request: Piper decodes it window by window (its first window 8,192 samples,
    # well under the first sentence), and each engine chunk leaves as audio-chunks of at most
    # 2,048 samples before the next is awaited
    submitted = []
    submit = multi_server.engine.submit

    def spy(request, **kwargs):
        stream = submit(request, **kwargs)
        submitted.append((request, stream))
        return stream

    monkeypatch.setattr(multi_server.engine, "submit", spy)
    data, events = run(oneshot(multi_server.wyoming_port, TEXT, SynthesizeVoice(name="joe")))
    ((request, stream),) = submitted
    assert request.streamed and (request.model, request.voice, request.text) == (
        "piper", "joe", TEXT)
    sizes = [len(AudioChunk.from_event(e).audio) for e in events if e.type == "audio-chunk"]
    assert max(sizes) == CHUNK_BYTES and sum(sizes) // 2 == stream.state.audio_samples


@pytest.mark.parametrize("voice", ["joe", "jm_kumo"])
def test_streamed_text_is_spoken_once_in_one_format_then_synthesize_stopped(
        multi_server, voice):
    pieces = ["The little red ", "kite circled twice ", "above the harbor. Then it ",
              "settled on the mast."]
    fmt, pcm, events = run(stream(multi_server.wyoming_port, pieces, SynthesizeVoice(name=voice)))
    types = [e.type for e in events]
    assert "error" not in types, events
    assert types.count("audio-start") == 1 and types.count("audio-stop") == 1
    assert types[-2:] == ["audio-stop", "synthesize-stopped"]
    rate = 22050 if voice == "joe" else 24000
    assert fmt == (rate, 2, 1)
    model = "piper" if voice == "joe" else "kokoro"
    _, whole = http_wav(multi_server.url, model, voice, "".join(pieces))
    # the duplicate `synthesize` was ignored: one reading of the text, not two
    assert abs(len(pcm) / 2 / whole.size - 1) < 0.2


def test_a_voice_by_language_alone(multi_server):
    data, _ = run(oneshot(multi_server.wyoming_port, "こんにちは。",
                          SynthesizeVoice(language="ja")))
    rate, samples = wav_facts(data)
    assert rate == 24000 and samples.size > 0.3 * rate  # a Kokoro voice


@pytest.mark.parametrize(("events", "code", "message"), [
    ([Synthesize(text="Hello.", voice=SynthesizeVoice(name="nobody")).event()],
     "voice_not_found", "Voice 'nobody' not found; 'describe' lists the voices."),
    ([Synthesize(text="   ").event()], "empty_input", None),
    ([Synthesize(text="a " * 3000).event()], "input_too_long", None),
    ([SynthesizeChunk(text="no start").event()], "invalid_message",
     "'synthesize-chunk' outside a stream: send 'synthesize-start' first."),
    ([SynthesizeStop().event()], "invalid_message",
     "'synthesize-stop' outside a stream: send 'synthesize-start' first."),
    ([Event(type="transcribe")], "unsupported_event", None),
    ([Event(type="synthesize", data={"text": 5})], "invalid_event", None),
    ([Synthesize(text="Hello.", voice=SynthesizeVoice(name="joe", speaker="x")).event()],
     "speaker_not_found", None),
])
def test_bad_requests_get_an_error_event_and_the_connection_closed(multi_server, events,
                                                                    code, message):
    error, closed = run(refused(multi_server.wyoming_port, events))
    assert error.code == code and closed
    if message is not None:
        assert error.text == message


@pytest.mark.parametrize(("raw", "code"), [
    (b"this is not json\n", "invalid_event"),
    (b'["a list"]\n', "invalid_event"),
    (json.dumps({"type": "synthesize", "data_length": 10**9}).encode() + b"\n",
     "event_too_large"),
    (json.dumps({"type": "synthesize", "payload_length": 70_000}).encode() + b"\n",
     "event_too_large"),
    (b"x" * 70_000 + b"\n", "event_too_large"),
])
def test_malformed_or_oversized_events_are_refused(multi_server, raw, code):
    error, closed = run(refused(multi_server.wyoming_port, [], raw=raw))
    assert error.code == code and closed


def test_a_bad_client_never_disturbs_a_good_one(multi_server):
    async def both():
        good = asyncio.create_task(oneshot(multi_server.wyoming_port, TEXT,
                                           SynthesizeVoice(name="joe")))
        bad = [refused(multi_server.wyoming_port, [Synthesize(
            text="x", voice=SynthesizeVoice(name="nobody")).event()]) for _ in range(5)]
        return await good, await asyncio.gather(*bad)

    (data, events), errors = run(both())
    assert events[-1].type == "audio-stop" and wav_facts(data)[1].size > 22050
    assert all(e.code == "voice_not_found" for e, _ in errors)


def test_a_client_that_leaves_mid_stream_cancels_its_work(multi_server):
    async def leave_early():
        async with AsyncTcpClient(HOST, multi_server.wyoming_port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="joe")).event())
            await client.write_event(SynthesizeChunk(text=TEXT * 6).event())
            while True:  # leave at the first audio
                event = await client.read_event()
                if event is not None and event.type == "audio-chunk":
                    return

    cancelled = {"model": "piper", "status": "cancelled"}
    before = multi_server.metric("voxflow_requests_total", cancelled)
    run(leave_early())
    piper = multi_server.engine.models["piper"]

    def held() -> list[float]:
        return [multi_server.metric("voxflow_stage_states", {"model": "piper",
                                                             "stage": q.stage.name})
                for q in piper.queues] + [multi_server.metric("voxflow_speech_streams"),
                                          multi_server.metric("voxflow_inflight_requests")]

    deadline = time.monotonic() + 30
    while any(held()):
        assert time.monotonic() < deadline, held()
        time.sleep(0.05)
    assert multi_server.metric("voxflow_requests_total", cancelled) == before + 1
