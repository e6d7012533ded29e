"""Saved voices through the real server (issue 11): ``POST /v1/audio/voices`` from a feature file
or a recording, the voice used for speech, listed, deleted, re-created and kept across a restart;
bad names, oversized, malformed or unusable uploads, a model that cannot clone, a voice of another
model, and a deleted voice used by a request already queued.

The server serves the tiny CosyVoice3 model (random weights) beside a tiny Piper voice, with the
prompt ONNX models replaced by stand-ins of the same interface (tests/fake_prompt_models.py).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import yaml
from conftest import LiveServer, start_server
from fake_prompt_models import speech_like, write_prompt_models

torch = pytest.importorskip("torch")
pytest.importorskip("tiktoken")

from voxflow.models.cosyvoice3.voice_admin import tensor_bytes  # noqa: E402
from voxflow.models.cosyvoice3.voices import tiny_voice  # noqa: E402

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3"
UPLOAD_LIMIT = 1_500_000  # bytes: a 30 s 16-bit 24 kHz WAV (1.44 MB) fits, 40 s does not


def features_file(**metadata: str) -> bytes:
    """The tiny fixture voice as an uploadable prompt-feature file (spec §9.5)."""
    voice = tiny_voice(FIXTURES)
    return tensor_bytes(voice.tensors(), {**voice.metadata(), **metadata})


def wav(samples: np.ndarray, rate: int = 24000) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def write_config(folder: Path, tiny_piper: Path, voices_dir: Path,
                 prompt_models: Path | None, voice_aliases: dict | None = None) -> Path:
    options = {"weights": "tiny_fixture", "saved_voices_dir": str(voices_dir)}
    if prompt_models is not None:
        options["prompt_models_dir"] = str(prompt_models)
    path = folder / f"voices-{'onnx' if prompt_models else 'plain'}.yaml"
    path.write_text(yaml.safe_dump({
        "server": {"max_voice_upload_bytes": UPLOAD_LIMIT},
        "engine": {"max_inflight_requests": 1, "max_queued_requests": 8},
        "models": [
            {"name": "cosyvoice3", "family": "cosyvoice3", "options": options,
             "voice_aliases": voice_aliases or {}},
            {"name": "piper", "family": "piper", "voice_aliases": {},
             "options": {"voices_dir": str(tiny_piper), "include_default_voice": False,
                         "default_voice": "tiny"}},
        ],
    }))
    return path


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("saved_voices")


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_voice_dir: Path, voices_dir: Path) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("voices_server")
    models = write_prompt_models(folder / "prompt_models")
    live = start_server(config=str(write_config(folder, tiny_voice_dir, voices_dir, models)))
    yield live
    live.stop()


def create(url: str, name: str, model: str = "cosyvoice3", *, features: bytes | None = None,
           audio: bytes | None = None, text: str | None = None,
           **fields: str) -> httpx.Response:
    data = {"name": name, "model": model, **fields}
    if text is not None:
        data["text"] = text
    files = {}
    if features is not None:
        files["features"] = ("voice.safetensors", features, "application/octet-stream")
    if audio is not None:
        files["audio"] = ("prompt.wav", audio, "audio/wav")
    return httpx.post(f"{url}/v1/audio/voices", data=data, files=files or None, timeout=60)


def delete(url: str, voice: str, **params: str) -> httpx.Response:
    return httpx.delete(f"{url}/v1/audio/voices/{voice}", params=params, timeout=30)


def speak(url: str, voice: str, text: str = "A saved voice.", **extra) -> httpx.Response:
    body = {"model": "cosyvoice3", "voice": voice, "input": text, "response_format": "pcm",
            "seed": 3, **extra}
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)


def listed(url: str, model: str | None = None) -> list[str]:
    params = {"model": model} if model else {}
    data = httpx.get(f"{url}/v1/audio/voices", params=params).json()["data"]
    return [v["id"] for v in data if v["model"] == "cosyvoice3"]


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_a_voice_from_a_feature_file_is_used_listed_deleted_and_re_created(server, voices_dir):
    r = create(server.url, "alice", features=features_file(), language="en")
    assert r.status_code == 200, r.text
    entry = r.json()
    assert entry["id"] == "random-alice"  # random weights: served ids say so (spec §9.4)
    assert entry["model"] == "cosyvoice3" and entry["language"] == "en" and entry["saved"]
    assert "alice.safetensors" in files_in(voices_dir)

    speech = speak(server.url, "random-alice")
    assert speech.status_code == 200, speech.text
    assert speech.headers["x-voxflow-weights"] == "random"
    assert len(speech.content) > 0
    builtin = speak(server.url, "random-tiny")
    assert builtin.content == speech.content  # same prompt features, same seed: same audio
    assert "random-alice" in listed(server.url) and "random-alice" in listed(server.url,
                                                                             "cosyvoice3")
    entries = httpx.get(f"{server.url}/v1/audio/voices?model=cosyvoice3").json()["data"]
    saved = {e["id"]: e["saved"] for e in entries}
    assert saved["random-alice"] is True and saved["random-tiny"] is False
    models = httpx.get(f"{server.url}/v1/models/cosyvoice3").json()
    assert "random-alice" in models["voices"]

    gone = delete(server.url, "random-alice")
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    assert "random-alice" not in listed(server.url)
    assert "alice.safetensors" not in files_in(voices_dir)
    assert error_of(speak(server.url, "random-alice"), 400)["code"] == "voice_not_found"
    assert error_of(delete(server.url, "random-alice"), 404)["code"] == "voice_not_found"

    again = create(server.url, "alice", features=features_file())
    assert again.status_code == 200, again.text
    assert speak(server.url, "random-alice").content == speech.content
    assert error_of(create(server.url, "alice", features=features_file()), 409)["code"] == \
        "voice_exists"
    assert [f for f in files_in(voices_dir) if not f.endswith(".safetensors")] == []


def test_built_in_voices_cannot_be_deleted(server):
    error = error_of(delete(server.url, "random-tiny"), 403)
    assert error["code"] == "voice_not_deletable" and "built-in" in error["message"]
    piper = error_of(delete(server.url, "tiny", model="piper"), 403)
    assert piper["code"] == "voice_not_deletable"
    assert "random-tiny" in listed(server.url)


@pytest.mark.parametrize("name", ["../evil", "a/b", "a\\b", ".hidden", "x" * 65, "two words",
                                  "é", "-dash", "a..b", "x.safetensors"])
def test_a_bad_name_is_a_400_and_nothing_is_written(server, voices_dir, name):
    before = files_in(voices_dir)
    error = error_of(create(server.url, name, features=features_file()), 400)
    assert error["param"] == "name" and error["code"] == "invalid_voice_name"
    assert files_in(voices_dir) == before
    assert not (voices_dir.parent / "evil.safetensors").exists()


def test_a_missing_name_or_model_is_a_400(server):
    r = httpx.post(f"{server.url}/v1/audio/voices", data={"model": "cosyvoice3"},
                   files={"features": ("v", features_file(), "application/octet-stream")})
    assert error_of(r, 400)["param"] == "name"
    r = httpx.post(f"{server.url}/v1/audio/voices", data={"name": "bob"},
                   files={"features": ("v", features_file(), "application/octet-stream")})
    assert error_of(r, 400)["param"] == "model"


def test_an_upload_over_the_limit_is_a_413_declared_or_streamed(server, voices_dir):
    big = wav(speech_like(40.0))  # 1.92 MB > 1.5 MB
    before = files_in(voices_dir)
    error = error_of(create(server.url, "big", audio=big, text="Too long."), 413)
    assert error["code"] == "payload_too_large" and "1,500,000" in error["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536]

    r = httpx.post(f"{server.url}/v1/audio/voices", content=chunks(),
                   headers={"content-type": "multipart/form-data; boundary=x"}, timeout=30)
    assert error_of(r, 413)["code"] == "payload_too_large"
    assert files_in(voices_dir) == before
    assert speak(server.url, "random-tiny").status_code == 200


def test_a_voice_of_another_model_is_refused(server, voices_dir):
    before = files_in(voices_dir)
    other = features_file(speech_token_size="6561")
    error = error_of(create(server.url, "fullsize", features=other), 400)
    assert "6561" in error["message"] and error["param"] == "features"
    named = features_file(voxflow_model="cosyvoice3-large")
    assert "cosyvoice3-large" in error_of(create(server.url, "named", features=named),
                                          400)["message"]
    voice = tiny_voice(FIXTURES)
    tensors = {**voice.tensors(), "prompt_speech_tokens": voice.prompt_speech_tokens + 100}
    tokens = tensor_bytes(tensors, voice.metadata())  # tokens of a model with more than 81
    assert "prompt_speech_tokens" in error_of(create(server.url, "wide", features=tokens),
                                              400)["message"]
    assert files_in(voices_dir) == before


def test_models_that_do_not_clone_answer_400_naming_the_model(server):
    error = error_of(create(server.url, "bob", model="piper", features=features_file()), 400)
    assert error["param"] == "model" and "'piper'" in error["message"]
    assert error["code"] == "voice_cloning_unsupported" and "cosyvoice3" in error["message"]
    assert error_of(create(server.url, "bob", model="nope", features=features_file()),
                    404)["code"] == "model_not_found"


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"features": b"not a safetensors file"}, "features"),
    ({"features": b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"}, "features"),
    ({"audio": b"RIFF....not really a wave", "text": "Hi."}, "audio"),
    ({"audio": b"x" * 1000, "text": "Hi."}, "audio"),
    ({"audio": "SHORT", "text": "Hi."}, "audio"),
    ({"audio": "LONG", "text": "Hi."}, "audio"),
    ({"audio": "SILENT", "text": "Hi."}, "audio"),
    ({"audio": "OK", "text": "   "}, "text"),
    ({"audio": "OK"}, "text"),
    ({"audio": "OK", "features": "OK", "text": "Hi."}, "audio"),
    ({}, None),  # no file: httpx sends a urlencoded form, not multipart
    ({"features": "OK", "text": "Hi."}, "text"),
    ({"features": "OK", "colour": "blue"}, "colour"),
    ({"features": "OK", "language": "not a tag!"}, "language"),
])
def test_unusable_uploads_are_400s_and_leave_nothing_on_disk(server, voices_dir, kwargs, param):
    payloads = {"SHORT": wav(speech_like(0.5)), "LONG": wav(speech_like(31.0, rate=16000),
                                                            16000),
                "SILENT": wav(np.zeros(48000, np.float32)), "OK": wav(speech_like(3.0))}
    kwargs = {k: payloads.get(v, v) if isinstance(v, str) and k in ("audio",) else v
              for k, v in kwargs.items()}
    if kwargs.get("features") == "OK":
        kwargs["features"] = features_file()
    before = files_in(voices_dir)
    error = error_of(create(server.url, "carol", **kwargs), 400)
    assert error["param"] == param
    assert files_in(voices_dir) == before
    assert "random-carol" not in listed(server.url)


def test_a_body_that_is_not_multipart_is_a_400(server):
    r = httpx.post(f"{server.url}/v1/audio/voices", json={"name": "x", "model": "cosyvoice3"})
    assert error_of(r, 400)["code"] == "invalid_body"
    r = httpx.post(f"{server.url}/v1/audio/voices", content=b"--x\r\nbroken",
                   headers={"content-type": "multipart/form-data; boundary=x"})
    assert error_of(r, 400)["code"] in ("invalid_body", "missing_required_parameter")
    r = httpx.post(f"{server.url}/v1/audio/voices", content=b"garbage",
                   headers={"content-type": "multipart/form-data"})
    assert error_of(r, 400)["code"] == "invalid_body"
    assert speak(server.url, "random-tiny").status_code == 200


def test_a_voice_from_a_recording_with_the_prompt_models(server, voices_dir):
    r = create(server.url, "dave", audio=wav(speech_like(3.0, rate=44100), 44100),
               text="This is my voice.", language="en")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "random-dave"
    speech = speak(server.url, "random-dave", "Hello from Dave.")
    assert speech.status_code == 200 and speech.headers["x-voxflow-weights"] == "random"
    assert np.frombuffer(speech.content, "<i2").size > 0
    assert delete(server.url, "random-dave").status_code == 200


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_deleted_voice_still_serves_the_request_queued_with_it(server, voices_dir):
    # max_inflight_requests is 1: `first` runs while `queued` waits for admission. The voice is
    # deleted while `queued` waits; it was admitted with the voice, so it finishes with it (same
    # bytes as before the delete), while new requests get a 400 and the name stays taken (409)
    # until it ends.
    assert create(server.url, "erin", features=features_file()).status_code == 200
    reference = speak(server.url, "random-erin", "Queued words.")
    assert reference.status_code == 200
    admission = server.engine.admission
    results: dict[str, httpx.Response] = {}

    def run(key: str, voice: str, text: str) -> None:
        results[key] = speak(server.url, voice, text)

    # ~5 s on the tiny model here: far longer than the few milliseconds the checks below need
    long_text = " ".join(["This long request keeps the only slot busy for a while."] * 15)
    first = threading.Thread(target=run, args=("first", "random-tiny", long_text))
    first.start()
    wait_for(lambda: admission.inflight == 1)
    queued = threading.Thread(target=run, args=("queued", "random-erin", "Queued words."))
    queued.start()
    wait_for(lambda: admission.waiting == 1)

    assert delete(server.url, "random-erin").status_code == 200
    assert "erin.safetensors" not in files_in(voices_dir)
    assert "random-erin" not in listed(server.url)
    still_running = "queued" not in results
    if still_running:
        assert error_of(create(server.url, "erin", features=features_file()), 409)["code"] == \
            "voice_in_use"
    first.join(timeout=120)
    queued.join(timeout=120)
    assert still_running, "the first request ended before the delete: the test proves nothing"
    assert results["first"].status_code == 200
    assert results["queued"].status_code == 200, results["queued"].text
    assert results["queued"].content == reference.content
    assert error_of(speak(server.url, "random-erin"), 400)["code"] == "voice_not_found"
    family = server.engine.family("cosyvoice3")
    assert "random-erin" not in family.voice_models  # freed by the last holder
    assert create(server.url, "erin", features=features_file()).status_code == 200


def test_saved_voices_survive_a_restart_and_audio_needs_the_prompt_models(
        server, tmp_path, tiny_voice_dir, voices_dir):
    assert create(server.url, "frank", features=features_file()).status_code in (200, 409)
    first_audio = speak(server.url, "random-frank").content
    config = write_config(tmp_path, tiny_voice_dir, voices_dir, prompt_models=None,
                          voice_aliases={"alloy": "random-frank"})
    second = start_server(config=str(config))
    try:
        assert "random-frank" in listed(second.url)
        assert speak(second.url, "alloy").content == first_audio
        alias = error_of(delete(second.url, "random-frank"), 403)
        assert alias["code"] == "voice_not_deletable" and "alloy" in alias["message"]
        again = speak(second.url, "random-frank")
        assert again.status_code == 200 and again.content == first_audio
        error = error_of(create(second.url, "gina", audio=wav(speech_like(3.0)),
                                text="My voice."), 400)
        assert "campplus.onnx" in error["message"] and "speech_tokenizer_v3.onnx" in \
            error["message"] and error["param"] == "audio"
        made = create(second.url, "gina", features=features_file())
        assert made.status_code == 200, made.text
    finally:
        second.stop()


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "memory+disk"])
def test_deleting_a_voice_drops_its_cached_audio_and_a_re_created_one_misses(server,
                                                                               monkeypatch,
                                                                               tmp_path,
                                                                               on_disk):
    from voxflow.server.audio_cache import AudioCache
    from voxflow.server.disk_cache import DiskCache

    disk = DiskCache(tmp_path, 64 << 20, 4 << 20, "test") if on_disk else None
    cache = AudioCache(max_bytes=8 << 20, max_entry_bytes=4 << 20, disk=disk)
    # the module's server has none (and undoing the patch deletes starlette State attributes)
    monkeypatch.setattr(server.app.state, "audio_cache", cache, raising=False)
    assert create(server.url, "carol", features=features_file()).status_code == 200
    first = speak(server.url, "random-carol", stream=False)
    again = speak(server.url, "random-carol", stream=False)
    builtin = speak(server.url, "random-tiny", stream=False)
    assert [r.headers["x-voxflow-cache"] for r in (first, again, builtin)] == \
        ["miss", "hit", "miss"]
    assert again.content == first.content and len(cache) == 2
    assert cache.flush()
    assert len(list(tmp_path.glob("*.vfc"))) == (2 if on_disk else 0)
    assert delete(server.url, "random-carol").status_code == 200
    assert len(cache) == 1 and cache.nbytes == len(builtin.content)  # the built-in stays
    if disk is not None:  # its file went too; the built-in's stays
        assert len(disk) == 1 and len(list(tmp_path.glob("*.vfc"))) == 1
    assert create(server.url, "carol", features=features_file()).status_code == 200
    after = speak(server.url, "random-carol", stream=False)
    assert after.headers["x-voxflow-cache"] == "miss" and after.content == first.content
    assert delete(server.url, "random-carol").status_code == 200
    cache.close()
