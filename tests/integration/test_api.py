"""The OpenAI speech API on the real server: formats, streaming, SSE, determinism, listings."""

from __future__ import annotations

import base64
import io
import json
import logging

import av
import httpx
import pytest
import soundfile as sf
from access_log import access_lines

pytestmark = pytest.mark.integration

TEXT = "The quick brown fox jumps over the lazy dog. It was a sunny day."


def post(url: str, **body) -> httpx.Response:
    """A whole-file request (``stream: false`` unless `body` says otherwise)."""
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "stream": False, **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, timeout=120)


def post_streamed(url: str, **body) -> tuple[httpx.Response, list[bytes]]:
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "stream": True, **body}
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=payload, timeout=120) as r:
        pieces = list(r.iter_raw())
    return r, pieces


def decoded_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        n = sum(frame.samples for frame in container.decode(stream))
        return n / stream.rate


def test_same_seed_gives_identical_bytes(joe_server):
    a = post(joe_server.url, response_format="wav", seed=1234)
    b = post(joe_server.url, response_format="wav", seed=1234)
    c = post(joe_server.url, response_format="wav", seed=4321)
    assert a.status_code == b.status_code == 200
    assert a.content == b.content
    assert a.content != c.content


def test_streamed_pcm_equals_whole_pcm(joe_server):
    # issue 38 item 1: pcm is OpenAI's 24 kHz, resampled from Piper's 22,050 Hz; seeded bytes
    # stay identical streamed or not (soxr gives the same samples in chunks as whole)
    whole = post(joe_server.url, response_format="pcm", seed=99)
    r, pieces = post_streamed(joe_server.url, response_format="pcm", seed=99)
    assert r.status_code == 200
    for response in (r, whole):
        assert response.headers["x-sample-rate"] == "24000"
        assert response.headers["content-type"] == "audio/pcm;rate=24000"
    assert b"".join(pieces) == whole.content
    assert len(whole.content) % 2 == 0 and len(whole.content) > 2 * 24000


def test_whole_wav_has_exact_header(joe_server):
    r = post(joe_server.url, response_format="wav", seed=5)
    assert r.headers["content-type"] == "audio/wav"
    assert int(r.headers["content-length"]) == len(r.content)
    audio, rate = sf.read(io.BytesIO(r.content), dtype="int16")
    assert rate == 22050
    assert 2.0 < audio.size / rate < 10.0
    pcm = post(joe_server.url, response_format="pcm", seed=5, sample_rate="native").content
    assert audio.tobytes() == pcm


def test_streamed_wav_body_equals_pcm(joe_server):
    r, pieces = post_streamed(joe_server.url, response_format="wav", seed=11)
    body = b"".join(pieces)
    assert body[:4] == b"RIFF" and body[8:12] == b"WAVE"
    pcm = post(joe_server.url, response_format="pcm", seed=11, sample_rate="native").content
    assert body[44:] == pcm


def test_sample_rate_asks_for_another_rate_or_the_voices_own(joe_server):
    # issue 38 item 1: the extension field, for pcm and for the formats with a header
    native = post(joe_server.url, response_format="pcm", seed=8, sample_rate="native")
    assert native.headers["content-type"] == "audio/pcm;rate=22050"
    assert native.headers["x-sample-rate"] == "22050"
    n = len(native.content) // 2
    whole = post(joe_server.url, response_format="pcm", seed=8, sample_rate=16000)
    r, pieces = post_streamed(joe_server.url, response_format="pcm", seed=8, sample_rate=16000)
    assert whole.headers["x-sample-rate"] == r.headers["x-sample-rate"] == "16000"
    assert b"".join(pieces) == whole.content
    assert abs(len(whole.content) // 2 - n * 16000 / 22050) <= 1
    flac = post(joe_server.url, response_format="flac", seed=8, sample_rate=44100)
    info = sf.info(io.BytesIO(flac.content))
    assert (flac.headers["x-sample-rate"], info.samplerate) == ("44100", 44100)
    assert abs(info.frames - n * 2) <= 1
    # opus takes no 22,050 Hz: X-Sample-Rate says the 48 kHz it is encoded at
    assert post(joe_server.url, response_format="opus", seed=8).headers["x-sample-rate"] == "48000"


@pytest.mark.parametrize(("extra", "message"), [
    ({"response_format": "opus", "sample_rate": 22050},
     "Invalid value for 'sample_rate': opus cannot be encoded at 22050 Hz; it takes 8000, "
     "12000, 16000, 24000, 48000."),
    ({"response_format": "pcm", "sample_rate": 4000},
     "Invalid value for 'sample_rate': 4000 Hz is outside 8000 to 48000; or send \"native\" "
     "for the model's own rate."),
    ({"response_format": "wav", "sample_rate": "24000"},
     "Invalid value for 'sample_rate': sample_rate must be an integer (Hz) or \"native\"."),
])
def test_a_rate_the_format_cannot_have_is_a_400_naming_sample_rate(joe_server, extra, message):
    r = post(joe_server.url, **extra)
    assert r.status_code == 400
    assert r.json() == {"error": {"message": message, "type": "invalid_request_error",
                                  "param": "sample_rate", "code": "invalid_value"}}


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus", "aac"])
def test_compressed_formats_decode_to_the_wav_duration(joe_server, fmt):
    native = post(joe_server.url, response_format="pcm", seed=3, sample_rate="native")
    wav_s = len(native.content) / 2 / 22050
    # One codec frame: flac is exact (the 1e-6 slack below); opus is measured at 48 kHz.
    frame_s = {"flac": 0.0, "mp3": 1152 / 22050, "opus": 0.02, "aac": 1024 / 22050}[fmt]
    whole = post(joe_server.url, response_format=fmt, seed=3)
    assert whole.status_code == 200
    _, pieces = post_streamed(joe_server.url, response_format=fmt, seed=3)
    for data in (whole.content, b"".join(pieces)):
        assert abs(decoded_seconds(data) - wav_s) < frame_s + 1e-6


def test_sse_stream_carries_deltas_then_done(joe_server):
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "response_format": "pcm",
               "stream_format": "sse", "seed": 99}
    with httpx.stream("POST", f"{joe_server.url}/v1/audio/speech", json=payload, timeout=120) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == post(joe_server.url, response_format="pcm", seed=99).content
    # issue 38 item 7: OpenAI's usage fields beside voxflow's (a token: one input character,
    # 20 ms of output audio), counted on the model's 22,050 Hz samples: the 24 kHz pcm
    # delivered has the same length to within a sample
    assert r.headers["x-sample-rate"] == "24000"
    seconds = len(audio) / 2 / 24000
    usage = events[-1]["usage"]
    assert usage["input_characters"] == usage["input_tokens"] == len(TEXT)
    assert usage["output_audio_seconds"] == pytest.approx(seconds, abs=0.001)
    assert abs(usage["output_tokens"] - seconds * 50) <= 1 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_models_voices_health_metrics(joe_server):
    models = httpx.get(f"{joe_server.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["piper", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    voices = httpx.get(f"{joe_server.url}/v1/audio/voices").json()["data"]
    joe = next(v for v in voices if v["id"] == "joe")
    assert joe == {"id": "joe", "object": "voice", "model": "piper", "family": "piper",
                   "language": "en-US", "languages": ["en-US"], "sample_rate": 22050,
                   "default": True}
    health = httpx.get(f"{joe_server.url}/health")
    assert health.status_code == 200 and health.json()["status"] == "ready"
    post(joe_server.url, response_format="pcm")
    text = httpx.get(f"{joe_server.url}/metrics").text
    for name in ("voxflow_requests_total", "voxflow_ttfa_seconds_bucket",
                 "voxflow_audio_seconds_total", "voxflow_real_time_factor_bucket",
                 "voxflow_queue_depth", "voxflow_batch_size_bucket",
                 "voxflow_cancellations_total"):
        assert name in text, name
    assert joe_server.metric("voxflow_requests_total", {"model": "piper", "status": "ok"}) >= 1


def test_openai_client_whole_and_streamed(joe_server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{joe_server.url}/v1", api_key="unused")
    whole = client.audio.speech.create(
        model="piper", voice="joe", input=TEXT, response_format="pcm",
        extra_body={"seed": 8, "stream": False},
    )
    with client.audio.speech.with_streaming_response.create(
        model="piper", voice="joe", input=TEXT, response_format="pcm",
        extra_body={"seed": 8, "stream": True},
    ) as response:
        streamed = b"".join(response.iter_bytes())
    assert whole.content == streamed
    assert len(streamed) > 2 * 22050


# ---- Issue 8, item 1: streaming is the default -------------------------------------------------

LONG_TEXT = " ".join([TEXT] * 8)  # 16 sentences: synthesis lasts well past the first chunk


def post_default(url: str, **body) -> httpx.Response:
    """A request without a `stream` field, read to the end."""
    payload = {"model": "piper", "voice": "joe", "input": TEXT, **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, timeout=120)


def mp3_audio_offset(data: bytes) -> int:
    """Byte offset of the first audio frame (after the ID3 tag and the Xing/LAME frame)."""
    with av.open(io.BytesIO(data)) as container:
        return next(p for p in container.demux(container.streams.audio[0]) if p.size).pos


def assert_same_audio_bytes(fmt: str, whole: bytes, streamed: bytes) -> None:
    """`streamed` equals `whole` byte for byte, except the header fields that only the end of
    the audio can fill (docs/api.md, "Streaming"): a WAV's RIFF and data sizes, FLAC's
    STREAMINFO frame sizes, sample count and MD5, the counts and TOC of mp3's Xing/LAME frame."""
    assert len(streamed) == len(whole)
    if fmt in ("pcm", "opus", "aac"):
        assert streamed == whole
    elif fmt == "wav":
        assert streamed[4:8] == streamed[40:44] == b"\xff\xff\xff\xff"
        assert whole[4:8] == (len(whole) - 8).to_bytes(4, "little")
        assert whole[40:44] == (len(whole) - 44).to_bytes(4, "little")
        assert streamed[:4] + streamed[8:40] + streamed[44:] == whole[:4] + whole[8:40] + whole[44:]
    elif fmt == "flac":
        # fLaC, the STREAMINFO block header, min/max block size: bytes 0-11; STREAMINFO ends at 42.
        assert streamed[:12] == whole[:12] and streamed[42:] == whole[42:]
        assert streamed[26:42] == bytes(16) and whole[26:42] != bytes(16)  # MD5 unknown / set
    else:
        offset = mp3_audio_offset(whole)
        assert mp3_audio_offset(streamed) == offset and 0 < offset < 600
        assert streamed[offset:] == whole[offset:]


def test_item1_no_stream_field_streams_chunked_and_stream_false_is_whole(joe_server):
    streamed = post_default(joe_server.url, response_format="wav", seed=21)
    assert streamed.status_code == 200
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in streamed.headers
    assert streamed.content[4:8] == b"\xff\xff\xff\xff"  # a streamed WAV: length unknown
    assert streamed.headers["x-accel-buffering"] == "no"  # nginx passes each piece on at once
    whole = post(joe_server.url, response_format="wav", seed=21)
    assert "transfer-encoding" not in whole.headers
    assert "x-accel-buffering" not in whole.headers
    assert int(whole.headers["content-length"]) == len(whole.content)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac", "mp3", "opus", "aac"])
def test_item1_seeded_bytes_are_the_same_streamed_or_not(joe_server, fmt):
    whole = post(joe_server.url, response_format=fmt, seed=17)
    streamed = post_default(joe_server.url, response_format=fmt, seed=17)
    assert whole.status_code == streamed.status_code == 200
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert_same_audio_bytes(fmt, whole.content, streamed.content)


def test_item1_errors_before_audio_stay_4xx_when_streaming_by_default(joe_server):
    r = post_default(joe_server.url, voice="nobody")
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
    r = post_default(joe_server.url, input=" \n ")
    assert r.status_code == 400 and r.json()["error"]["code"] == "empty_input"


@pytest.fixture
def buffered_by_default(joe_server):
    """`joe_server` with ``server.stream_by_default: false`` for one test (the handler reads
    the app's settings per request), restored afterwards."""
    app = joe_server.app
    settings = app.state.settings
    server = settings.server.model_copy(update={"stream_by_default": False})
    app.state.settings = settings.model_copy(update={"server": server})
    yield joe_server
    app.state.settings = settings


def test_item1_server_setting_makes_whole_files_the_default(buffered_by_default):
    url = buffered_by_default.url
    r = post_default(url, response_format="pcm", seed=4)
    assert r.status_code == 200 and int(r.headers["content-length"]) == len(r.content)
    s = post_default(url, response_format="pcm", seed=4, stream=True)
    assert s.headers["transfer-encoding"] == "chunked" and s.content == r.content


def test_item1_openai_client_plain_create_gets_the_streamed_mp3(joe_server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{joe_server.url}/v1", api_key="unused")
    plain = client.audio.speech.create(  # exactly what apps send: no stream field, mp3
        model="piper", voice="joe", input=TEXT, extra_body={"seed": 31}
    )
    assert plain.response.headers["transfer-encoding"] == "chunked"
    assert plain.response.headers["content-type"] == "audio/mpeg"
    whole = post(joe_server.url, response_format="mp3", seed=31)
    assert_same_audio_bytes("mp3", whole.content, plain.content)


def test_item1_openai_client_streaming_response_gets_audio_before_synthesis_ends(joe_server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{joe_server.url}/v1", api_key="unused")
    with client.audio.speech.with_streaming_response.create(
        model="piper", voice="joe", input=LONG_TEXT, response_format="pcm",
        extra_body={"seed": 32},
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        pieces = response.iter_bytes()
        first = next(pieces)
        # The first audio is here while the server is still synthesizing the rest.
        assert joe_server.engine.health()["inflight_requests"] == 1
        streamed = first + b"".join(pieces)
    whole = post(joe_server.url, input=LONG_TEXT, response_format="pcm", seed=32)
    assert streamed == whole.content and len(streamed) > 20 * 2 * 22050


# ---- Issue 8, item 5: request ids and the access line -----------------------------------------

def test_item5_every_response_carries_x_request_id(joe_server):
    url = joe_server.url
    responses = [
        httpx.get(f"{url}/health"),
        httpx.get(f"{url}/v1/models"),
        httpx.get(f"{url}/nowhere"),
        httpx.get(f"{url}/v1/audio/speech"),
        httpx.post(f"{url}/v1/audio/speech", json={"model": "piper", "voice": "joe"}),
        post(url, model="tts-9"),
        post(url, input="Hi.", response_format="pcm"),
        post_default(url, input="Hi.", response_format="pcm"),
    ]
    assert [r.status_code for r in responses] == [200, 200, 404, 405, 400, 404, 200, 200]
    ids = [r.headers["x-request-id"] for r in responses]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids), ids
    assert len(set(ids)) == len(ids)


def test_item5_client_id_is_the_engine_request_id_and_logged(joe_server, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="voxflow.access")
    submitted = []
    submit = joe_server.engine.submit

    def spy(request, **kwargs):
        submitted.append(request.request_id)
        return submit(request, **kwargs)

    monkeypatch.setattr(joe_server.engine, "submit", spy)
    headers = {"X-Request-Id": "client-trace-42"}
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "response_format": "pcm",
               "seed": 6}
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", json=payload, headers=headers,
                   timeout=120)
    assert r.status_code == 200 and r.headers["x-request-id"] == "client-trace-42"
    assert submitted == ["client-trace-42"]
    (line,) = access_lines(caplog, "client-trace-42")
    audio_s = len(r.content) / 2 / 24000  # pcm: OpenAI's 24 kHz (issue 38 item 1)
    assert (line.status, line.model, line.voice, line.chars) == (200, "piper", "joe", len(TEXT))
    assert line.audio_s == pytest.approx(audio_s, abs=1e-3)
    assert 0 < line.ttfa_s <= line.total_s and line.stream is True and line.complete is True
    message = line.getMessage()
    assert message.startswith(f"request_id=client-trace-42 status=200 model=piper voice=joe "
                              f"chars={len(TEXT)} audio_s={line.audio_s} ttfa_s=")
    # A refused request is logged with its status; a bad client id is replaced.
    bad = httpx.post(f"{joe_server.url}/v1/audio/speech", headers={"X-Request-Id": "x" * 300},
                     json={"model": "piper", "voice": "nobody", "input": "Hi."})
    assert bad.status_code == 400 and len(bad.headers["x-request-id"]) == 32
    (refused,) = access_lines(caplog, bad.headers["x-request-id"])
    assert (refused.status, refused.model, refused.voice, refused.chars) == (400, "piper",
                                                                             "nobody", 3)
    assert refused.ttfa_s is None and refused.audio_s is None
    assert " ttfa_s=- " in refused.getMessage()
    invalid = httpx.post(f"{joe_server.url}/v1/audio/speech", json={"model": "piper"})
    (unparsed,) = access_lines(caplog, invalid.headers["x-request-id"])
    assert unparsed.status == 400 and unparsed.model is None


def test_item3_cors_is_off_on_the_default_server(joe_server):
    preflight = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"}
    r = httpx.options(f"{joe_server.url}/v1/audio/speech", headers=preflight)
    assert r.status_code == 405 and "access-control-allow-origin" not in r.headers
    r = httpx.get(f"{joe_server.url}/v1/models", headers={"Origin": "https://app.example.com"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers



# ---- Issue 8, item 2: OpenAI model and voice names ---------------------------------------------

OPENAI_VOICES = ["alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage",
                 "shimmer", "verse", "marin", "cedar"]  # written out: the test's own list


def test_item2_openai_names_are_listed_with_what_they_resolve_to(joe_server):
    models = httpx.get(f"{joe_server.url}/v1/models").json()["data"]
    by_id = {m["id"]: m for m in models}
    assert "alias_of" not in by_id["piper"]
    for alias in ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"):
        assert by_id[alias]["alias_of"] == "piper" and by_id[alias]["object"] == "model"
        assert by_id[alias]["voices"] == ["joe"] and by_id[alias]["status"] == "ready"
    voices = httpx.get(f"{joe_server.url}/v1/audio/voices", params={"model": "tts-1"}).json()
    by_voice = {v["id"]: v for v in voices["data"]}
    assert sorted(by_voice) == sorted(["joe", *OPENAI_VOICES])
    assert by_voice["alloy"] == {"id": "alloy", "object": "voice", "model": "piper",
                                 "family": "piper", "language": "en-US", "languages": ["en-US"],
                                 "sample_rate": 22050, "default": False, "alias_of": "joe"}
    assert "alias_of" not in by_voice["joe"]


def test_item2_openai_client_with_openai_names_gets_joe(joe_server, caplog):
    from openai import OpenAI

    caplog.set_level(logging.INFO, logger="voxflow.access")
    client = OpenAI(base_url=f"{joe_server.url}/v1", api_key="unused")
    aliased = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm", extra_body={"seed": 12}
    )
    assert aliased.response.status_code == 200
    assert aliased.content == post(joe_server.url, response_format="pcm", seed=12).content
    (line,) = access_lines(caplog, aliased.response.headers["x-request-id"])
    assert (line.model, line.voice) == ("piper", "joe")  # served names, aliases resolved
    r = post(joe_server.url, model="gpt-4o-mini-tts", voice={"id": "verse"}, input="Hi.",
             response_format="pcm", seed=1)
    assert r.status_code == 200 and r.content == post(
        joe_server.url, input="Hi.", response_format="pcm", seed=1).content


def test_issue38_item5_every_openai_voice_and_dated_model_name_speaks_joe(joe_server):
    """Pipecat refuses any voice but OpenAI's 13 before sending: each must resolve, and a
    dated snapshot of a model name (gpt-4o-mini-tts-2025-12-15) like the name itself."""
    joe = post(joe_server.url, input="Hi.", response_format="pcm", seed=4).content
    for voice in OPENAI_VOICES:
        r = post(joe_server.url, model="gpt-4o-mini-tts-2025-12-15", voice=voice, input="Hi.",
                 response_format="pcm", seed=4)
        assert r.status_code == 200 and r.content == joe, voice
    r = httpx.get(f"{joe_server.url}/v1/audio/voices", params={"model": "tts-1-2025-01-01"})
    assert r.status_code == 200 and {v["model"] for v in r.json()["data"]} == {"piper"}
    r = post(joe_server.url, model="tts-1-2025-13")  # not a date suffix: unknown
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_issue38_item6_open_webui_reads_voices_and_audio_models(joe_server):
    """Open WebUI reads {"voices": [{"id", "name"}]} and {"models": [{"id"}]}."""
    voices = httpx.get(f"{joe_server.url}/v1/audio/voices").json()
    assert [v["id"] for v in voices["voices"]] == [v["id"] for v in voices["data"]]
    assert voices["voices"][0] == {"id": "joe", "name": "joe"}
    assert {"id": "alloy", "name": "alloy (joe)"} in voices["voices"]
    assert len(voices["voices"]) == 1 + len(OPENAI_VOICES)
    models = httpx.get(f"{joe_server.url}/v1/audio/models").json()
    assert models == {"models": [{"id": "piper"}, {"id": "tts-1"}, {"id": "tts-1-hd"},
                                 {"id": "gpt-4o-mini-tts"}]}


def test_item2_unknown_names_list_models_voices_and_aliases(joe_server):
    r = post(joe_server.url, model="tts-2")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert r.json()["error"]["message"] == (
        "The model 'tts-2' does not exist. Served models: piper, gpt-4o-mini-tts (alias of "
        "piper), tts-1 (alias of piper), tts-1-hd (alias of piper).")
    r = post(joe_server.url, model="tts-1", voice="river")
    error = r.json()["error"]
    assert r.status_code == 400 and (error["param"], error["code"]) == ("voice", "voice_not_found")
    assert error["message"] == (
        "Voice 'river' is not a voice of model 'piper'. Available voices: joe (aliases: "
        f"{', '.join(sorted(OPENAI_VOICES))}).")
    r = httpx.get(f"{joe_server.url}/v1/audio/voices", params={"model": "tts-2"})
    assert r.status_code == 404 and "tts-1 (alias of piper)" in r.json()["error"]["message"]
