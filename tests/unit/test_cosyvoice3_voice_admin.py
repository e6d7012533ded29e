"""The tiny CosyVoice3 family's voice API without a server (models/cosyvoice3/voice_admin.py):
create from a feature file, hold / delete / release (a deleted voice stays loaded for the
requests that hold it), the refusals, and saved voices read back by a new family."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tiktoken")

from cosyvoice3_fixtures import FIXTURES  # noqa: E402

from voxflow.errors import (  # noqa: E402
    ConflictError,
    InvalidRequestError,
    VoiceForbiddenError,
    VoiceNotFoundError,
)
from voxflow.models.cloning import VoiceCloning, VoiceUpload  # noqa: E402
from voxflow.models.cosyvoice3.model import CosyVoice3Family  # noqa: E402
from voxflow.models.cosyvoice3.settings import CosyVoice3Settings  # noqa: E402
from voxflow.models.cosyvoice3.voice_admin import tensor_bytes  # noqa: E402
from voxflow.models.cosyvoice3.voices import VoiceError, tiny_voice  # noqa: E402


def features() -> bytes:
    voice = tiny_voice(FIXTURES)
    return tensor_bytes(voice.tensors(), voice.metadata())


def family(folder: Path, name: str = "cv") -> CosyVoice3Family:
    return CosyVoice3Family(name, CosyVoice3Settings(saved_voices_dir=folder))


@pytest.fixture
def fam(tmp_path: Path) -> CosyVoice3Family:
    return family(tmp_path / "voices")


def test_a_created_voice_is_served_saved_and_read_back(fam: CosyVoice3Family, tmp_path: Path):
    assert isinstance(fam, VoiceCloning)
    vid = fam.create_voice(VoiceUpload("alice", features=features(), language="en"))
    assert vid == "random-alice" and vid in fam.voices and fam.voices[vid].language == "en"
    assert fam.saved_voice_ids() == ["random-alice"]
    assert fam.flow_prompt(vid).tokens == 7
    again = family(tmp_path / "voices", name="cv")
    assert again.saved_voice_ids() == ["random-alice"] and "random-alice" in again.voices
    with pytest.raises(VoiceError, match="made for model 'cv', not 'other'"):
        family(tmp_path / "voices", name="other")


def test_a_held_voice_stays_loaded_after_delete_until_released(fam: CosyVoice3Family):
    vid = fam.create_voice(VoiceUpload("bob", features=features()))
    release = fam.hold_voice(vid)
    fam.delete_voice(vid)
    assert vid not in fam.voices and fam.saved_voice_ids() == []  # new requests: refused
    assert vid in fam.voice_models and fam.flow_prompt(vid) is not None  # held: still loaded
    with pytest.raises(ConflictError, match="still speak with it") as info:
        fam.create_voice(VoiceUpload("bob", features=features()))
    assert info.value.code == "voice_in_use" and info.value.status == 409
    release()
    release()  # a second call changes nothing
    assert vid not in fam.voice_models
    assert fam.create_voice(VoiceUpload("bob", features=features())) == vid


def test_an_unheld_voice_is_freed_at_once(fam: CosyVoice3Family):
    vid = fam.create_voice(VoiceUpload("carl", features=features()))
    fam.hold_voice(vid)()  # held and released before the delete
    fam.delete_voice(vid)
    assert vid not in fam.voice_models and not (fam.saved_dir / "carl.safetensors").exists()


def test_refusals(fam: CosyVoice3Family):
    with pytest.raises(VoiceForbiddenError, match="built-in"):
        fam.delete_voice("random-tiny")
    with pytest.raises(VoiceNotFoundError):
        fam.delete_voice("random-nobody")
    with pytest.raises(InvalidRequestError, match="'name'") as info:
        fam.create_voice(VoiceUpload("../x", features=features()))
    assert info.value.code == "invalid_voice_name"
    with pytest.raises(ConflictError, match="already has"):
        fam.create_voice(VoiceUpload("tiny", features=features()))  # served as random-tiny
    with pytest.raises(InvalidRequestError, match="campplus.onnx") as info:
        fam.create_voice(VoiceUpload("dan", audio=b"RIFF", text="Hi."))
    assert info.value.param == "audio"
    assert not fam.saved_dir.exists()  # nothing was ever written


def test_the_default_voice_cannot_be_deleted(tmp_path: Path):
    first = family(tmp_path)
    first.create_voice(VoiceUpload("eve", features=features()))
    fam = CosyVoice3Family("cv", CosyVoice3Settings(saved_voices_dir=tmp_path,
                                                    default_voice="random-eve"))
    with pytest.raises(VoiceForbiddenError, match="default voice"):
        fam.delete_voice("random-eve")


def test_an_invalid_saved_file_stops_start_up_naming_it(tmp_path: Path):
    (tmp_path / "broken.safetensors").write_bytes(b"not a voice")
    with pytest.raises(VoiceError, match=r"broken\.safetensors.*remove the file"):
        family(tmp_path)


@pytest.mark.parametrize(("where", "error", "status", "code", "cause"), [
    ("fsync", OSError(28, "No space left on device"), 507, "insufficient_storage",
     "No space left on device (the disk is full)."),
    ("mkstemp", OSError(30, "Read-only file system"), 500, "storage_failed",
     "Read-only file system."),
])
def test_a_voice_that_cannot_be_written_names_the_cause_and_leaves_nothing(
        fam: CosyVoice3Family, monkeypatch, where, error, status, code, cause):
    from voxflow import atomic_files
    from voxflow.errors import StorageError

    def fail(*args, **kwargs):
        raise error

    fam.saved_dir.mkdir(parents=True, exist_ok=True)
    target = atomic_files.os if where == "fsync" else atomic_files.tempfile
    monkeypatch.setattr(target, where, fail)
    with pytest.raises(StorageError) as caught:
        fam.create_voice(VoiceUpload("carol", features=features()))
    exc = caught.value
    assert (exc.status, exc.code) == (status, code)
    assert exc.message == f"Cannot save voice 'carol' in {fam.saved_dir}: {cause}"
    assert list(fam.saved_dir.iterdir()) == []  # no file, not even a temporary one
    assert "random-carol" not in fam.voices and fam.saved_voice_ids() == []
