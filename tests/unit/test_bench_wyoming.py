"""The bench's Wyoming client (`voxflow.bench.wyoming_client`) against scripted servers: what
it sends (one-shot, streamed text with Home Assistant's duplicate ``synthesize``), when first
audio counts from, and each way a response can fail; and the ``--wyoming`` options."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Attribution, Info, TtsProgram, TtsVoice
from wyoming.tts import SynthesizeStopped

from voxflow.bench.adapters import make_adapter
from voxflow.bench.arms import Arm, ArmServer
from voxflow.bench.options import wyoming_url
from voxflow.bench.target import Target
from voxflow.bench.ws_client import words_of
from voxflow.bench.wyoming_client import (
    describe,
    fetch_wyoming,
    first_sentence_end,
    host_port,
)
from voxflow.cli import main

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, list[Event]], Awaitable[None]]
RATE = 16000
AUDIO_STOP = AudioStop().event()


def chunk(samples: np.ndarray, rate: int = RATE, width: int = 2) -> Event:
    return AudioChunk(rate=rate, width=width, channels=1,
                      audio=samples.astype("<i2").tobytes()).event()


async def serve(script: Script, request: Callable[[str], Awaitable[None]]
                ) -> list[Event]:
    """Run `script` as a one-connection Wyoming server; `request(url)` talks to it. Returns the
    events the script read."""
    seen: list[Event] = []

    async def handle(reader, writer):
        try:
            await script(reader, writer, seen)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await request(f"tcp://127.0.0.1:{port}")
    return seen


async def read_until(reader, seen: list[Event], kind: str) -> None:
    while (event := await async_read_event(reader)) is not None:
        seen.append(event)
        if event.type == kind:
            return


def speak(n_chunks: int, end: Event | None = AUDIO_STOP, fmt_change: bool = False,
          until: str = "synthesize") -> Script:
    async def script(reader, writer, seen):
        await read_until(reader, seen, until)
        await async_write_event(AudioStart(rate=RATE, width=2, channels=1).event(), writer)
        for i in range(n_chunks):
            rate = RATE * 2 if fmt_change and i == n_chunks - 1 else RATE
            await async_write_event(chunk(np.full(100, 1000 * (i + 1)), rate), writer)
        if end is not None:
            await async_write_event(end, writer)
    return script


def fetch(target_kwargs: dict, script: Script, text: str = "One. Two three.",
          keep_audio: bool = True):
    results = []

    async def request(url: str) -> None:
        target = Target("wyoming", url, **target_kwargs)
        results.append(await fetch_wyoming(target, text, 3, timeout_s=10, keep_audio=keep_audio))

    seen = asyncio.run(serve(script, request))
    return results[0], seen


def test_a_oneshot_sends_one_synthesize_and_reads_to_the_audio_stop():
    result, seen = fetch({"voice": "joe"}, speak(3))
    t = result.timeline
    assert [e.type for e in seen] == ["synthesize"]
    assert seen[0].data["text"] == "One. Two three."
    assert seen[0].data["voice"] == {"name": "joe"}
    assert (t.ok, t.text_index, t.sample_rate, t.samples) == (True, 3, RATE, 300)
    assert [a.samples for a in t.arrivals] == [100, 100, 100]
    assert result.audio is not None
    np.testing.assert_array_equal(result.audio[[0, 100, 200]],
                                  np.array([1000, 2000, 3000], np.float32) / 32768)


def test_no_voice_asks_for_the_servers_default():
    _, seen = fetch({"voice": ""}, speak(1))
    assert "voice" not in seen[0].data


def test_streamed_text_is_sent_as_home_assistant_sends_it_and_timed_from_the_first_sentence():
    text = "One two. Three four five."
    result, seen = fetch({"voice": "", "text_words_per_s": 50.0},
                         speak(2, SynthesizeStopped().event(), until="synthesize-stop"), text)
    types = [e.type for e in seen]
    assert types == (["synthesize-start"] + ["synthesize-chunk"] * 5
                     + ["synthesize", "synthesize-stop"])
    assert "".join(e.data["text"] for e in seen if e.type == "synthesize-chunk") == text
    assert seen[-2].data["text"] == text  # the full text again, for servers without streaming
    t = result.timeline
    assert t.ok and t.samples == 200
    # sent = when "two." (word 1) left; the words go on a schedule from the first (word i
    # due i/50 s after it), so word 4 leaves 3/50 s after word 1 was due, less however late
    # word 1 itself left (event-loop jitter: 0.5 ms once under the two-worker suite)
    assert t.done - t.sent >= 3 / 50 - 0.01


@pytest.mark.parametrize(("text", "end"), [
    ("One two. Three.", 1), ("Hello! Yes", 0), ('He said "go." Then', 2), ("(Right?) ok", 0),
    ("no end at all", 3), ("", 0), ("一つ。二つ。", 0)])
def test_first_sentence_end(text, end):
    assert first_sentence_end(words_of(text)) == end


@pytest.mark.parametrize(("script", "kind"), [
    (speak(2, end=None), "truncated"),  # closed before audio-stop
    (speak(1, end=Error(text="Voice 'x' not found", code="voice_not_found").event()),
     "stream_error"),
    (speak(2, fmt_change=True), "decode"),  # Home Assistant keeps the first format only
])
def test_a_failed_response_is_an_error_kind(script, kind):
    result, _ = fetch({}, script)
    assert (result.timeline.ok, result.timeline.error) == (False, kind)


def test_audio_that_is_not_16_bit_is_a_decode_error():
    async def script(reader, writer, seen):
        await read_until(reader, seen, "synthesize")
        await async_write_event(chunk(np.zeros(10), width=4), writer)
    result, _ = fetch({}, script)
    assert result.timeline.error == "decode"


def test_a_silent_server_is_a_timeout():
    async def script(reader, writer, seen):
        await read_until(reader, seen, "synthesize")
        await asyncio.sleep(5)

    results = []

    async def request(url):
        results.append(await fetch_wyoming(Target("wyoming", url), "Hi.", 0, timeout_s=0.3))

    asyncio.run(serve(script, request))
    assert results[0].timeline.error == "timeout"


def test_nothing_listening_is_a_connect_error():
    port = _free_port()
    t = asyncio.run(fetch_wyoming(Target("wyoming", f"tcp://127.0.0.1:{port}"), "Hi.", 0,
                                  timeout_s=5)).timeline
    assert t.error == "connect"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ready_is_an_info_answer_to_describe():
    program = TtsProgram(name="piper", attribution=Attribution("a", "u"), installed=True,
                         description=None, version="2.5.2", voices=[TtsVoice(
                             name="en_US-joe-medium", attribution=Attribution("a", "u"),
                             installed=True, description=None, version=None,
                             languages=["en_US"])])

    async def script(reader, writer, seen):
        await read_until(reader, seen, "describe")
        await async_write_event(Info(tts=[program]).event(), writer)

    infos = []

    async def request(url):
        infos.append(await describe(url))

    asyncio.run(serve(script, request))
    assert infos[0].tts[0].voices[0].name == "en_US-joe-medium"
    port = _free_port()
    assert asyncio.run(describe(f"tcp://127.0.0.1:{port}")) is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:80", "tcp://127.0.0.1", "tcp://:80",
                                 "tcp://h:x"])
def test_a_wyoming_url_is_tcp_host_port(url):
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        host_port(url)
    with pytest.raises(ValueError):
        make_adapter(Target("wyoming", url))


def test_options_and_arms():
    assert wyoming_url("10200") == "tcp://127.0.0.1:10200"
    assert wyoming_url("box:10300") == "tcp://box:10300"
    arm = ArmServer(Arm("wp", "wyoming", "x {port}"), 10200, None)  # type: ignore[arg-type]
    assert arm.url == "tcp://127.0.0.1:10200"
    assert ArmServer(Arm("v", "openai", "x {port}"), 1, None).url == (  # type: ignore[arg-type]
        "http://127.0.0.1:1")


@pytest.mark.parametrize(("argv", "message"), [
    (["--wyoming", "host:"], "'host:' is not [HOST:]PORT"),
    (["--wyoming", "0"], "a server to bench listens on a port above 0"),
    (["--wyoming", "10200", "--format", "mp3"], "--format mp3 (Wyoming audio is 16-bit PCM)"),
    (["--wyoming", "10200", "--seed", "1"], "--seed (Wyoming has no seed)"),
    (["--wyoming", "10200", "--engine", "piper-http"], "--wyoming is --engine wyoming"),
    (["--wyoming-streaming"], "--wyoming-streaming (no Wyoming server is benched)"),
    (["--engine", "wyoming", "--url", "http://127.0.0.1:9"], "tcp://HOST:PORT"),
])
def test_bench_run_refuses_what_a_wyoming_bench_cannot_do(capsys, argv, message):
    assert main(["bench", "run", *argv]) == 2
    assert message in capsys.readouterr().err
