"""Issue 14 item 2: API keys on the real server (default Piper deployment, voice joe) with keys
from all three sources at once: `server.api_keys`, `server.api_keys_file` and VOXFLOW_API_KEYS.
Each key gets real audio; no key or a wrong one is a 401 in OpenAI's shape, also through the
official openai client; /health stays open; keys never show up in answers or logs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import soundfile as sf
from access_log import access_lines
from conftest import LiveServer, start_server

from voxflow.api_keys import ENV_VAR

pytestmark = pytest.mark.integration

CONFIG_KEY = "sk-live-config-7f3a9c"
FILE_KEY = "sk-live-file-51be02"
ENV_KEY = "sk-live-env-c0ffee"
KEYS = (CONFIG_KEY, FILE_KEY, ENV_KEY)
TEXT = "Only a caller with the key hears this sentence."


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory) -> Iterator[LiveServer]:
    path = tmp_path_factory.mktemp("keys") / "api_keys.txt"
    path.write_text(f"# keys for the test deployment\n\n{FILE_KEY}\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENV_VAR, f"{ENV_KEY}, ")
        live = start_server({"server.api_keys": [CONFIG_KEY],
                             "server.api_keys_file": str(path)})
    yield live
    live.stop()


def speech(url: str, key: str | None, **body) -> httpx.Response:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    payload = {"model": "piper", "voice": "joe", "input": TEXT, "stream": False,
               "response_format": "wav", **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, headers=headers, timeout=120)


@pytest.mark.parametrize("key", KEYS, ids=["server.api_keys", "api_keys_file", ENV_VAR])
def test_each_key_gets_audio_from_joe(keyed_server, key) -> None:
    r = speech(keyed_server.url, key)
    assert r.status_code == 200, r.text
    audio, rate = sf.read(io.BytesIO(r.content))
    assert rate == 22050
    assert 1.5 < len(audio) / rate < 6.0  # a spoken sentence, not an error body
    assert abs(audio).max() > 0.05


def test_no_key_or_a_wrong_one_is_a_401(keyed_server) -> None:
    r = speech(keyed_server.url, None)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "missing_api_key"
    assert r.headers["www-authenticate"] == 'Bearer realm="voxflow"'
    r = speech(keyed_server.url, CONFIG_KEY + "0")
    assert r.status_code == 401
    assert r.json() == {"error": {
        "message": "Incorrect API key provided. Send one of this server's keys "
                   "(server.api_keys, server.api_keys_file, VOXFLOW_API_KEYS) as "
                   "'Authorization: Bearer YOUR_KEY'.",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
    r = httpx.get(f"{keyed_server.url}/v1/models",
                  headers={"Authorization": f"Basic {CONFIG_KEY}"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_the_openai_client_with_the_right_key_works_and_a_wrong_one_raises(keyed_server) -> None:
    from openai import AuthenticationError, OpenAI

    good = OpenAI(base_url=f"{keyed_server.url}/v1", api_key=FILE_KEY, max_retries=0)
    audio = good.audio.speech.create(model="tts-1", voice="alloy", input=TEXT,
                                     response_format="pcm", extra_body={"stream": False})
    assert len(audio.content) > 22050 * 2  # over a second of 16-bit PCM
    assert [m.id for m in good.models.list()][0] == "piper"
    bad = OpenAI(base_url=f"{keyed_server.url}/v1", api_key="sk-not-a-key", max_retries=0)
    with pytest.raises(AuthenticationError) as err:
        bad.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert err.value.status_code == 401
    assert err.value.code == "invalid_api_key"
    assert err.value.body["message"].startswith("Incorrect API key provided.")
    with pytest.raises(AuthenticationError):
        bad.models.list()


def test_health_is_open_and_metrics_need_the_key(keyed_server) -> None:
    health = httpx.get(f"{keyed_server.url}/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ready" and health.json()["api_key_required"] is True
    r = httpx.get(f"{keyed_server.url}/metrics")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    r = httpx.get(f"{keyed_server.url}/metrics", headers={"Authorization": f"Bearer {ENV_KEY}"})
    assert r.status_code == 200 and "voxflow_requests_total" in r.text


def test_no_key_shows_in_answers_or_in_the_log(keyed_server, caplog) -> None:
    caplog.set_level(logging.INFO)
    auth = {"Authorization": f"Bearer {CONFIG_KEY}"}
    texts = [httpx.get(f"{keyed_server.url}{path}", headers=auth).text
             for path in ("/health", "/v1/models", "/v1/audio/voices", "/openapi.json")]
    attempt = "sk-live-config-7f3a9"  # a wrong key one character short of the right one
    refused = speech(keyed_server.url, attempt)
    assert refused.status_code == 401
    texts.append(refused.text)
    texts.append(speech(keyed_server.url, None).text)
    for text in texts:
        for secret in (*KEYS, attempt):
            assert secret not in text
    assert any("refused POST /v1/audio/speech: invalid_api_key" in r.getMessage()
               for r in caplog.records)
    assert access_lines(caplog, where=lambda r: "status=401" in r.getMessage())
    for secret in (*KEYS, attempt):
        assert secret not in caplog.text


def test_the_speech_stream_needs_the_key_too(keyed_server) -> None:
    from stream_client import StreamClient, config
    from websockets.exceptions import InvalidStatus

    for headers in (None, {"Authorization": f"Bearer {CONFIG_KEY}0"}):
        # the middleware closes before accepting: uvicorn refuses the handshake
        with pytest.raises(InvalidStatus) as refused:
            StreamClient(keyed_server.url, headers=headers)
        assert refused.value.response.status_code == 403
    with StreamClient(keyed_server.url, headers={"Authorization": f"Bearer {ENV_KEY}"}) as c:
        c.send(config())
        c.text(TEXT)
        c.send({"type": "end"})
        got = c.finish()
    assert got.close_code == 1000 and len(got.audio) > 22050 * 2


@pytest.mark.parametrize("how", ["flag", "env", "none"])
def test_bench_sends_the_key_it_is_given(keyed_server, quiet, how, monkeypatch, tmp_path,
                                         capsys) -> None:
    from voxflow.bench.options import API_KEY_ENV
    from voxflow.cli import main

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    argv = ["bench", "run", "--url", keyed_server.url, "--case", "line", "--concurrency", "1",
            "--warmup", "0", "--per-level", "5", "--out", str(tmp_path / "run.json")]
    if how == "flag":
        argv += ["--api-key", FILE_KEY]
    elif how == "env":
        monkeypatch.setenv(API_KEY_ENV, ENV_KEY)
    rc = main(argv)
    if how == "none":  # every request refused: the bench says why and stops
        assert rc != 0
        assert "{'http_401': 5}" in capsys.readouterr().err
        return
    assert rc == 0
    text = (tmp_path / "run.json").read_text()
    assert FILE_KEY not in text and ENV_KEY not in text  # the record keeps no key
    record = json.loads(text)
    stats = record["cases"]["line"][0]["repeats"][0]
    assert stats["ok"] == 5 and stats["errors"] == 0, stats
    assert [m["id"] for m in record["server"]["info"]["models"]["data"]][0] == "piper"
    assert FILE_KEY not in capsys.readouterr().out
