"""Saved CosyVoice3 voices (issue 11): name validation, the atomic write (nothing half-written
after any failure), loading the folder back, feature-file checks, and the recording path
(voxflow/models/cosyvoice3/saved_voices.py, prompt_audio.py, voice_admin.py)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import soundfile as sf  # noqa: E402
from cosyvoice3_fixtures import FIXTURES  # noqa: E402
from fake_prompt_models import speech_like, write_prompt_models  # noqa: E402

from voxflow import atomic_files  # noqa: E402
from voxflow.audio.encode import encode_audio  # noqa: E402
from voxflow.models.cosyvoice3 import prompt_audio, saved_voices  # noqa: E402
from voxflow.models.cosyvoice3.lm import TINY_LM_CONFIG  # noqa: E402
from voxflow.models.cosyvoice3.voice_admin import _safetensors_metadata, tensor_bytes  # noqa: E402
from voxflow.models.cosyvoice3.voices import Voice, VoiceError, load_voice, tiny_voice  # noqa: E402

S = TINY_LM_CONFIG.speech_token_size  # 81


@pytest.fixture(scope="module")
def tiny() -> Voice:
    return tiny_voice(FIXTURES)


def named(voice: Voice, name: str) -> Voice:
    from dataclasses import replace

    return replace(voice, name=name)


@pytest.mark.parametrize("name", ["alice", "Alice-2", "a", "v1.2_b", "x" * 64, "0day"])
def test_good_names(name: str) -> None:
    assert saved_voices.name_problem(name) is None


@pytest.mark.parametrize("name", ["", "x" * 65, "../x", "a/b", "a\\b", ".hidden", "-x", "_x",
                                  "a b", "é", "a..b", "a.safetensors", "a.tmp", "a\x00b", "a:b"])
def test_bad_names_say_why(name: str) -> None:
    assert saved_voices.name_problem(name)


def test_atomic_write_round_trips_and_leaves_no_temporary_file(tmp_path: Path, tiny: Voice):
    folder = tmp_path / "new" / "voices"  # created on the first save
    path = saved_voices.write_voice_atomic(named(tiny, "alice"), folder, model="cv",
                                           speech_token_size=S)
    assert path == folder / "alice.safetensors" and sorted(os.listdir(folder)) == [path.name]
    back = load_voice(path, speech_token_size=S)
    assert torch.equal(back.prompt_feat, tiny.prompt_feat) and back.prompt_text == tiny.prompt_text
    loaded = saved_voices.load_saved_voices(folder, model="cv", speech_token_size=S)
    assert list(loaded) == ["alice"]


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_else(
        tmp_path: Path, tiny: Voice, monkeypatch: pytest.MonkeyPatch):
    saved_voices.write_voice_atomic(named(tiny, "alice"), tmp_path, model="cv",
                                    speech_token_size=S)
    before = (tmp_path / "alice.safetensors").read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic_files.os, "replace", broken_replace)
    changed = named(tiny, "alice")
    changed = Voice(**{**changed.__dict__, "language": "fr"})
    with pytest.raises(OSError, match="disk full"):
        saved_voices.write_voice_atomic(changed, tmp_path, model="cv", speech_token_size=S)
    assert sorted(os.listdir(tmp_path)) == ["alice.safetensors"]
    assert (tmp_path / "alice.safetensors").read_bytes() == before


def test_an_invalid_voice_is_never_written(tmp_path: Path, tiny: Voice):
    bad = Voice(**{**named(tiny, "bad").__dict__,
                   "prompt_speech_tokens": tiny.prompt_speech_tokens + S})
    with pytest.raises(VoiceError, match="prompt_speech_tokens"):
        saved_voices.write_voice_atomic(bad, tmp_path / "v", model="cv", speech_token_size=S)
    assert not (tmp_path / "v").exists()


def test_loading_removes_leftover_temporary_files_and_names_an_invalid_file(
        tmp_path: Path, tiny: Voice):
    saved_voices.write_voice_atomic(named(tiny, "ok"), tmp_path, model="cv", speech_token_size=S)
    (tmp_path / ".ok.abc123.tmp").write_bytes(b"half a file")
    assert list(saved_voices.load_saved_voices(tmp_path, model="cv", speech_token_size=S)) == \
        ["ok"]
    assert not (tmp_path / ".ok.abc123.tmp").exists()
    (tmp_path / "broken.safetensors").write_bytes(b"garbage")
    with pytest.raises(VoiceError, match=r"broken\.safetensors.*remove the file"):
        saved_voices.load_saved_voices(tmp_path, model="cv", speech_token_size=S)


def test_a_saved_file_of_another_model_is_refused_at_load(tmp_path: Path, tiny: Voice):
    saved_voices.write_voice_atomic(named(tiny, "v"), tmp_path, model="other",
                                    speech_token_size=S)
    with pytest.raises(VoiceError, match="made for model 'other', not 'cv'"):
        saved_voices.load_saved_voices(tmp_path, model="cv", speech_token_size=S)
    with pytest.raises(VoiceError, match="6561 speech tokens"):
        saved_voices.check_model_metadata({"speech_token_size": "6561"}, model="cv",
                                          speech_token_size=S, source="upload")
    saved_voices.check_model_metadata({}, model="cv", speech_token_size=S, source="upload")


def test_the_default_folder_is_under_the_data_home(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_DATA_HOME", "/data")
    assert saved_voices.default_saved_voices_dir("cv") == Path("/data/voxflow/voices/cv")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert saved_voices.default_saved_voices_dir("cv") == \
        Path.home() / ".local" / "share" / "voxflow" / "voices" / "cv"


def test_feature_file_metadata_is_read_from_the_header_only(tiny: Voice):
    data = tensor_bytes(tiny.tensors(), {"language": "en", "prompt_text": "hi"})
    assert _safetensors_metadata(data) == {"language": "en", "prompt_text": "hi"}
    for bad in (b"", b"\x00" * 7, b"\xff" * 8 + b"{}", b"\x02\x00\x00\x00\x00\x00\x00\x00[]"):
        with pytest.raises(ValueError):
            _safetensors_metadata(bad)


def wav(samples: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, rate, format="WAV")
    return buf.getvalue()


def test_decode_reads_wav_with_soundfile_and_mp3_with_pyav():
    tone = speech_like(2.0, 24000)
    samples, rate = prompt_audio.decode_audio(wav(np.stack([tone, tone], 1), 24000))
    assert rate == 24000 and samples.shape == tone.shape  # stereo averaged to mono
    samples, rate = prompt_audio.decode_audio(encode_audio(tone, 24000, "mp3"))
    assert rate == 24000 and abs(samples.size - tone.size) < 24000 * 0.1
    with pytest.raises(prompt_audio.PromptAudioError, match="could not be decoded"):
        prompt_audio.decode_audio(b"\x00\x01" * 500)


@pytest.mark.parametrize(("samples", "rate", "message"), [
    (speech_like(0.5, 16000), 16000, "0.50 s long; at least 1 s"),
    (speech_like(30.5, 16000), 16000, "30.5 s long; at most 30 s"),
    (np.zeros(48000, np.float32), 24000, "silent"),
    (speech_like(2.0, 24000, level=0.004), 24000, "too quiet"),
    (speech_like(2.0, 8000), 8000, "8000 Hz"),
    (np.full(48000, np.nan, np.float32), 24000, "NaN"),
])
def test_unusable_recordings_are_refused(samples, rate, message):
    with pytest.raises(prompt_audio.PromptAudioError, match=message):
        prompt_audio.check_prompt_audio(samples, rate)


def test_resample_uses_soxr_to_the_asked_rate():
    out = prompt_audio.resample(speech_like(1.0, 44100), 44100, 16000)
    assert out.dtype == np.float32 and out.size == 16000


def test_missing_prompt_models_are_named(tmp_path: Path):
    assert prompt_audio.missing_prompt_models(None) == ["campplus.onnx",
                                                        "speech_tokenizer_v3.onnx"]
    (tmp_path / "campplus.onnx").write_bytes(b"")
    assert prompt_audio.missing_prompt_models(tmp_path) == ["speech_tokenizer_v3.onnx"]
    with pytest.raises(prompt_audio.MissingPromptModels, match="speech_tokenizer_v3.onnx"):
        prompt_audio.PromptEncoder.load(tmp_path)


def test_a_recording_becomes_aligned_prompt_features(tmp_path: Path):
    encoder = prompt_audio.PromptEncoder.load(write_prompt_models(tmp_path))
    voice = encoder.build_voice("rec", wav(speech_like(3.0, 44100), 44100), "Hi there.",
                                [1, 151646, 2], "en")
    p = voice.prompt_tokens
    assert p == 75  # 3 s at 25 tokens/s
    assert voice.prompt_feat.shape == (2 * p, 80) and voice.embedding.shape == (192,)
    assert voice.prompt_speech_tokens.dtype == torch.int32
    assert int(voice.prompt_speech_tokens.max()) < S
    saved_voices.write_voice_atomic(voice, tmp_path / "v", model="cv", speech_token_size=S)
