"""A served WebSocket session on the tiny CosyVoice3 (issue 43 items 2-3): its text messages feed
one running generation (bistream) whose audio streams while text still arrives; a seeded rerun
gives the same bytes whatever the message boundaries; instructions are taken; `bistream: false`
goes back to a request per sentence; a session that goes quiet without `end` is ended with a
408 and every state is freed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import LiveServer, start_server
from stream_client import StreamClient

pytest.importorskip("torch")
pytest.importorskip("tiktoken")

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cosyvoice3-tiny.yaml"
PIECES = ["Hello the", "re, this is", " one stream", " of text. And a sec", "ond sentence ",
          "follows it, word by word", " until the end."]


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = start_server(config=str(CONFIG), overrides={
        "models.0.options.bistream_text_timeout_s": 2.0})
    yield live
    live.stop()


def config(**fields) -> dict:
    return {"type": "config", "model": "cosyvoice3", "voice": "random-tiny",
            "response_format": "pcm", "seed": 5, **fields}


def wait_all_zero(server: LiveServer) -> None:
    for _ in range(300):
        text = httpx.get(f"{server.url}/metrics", timeout=30).text
        if all(f'voxflow_stage_states{{model="cosyvoice3",stage="{s}"}} 0.0' in text
               for s in ("lm", "token2wav")):
            return
        time.sleep(0.05)
    raise AssertionError("stage states not freed")


def session(server: LiveServer, pieces: list[str], pause_after: int | None = None,
            **fields):
    with StreamClient(server.url) as client:
        client.send(config(**fields))
        for i, piece in enumerate(pieces):
            client.text(piece)
            if pause_after == i:  # audio must come before any more text is sent
                client.wait_for(lambda r: bool(r.audio), timeout=60)
                audio_before_end = len(client.received.audio)
        client.send({"type": "end"})
        got = client.finish()
    return got, (audio_before_end if pause_after is not None else None)


def test_text_messages_feed_one_generation_streamed_while_text_arrives(server):
    got, early = session(server, PIECES, pause_after=3)
    assert got.close_code == 1000 and not got.of_type("error"), got.events
    assert early and early > 0  # audio before the rest of the text (and the end) was sent
    assert got.types()[:3] == ["session.created", "segment.start", "audio"]
    assert len(got.of_type("segment.start")) == 1  # one generation, not one per sentence
    end, done = got.of_type("segment.end")[0], got.of_type("speech.audio.done")[0]
    assert end["samples"] * 2 == len(got.audio) and end["samples"] % 960 == 0
    assert done["usage"]["input_characters"] == len("".join(PIECES))
    again, _ = session(server, ["".join(PIECES)])  # other boundaries, same seed
    chars, _ = session(server, list("".join(PIECES)))
    assert again.audio == got.audio == chars.audio
    other, _ = session(server, PIECES, seed=6)
    assert other.audio != got.audio
    wait_all_zero(server)


def test_instructions_and_the_sentence_path(server):
    soft, _ = session(server, PIECES, instructions="Please say a sentence in a very soft voice.")
    plain, _ = session(server, PIECES)
    assert soft.close_code == 1000 and soft.audio and soft.audio != plain.audio
    sentences, _ = session(server, PIECES, bistream=False)
    assert sentences.close_code == 1000 and len(sentences.of_type("segment.start")) == 2
    assert sentences.audio != plain.audio  # a request per sentence: another generation
    wait_all_zero(server)


def test_a_quiet_session_without_end_times_out_and_frees_its_state(server):
    with StreamClient(server.url) as client:
        client.send(config())
        client.text("Some text, and then nothing more for a long while")
        got = client.finish(timeout=60)
    error = got.of_type("error")
    assert error and error[0]["error"]["code"] == "text_timeout", got.events
    assert got.close_code == 4408
    wait_all_zero(server)


def test_symbols_only_fed_text_is_silence_and_later_text_is_checked(server):
    symbols, _ = session(server, ["... ", "-- "])  # nothing speakable: as on the HTTP route
    assert symbols.close_code == 1000 and not symbols.of_type("error"), symbols.events
    assert symbols.of_type("segment.end")[0]["samples"] == 4800  # 0.2 s at 24 kHz
    led, _ = session(server, ["... ", "Hello there, a sentence."])  # starts at the letters
    assert led.close_code == 1000 and led.of_type("segment.end")[0]["samples"] % 960 == 0
    assert len(led.audio) > 9600
    refused, _ = session(server, ["Hello there, this is fine. ",
                                  "Then a bad marker [pause:99h] arrives."])
    error = refused.of_type("error")  # (this voice reads every script: no unsupported_script)
    assert error and error[0]["error"]["code"] == "invalid_pause", refused.events
    assert error[0]["error"]["param"] == "input" and refused.close_code == 4400
    wait_all_zero(server)
