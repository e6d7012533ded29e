"""`WS /v1/audio/speech/stream` (issue 15 part 1) on the real server with the real joe voice:
text sent word by word is spoken sentence by sentence, in order, each sentence's audio equal to
`POST /v1/audio/speech` of that sentence with the same seed; events in order with their sample
counts; word timings index the text sent; a client that leaves mid-utterance cancels its work
and leaves no request, queue item, stage state or stream counted; malformed messages are closed
with an OpenAI-shaped error event and a clear close code while another session goes on; text
arriving slower than speech is spoken whole, without errors."""

from __future__ import annotations

import math
import time

import httpx
import numpy as np
import pytest
import soxr
from access_log import access_lines
from conftest import LiveServer, data_file
from stream_client import StreamClient, config

pytestmark = pytest.mark.integration

RATE = 22050
SENTENCES = data_file("sentences.txt").read_text(encoding="utf-8").splitlines()[:3]
SEED = 11


def http_pcm(server: LiveServer, text: str, seed: int = SEED) -> bytes:
    """The audio `POST /v1/audio/speech` gives for `text` (pcm at 22,050 Hz, whole)."""
    r = httpx.post(f"{server.url}/v1/audio/speech", timeout=120, json={
        "model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
        "sample_rate": "native", "seed": seed, "stream": False})
    assert r.status_code == 200, r.text
    return r.content


def send_words(client: StreamClient, text: str, delay_s: float = 0.0) -> None:
    words = text.split(" ")
    for i, word in enumerate(words):
        client.text(word if i == 0 else " " + word)
        if delay_s:
            time.sleep(delay_s)


def held(server: LiveServer) -> dict[str, float]:
    """The gauges a finished session must leave at zero."""
    stages = {f"states:{q.stage.name}": server.metric(
        "voxflow_stage_states", {"model": "piper", "stage": q.stage.name})
        for q in server.engine.models["piper"].queues}
    depth = {f"depth:{q.stage.name}": server.metric(
        "voxflow_queue_depth", {"model": "piper", "stage": q.stage.name})
        for q in server.engine.models["piper"].queues}
    return {"inflight": server.metric("voxflow_inflight_requests"),
            "waiting": server.metric("voxflow_waiting_requests"),
            "streams": server.metric("voxflow_speech_streams"), **stages, **depth}


def wait_all_zero(server: LiveServer, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(held(server).values()):
        assert time.monotonic() < deadline, held(server)
        time.sleep(0.05)


def test_sentences_sent_word_by_word_are_spoken_in_order_as_http_speaks_them(joe_server):
    text = " ".join(SENTENCES)
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=SEED))
        send_words(client, text)
        client.send({"type": "end"})
        got = client.finish()
    assert (got.close_code, got.close_reason) == (1000, "done")
    assert got.types() == ["session.created"] + ["segment.start", "audio", "segment.end"] * 3 \
        + ["speech.audio.done"]
    session = got.events[0]
    assert (session["model"], session["voice"], session["sample_rate"]) == ("piper", "joe", RATE)
    starts, ends = got.of_type("segment.start"), got.of_type("segment.end")
    assert [s["text"] for s in starts] == SENTENCES
    assert [s["segment"] for s in starts] == [e["segment"] for e in ends] == [0, 1, 2]
    for s in starts:  # offsets index the text sent
        assert text[s["text_start"]:s["text_end"]] == s["text"]
    # sample counts: segments add up to the audio, back to back on the stream's time line
    assert sum(e["samples"] for e in ends) * 2 == len(got.audio)
    for before, after in zip(ends, starts[1:], strict=False):
        assert after["audio_start"] == before["audio_end"]
    done = got.of_type("speech.audio.done")[0]
    seconds = len(got.audio) / 2 / RATE
    tokens = math.ceil(round(seconds / 0.02, 6))  # one output token per 20 ms of audio
    assert done["usage"] == {"input_characters": len(text),
                             "output_audio_seconds": round(seconds, 3),
                             "input_tokens": len(text), "output_tokens": tokens,
                             "total_tokens": len(text) + tokens}
    # each sentence is its own request with the stream's seed: the HTTP route's bytes
    reference = [http_pcm(joe_server, s) for s in SENTENCES]
    assert [e["samples"] * 2 for e in ends] == [len(r) for r in reference]
    assert got.audio == b"".join(reference)
    wait_all_zero(joe_server)


def test_word_timestamps_index_the_text_sent_and_the_stream_audio(joe_server):
    text = " ".join(SENTENCES[:2])
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=SEED, timestamps=True))
        send_words(client, text)
        client.send({"type": "end"})
        got = client.finish()
    assert got.close_code == 1000
    words = got.of_type("speech.word")
    assert len(words) >= len(text.split()) - 2  # espeak may swallow a short word
    for w in words:
        assert text[w["text_start"]:w["text_end"]] == w["word"]
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    second = got.of_type("segment.start")[1]
    later = [w for w in words if w["text_start"] >= second["text_start"]]
    assert later and all(w["start"] >= second["audio_start"] for w in later)
    assert words[-1]["end"] <= len(got.audio) / 2 / RATE


def test_a_client_leaving_mid_utterance_cancels_its_work_and_frees_everything(joe_server):
    requests_before = sum(joe_server.metric("voxflow_requests_total", {"model": "piper",
                                                                       "status": s})
                          for s in ("ok", "cancelled", "error", "timeout"))
    cancelled_before = joe_server.metric("voxflow_cancellations_total",
                                         {"model": "piper", "reason": "client"})
    long_text = " ".join(data_file("sentences.txt").read_text(encoding="utf-8").splitlines())
    client = StreamClient(joe_server.url)
    client.send(config())
    client.text(long_text)  # 30 sentences at once: one at a time goes to the engine
    client.wait_for(lambda r: any(isinstance(m, bytes) for _, m in r.items))
    assert joe_server.metric("voxflow_speech_streams") == 1
    inflight = []
    for _ in range(20):  # a session holds one request at a time, never more
        inflight.append(joe_server.metric("voxflow_inflight_requests"))
        time.sleep(0.01)
    assert max(inflight) == 1
    at_close = sum(joe_server.metric("voxflow_requests_total", {"model": "piper", "status": s})
                   for s in ("ok", "cancelled", "error", "timeout")) - requests_before
    client.close()
    wait_all_zero(joe_server)
    requests = sum(joe_server.metric("voxflow_requests_total", {"model": "piper", "status": s})
                   for s in ("ok", "cancelled", "error", "timeout")) - requests_before
    cancelled = joe_server.metric("voxflow_cancellations_total",
                                  {"model": "piper", "reason": "client"}) - cancelled_before
    assert cancelled == 1  # the sentence being spoken
    # At most the sentence being spoken and one more started since the count above: the other
    # 25+ sentences were never submitted (on a loaded host a few finish before the close).
    assert 1 <= requests <= at_close + 2 and requests <= 5


BAD = [
    # (messages, code, param, close code)
    (["{not json"], "invalid_json", None, 4400),
    (["[1, 2]"], "invalid_json", None, 4400),
    ([{"type": "shout"}], "invalid_message", "type", 4400),
    ([{"text": "no type"}], "invalid_message", "type", 4400),
    ([{"type": "text", "text": "Before the config."}], "invalid_message", "type", 4400),
    ([b"\x00\x01"], "invalid_message", None, 4400),
    ([config(voice="nobody")], "voice_not_found", "voice", 4400),
    ([config(model="tts-9")], "model_not_found", "model", 4404),
    ([config(speed=9.0)], "speed_out_of_range", "speed", 4400),
    ([config(seed="42")], "invalid_type", "seed", 4400),
    ([config(temperature=0.3)], "unknown_parameter", "temperature", 4400),
    ([config(language="ja")], "unsupported_language", "language", 4400),
    ([config(instructions="whisper")], "unsupported_parameter", "instructions", 4400),
    ([config(lexicon="nope")], "lexicon_not_found", "lexicon", 4400),
    ([config(), config()], "invalid_message", "type", 4400),
    ([config(), {"type": "text", "text": 5}], "invalid_type", "text", 4400),
    ([config(), {"type": "end", "now": True}], "unknown_parameter", "now", 4400),
    ([config(), {"type": "text", "text": "x" * 4097}], "input_too_long", "text", 4400),
    ([config(), {"type": "end"}], "empty_input", "input", 4400),
]


@pytest.mark.parametrize("messages,code,param,close", BAD, ids=[b[1] + str(i)
                                                              for i, b in enumerate(BAD)])
def test_malformed_messages_get_an_error_event_and_a_clear_close(joe_server, messages, code,
                                                                  param, close):
    with StreamClient(joe_server.url) as client:
        client.send_until_closed(messages)
        got = client.finish(timeout=60)
    error = got.of_type("error")
    assert len(error) == 1, got.events
    assert error[0]["error"]["code"] == code
    assert error[0]["error"]["param"] == param
    assert error[0]["error"]["type"] == "invalid_request_error"
    assert error[0]["error"]["message"]
    assert (got.close_code, got.close_reason) == (close, code)
    assert not got.audio
    assert not got.of_type("segment.start")  # no segment begun that never ends


def test_bad_sessions_leave_a_good_one_undisturbed(joe_server):
    with StreamClient(joe_server.url) as good:
        good.send(config(seed=SEED))
        good.text(SENTENCES[0] + " ")
        for messages, *_ in BAD[:8]:
            with StreamClient(joe_server.url) as bad:
                bad.send_until_closed(messages)
                assert bad.finish(timeout=60).close_code >= 4400
        good.text(SENTENCES[1])
        good.send({"type": "end"})
        got = good.finish()
    assert got.close_code == 1000 and not got.of_type("error")
    assert got.audio == http_pcm(joe_server, SENTENCES[0]) + http_pcm(joe_server, SENTENCES[1])
    assert httpx.get(f"{joe_server.url}/health").status_code == 200
    wait_all_zero(joe_server)


def test_text_slower_than_speech_is_spoken_whole_without_errors(joe_server):
    first, second = SENTENCES[0], SENTENCES[1]
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=SEED))
        client.text(first + " ")
        # the first sentence is only known complete once the next begins, or after the
        # clause wait (0.5 s) without text
        client.wait_for(lambda r: len(r.of_type("segment.end")) == 1)
        audio_s = client.received.of_type("segment.end")[0]["samples"] / RATE
        time.sleep(audio_s + 0.5)  # the listener has played it all and waits for more
        send_words(client, second, delay_s=0.15)  # ~7 words/s, slower than joe speaks them
        client.send({"type": "end"})
        got = client.finish()
    assert got.close_code == 1000 and not got.of_type("error")
    spoken = [s["text"] for s in got.of_type("segment.start")]
    # nothing lost or repeated: clause waits may cut the slow sentence, never drop from it
    assert spoken[0] == first and " ".join(spoken[1:]) == second
    if spoken[1:] == [second]:
        assert got.audio == http_pcm(joe_server, first) + http_pcm(joe_server, second)
    wait_all_zero(joe_server)


def test_after_a_quiet_wait_the_text_is_spoken_up_to_its_last_clause(joe_server):
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=SEED))
        sent = client.text("Well, I think")
        client.wait_for(lambda r: r.of_type("segment.start"), timeout=30)
        waited = client.received.items[[m for _, m in client.received.items].index(
            client.received.of_type("segment.start")[0])][0] - sent
        client.text(" that works.")
        client.send({"type": "end"})
        got = client.finish()
    assert [s["text"] for s in got.of_type("segment.start")] == ["Well,", "I think that works."]
    assert waited >= joe_server.app.state.settings.server.stream_clause_wait_s
    assert got.close_code == 1000


def test_a_flush_speaks_what_was_sent_at_once(joe_server):
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=SEED))
        client.text("No punctuation here")
        client.send({"type": "flush"})
        client.wait_for(lambda r: r.of_type("segment.end"), timeout=30)
        client.text(" and more after")
        client.send({"type": "end"})
        got = client.finish()
    assert [s["text"] for s in got.of_type("segment.start")] == ["No punctuation here",
                                                                  "and more after"]
    assert got.close_code == 1000


def test_wav_frames_form_one_streamed_file(joe_server):
    with StreamClient(joe_server.url) as client:
        client.send(config(seed=SEED, response_format="wav"))
        client.text(" ".join(SENTENCES[:2]))
        client.send({"type": "end"})
        got = client.finish()
    assert got.close_code == 1000
    assert got.audio[:4] == b"RIFF" and got.audio[8:12] == b"WAVE"
    pcm = http_pcm(joe_server, SENTENCES[0]) + http_pcm(joe_server, SENTENCES[1])
    assert got.audio[44:] == pcm


def stream_audio(server: LiveServer, text: str, **fields) -> tuple[dict, bytes]:
    """The session.created event and the audio of a stream speaking `text` (seeded)."""
    with StreamClient(server.url) as client:
        client.send(config(seed=SEED, **fields))
        client.text(text)
        client.send({"type": "end"})
        got = client.finish()
    assert got.close_code == 1000, got.events
    return got.events[0], got.audio


def test_pcm_is_openais_24khz_unless_the_config_asks_otherwise(joe_server):
    # issue 38 item 1: a config without sample_rate gets OpenAI's 24 kHz pcm (clients label
    # the bytes 24 kHz); "native" and 16000 get what they ask for
    text = " ".join(SENTENCES[:2])
    plain = config(seed=SEED)
    del plain["sample_rate"]  # as a client that knows nothing of it sends
    with StreamClient(joe_server.url) as client:
        client.send(plain)
        client.text(text)
        client.send({"type": "end"})
        got = client.finish()
    session, audio = got.events[0], got.audio
    assert session["sample_rate"] == 24000
    _, explicit = stream_audio(joe_server, text, sample_rate=24000)
    assert audio == explicit  # the default is exactly 24000
    native_session, native = stream_audio(joe_server, text)
    assert native_session["sample_rate"] == RATE
    assert abs(len(audio) // 2 - len(native) // 2 * 24000 / RATE) <= 1
    low_session, low = stream_audio(joe_server, text, sample_rate=16000)
    assert low_session["sample_rate"] == 16000
    assert abs(len(low) // 2 - len(native) // 2 * 16000 / RATE) <= 1
    # the same sound: the 24 kHz stream against the native one resampled here
    x = np.frombuffer(native, "<i2").astype(np.float32)
    y = np.frombuffer(audio, "<i2").astype(np.float32)
    ref = soxr.resample(x, RATE, 24000, quality="HQ")[: y.size]
    assert np.corrcoef(ref, y[: ref.size])[0, 1] > 0.999


def test_a_rate_the_format_cannot_take_refuses_the_config(joe_server):
    with StreamClient(joe_server.url) as client:
        client.send_until_closed([config(response_format="opus", sample_rate=22050)])
        got = client.finish(timeout=60)
    assert got.close_code == 4400
    (error,) = got.of_type("error")
    assert error["error"]["param"] == "sample_rate"
    assert error["error"]["message"] == ("Invalid value for 'sample_rate': opus cannot be "
                                         "encoded at 22050 Hz; it takes 8000, 12000, 16000, "
                                         "24000, 48000.")


def test_the_session_id_is_the_handshake_request_id_and_logged(joe_server, caplog):
    caplog.set_level("INFO", logger="voxflow.access")
    with StreamClient(joe_server.url, headers={"X-Request-Id": "ws-trace-7"}) as client:
        client.send(config(seed=SEED))
        client.text("Short and done.")
        client.send({"type": "end"})
        got = client.finish()
    assert got.events[0]["request_id"] == "ws-trace-7"
    (record,) = access_lines(caplog, "ws-trace-7")
    assert (record.status, record.model, record.chars, record.complete) == (200, "piper", 15,
                                                                            True)
    assert record.audio_s == round(len(got.audio) / 2 / RATE, 3)


def test_text_far_ahead_of_speech_is_refused_not_hoarded():
    from conftest import start_server

    live = start_server({"server.max_input_chars": 100})  # a session holds 64 x 100 at most
    try:
        sentence = "This sentence is here to fill the stream with text faster than speech. "
        with StreamClient(live.url) as client:
            client.send(config())
            texts = [{"type": "text", "text": sentence}] * (2 * 6400 // len(sentence))
            assert client.send_until_closed(texts) >= 6400 // len(sentence)  # far ahead
            got = client.finish()
        error = got.of_type("error")[0]["error"]
        assert (error["code"], error["param"]) == ("input_too_long", "text")
        assert "not yet spoken; the limit is 6400" in error["message"]
        assert (got.close_code, got.close_reason) == (4400, "input_too_long")
        wait_all_zero(live)
    finally:
        live.stop()


def test_a_kokoro_voice_streams_at_its_own_rate_with_english_word_timings(multi_server):
    text = "Hello there. The stream keeps going."
    with StreamClient(multi_server.url) as client:
        client.send(config(model="kokoro", voice="jm_kumo", timestamps=True))
        send_words(client, text)
        client.send({"type": "end"})
        timed = client.finish()
    assert timed.close_code == 1000 and timed.events[0]["sample_rate"] == 24000
    words = timed.of_type("speech.word")
    assert [w["word"] for w in words] == ["Hello", "there", "The", "stream", "keeps", "going"]
    for w in words:
        assert text[w["text_start"]:w["text_end"]] == w["word"]
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    assert words[-1]["end"] <= len(timed.audio) / 2 / 24000
    # Japanese readings keep no word boundaries: its sentences are refused as on HTTP
    with StreamClient(multi_server.url) as client:
        client.send(config(model="kokoro", voice="jm_kumo", timestamps=True))
        client.text("こんにちは。")
        client.send({"type": "end"})
        refused = client.finish(timeout=60)
    assert refused.of_type("error")[0]["error"]["code"] == "timestamps_unsupported"
    assert (refused.close_code, refused.close_reason) == (4400, "timestamps_unsupported")
    text = "こんにちは。今日の説明を始めます。"
    with StreamClient(multi_server.url) as client:
        # seeded: an unseeded stream's pieces may be cut where the load puts its deadlines
        client.send(config(model="kokoro", voice="jm_kumo", seed=4))
        client.text(text)
        client.send({"type": "end"})
        got = client.finish()
    assert got.close_code == 1000 and got.events[0]["sample_rate"] == 24000
    spoken = [s["text"] for s in got.of_type("segment.start")]
    assert spoken == ["こんにちは。", "今日の説明を始めます。"]
    reference = b"".join(httpx.post(f"{multi_server.url}/v1/audio/speech", timeout=120, json={
        "model": "kokoro", "voice": "jm_kumo", "input": s, "response_format": "pcm",
        "stream": False, "seed": 4}).content for s in spoken)
    assert got.audio == reference  # seeded: never cut, and Kokoro has no randomness
