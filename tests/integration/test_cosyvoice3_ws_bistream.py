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


def test_symbols_only_fed_text_is_silence_and_the_generation_starts_at_letters(server):
    symbols, _ = session(server, ["... ", "-- "])  # nothing speakable: as on the HTTP route
    assert symbols.close_code == 1000 and not symbols.of_type("error"), symbols.events
    assert symbols.of_type("segment.end")[0]["samples"] == 4800  # 0.2 s at 24 kHz
    led, _ = session(server, ["... ", "Hello there, a sentence."])  # starts at the letters
    assert led.close_code == 1000 and led.of_type("segment.end")[0]["samples"] % 960 == 0
    assert len(led.audio) > 9600
    wait_all_zero(server)


def test_a_refused_message_is_left_out_and_the_generation_goes_on(server):
    good = ["Hello there, this is fine. ", "And then the end of it."]
    plain, _ = session(server, good)
    for bad, code in [("Then a bad marker [pause:99h] arrives. ", "invalid_pause"),
                      ("A pause [pause:1s] would be read as text. ", "invalid_pause"),
                      ("<speak>Markup read as text</speak>", "invalid_ssml")]:
        with StreamClient(server.url) as other:  # a session beside it, undisturbed
            other.send(config())
            got, _ = session(server, [good[0], bad, good[1]])
            other.text(good[0] + good[1])
            other.send({"type": "end"})
            beside = other.finish()
        error = got.of_type("error")
        assert len(error) == 1 and error[0]["error"]["code"] == code, got.events
        assert error[0]["error"]["param"] == "input"
        assert got.close_code == 1000 and got.types()[-1] == "speech.audio.done"
        assert got.audio == plain.audio  # as if the refused message was never sent
        assert got.of_type("speech.audio.done")[0]["usage"]["input_characters"] == len(
            "".join(good))
        assert beside.close_code == 1000 and beside.audio == plain.audio
    first, _ = session(server, ["[pause:99h] first", "Hello there, this is fine. ",
                                "And then the end of it."])  # the first message too
    assert [e["error"]["code"] for e in first.of_type("error")] == ["invalid_pause"]
    assert first.close_code == 1000 and first.audio == plain.audio
    wait_all_zero(server)


def test_symbols_only_messages_first_or_later_neither_hang_nor_stall(server):
    spoken, _ = session(server, ["Hello there", " and more words."])
    for symbols in ["...", "!!", "—", "🙂"]:
        later, _ = session(server, ["Hello there", f" {symbols}", " and more words."])
        assert later.close_code == 1000 and not later.of_type("error"), later.events
        assert len(later.of_type("segment.start")) == 1
        assert later.of_type("segment.end")[0]["samples"] % 960 == 0 and len(later.audio) > 9600
        assert later.of_type("speech.audio.done")[0]["usage"]["input_characters"] == len(
            f"Hello there {symbols} and more words.")
        first, _ = session(server, [symbols, "Hello there", " and more words."])
        assert first.close_code == 1000 and not first.of_type("error"), first.events
        assert first.of_type("segment.start")[0]["text"] == f"{symbols}Hello there and more words."
        alone, _ = session(server, [symbols, f" {symbols}"])  # nothing speakable, then end
        assert alone.close_code == 1000 and alone.of_type("segment.end")[0]["samples"] == 4800
    assert spoken.close_code == 1000
    wait_all_zero(server)


def test_text_past_the_cap_rolls_over_to_a_new_generation(server, monkeypatch):
    from voxflow.models.cosyvoice3 import bistream

    # (7500 - 7) // 500 = 14 target ids per generation on the tiny voice (P = 7)
    monkeypatch.setattr(bistream, "ROLL_OVER_TOKENS_PER_ID", 500)
    text = "".join(PIECES)
    got, _ = session(server, PIECES)
    assert got.close_code == 1000 and not got.of_type("error"), got.events
    starts, ends = got.of_type("segment.start"), got.of_type("segment.end")
    assert [s["segment"] for s in starts] == [e["segment"] for e in ends] == [0, 1]
    cut = starts[1]["text_start"]
    assert starts[0]["text_start"] == 0 and text.startswith(starts[0]["text"])
    assert starts[1]["text"] == text[cut:] and starts[1]["text_end"] == len(text)
    head, tail = text[:cut], text[cut:]
    from voxflow.models.cosyvoice3.text import default_tokenizer

    tok = default_tokenizer()
    assert 14 <= len(tok.encode_ordinary(head)) < 14 + 5
    # at a pre-token boundary: the two generations read the ids the whole text has
    assert tok.encode_ordinary(head) + tok.encode_ordinary(tail) == tok.encode_ordinary(text)
    s0 = ends[0]["samples"]
    assert s0 + ends[1]["samples"] == len(got.audio) // 2
    assert starts[1]["audio_start"] == round(s0 / 24000, 3) == ends[0]["audio_end"]
    alone_head, _ = session(server, [head])  # each generation as a session of its text
    alone_tail, _ = session(server, [tail])
    assert got.audio[: 2 * s0] == alone_head.audio
    assert got.audio[2 * s0:] == alone_tail.audio
    assert got.of_type("speech.audio.done")[0]["usage"]["input_characters"] == len(text)
    wait_all_zero(server)
