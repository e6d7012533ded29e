"""CosyVoice3 voice files (voxflow/models/cosyvoice3/voices.py, spec §9.5, §9.4, §11)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import FIXTURES, tensors  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from voxflow.models.cosyvoice3 import voices  # noqa: E402
from voxflow.models.cosyvoice3.lm import TINY_LM_CONFIG  # noqa: E402

S = TINY_LM_CONFIG.speech_token_size  # 81


@pytest.fixture(scope="module")
def tiny() -> voices.Voice:
    return voices.tiny_voice(FIXTURES)


def test_tiny_voice_is_the_fixture_prompt(tiny: voices.Voice) -> None:
    flow = tensors("flow_tiny_fixtures.safetensors")
    lm = tensors("lm_tiny_fixtures.safetensors")
    assert tiny.prompt_tokens == 7
    assert tiny.prompt_speech_tokens.tolist() == [33, 30, 12, 65, 35, 7, 33]
    assert tiny.prompt_speech_tokens.dtype == torch.int32
    assert torch.equal(tiny.prompt_feat, flow["in.prompt_feat"][0])
    assert tiny.prompt_feat.shape == (14, 80)
    assert torch.equal(tiny.embedding, flow["in.embedding"][0])
    assert torch.equal(tiny.prompt_text_ids, lm["in.prompt_text"][0])
    assert 151646 in tiny.prompt_text_ids.tolist()
    assert voices.voice_id(tiny.name, random_weights=True) == "random-tiny"
    fp = tiny.flow_prompt()
    assert fp.tokens == 7
    assert torch.equal(fp.prompt_feat, flow["in.prompt_feat"])
    assert torch.equal(fp.prompt_token, flow["in.prompt_token"].to(torch.int32))


def test_voice_id() -> None:
    assert voices.voice_id("anna", random_weights=True) == "random-anna"
    assert voices.voice_id("random-anna", random_weights=True) == "random-anna"
    assert voices.voice_id("anna", random_weights=False) == "anna"


def test_round_trip_and_dir(tiny: voices.Voice, tmp_path: Path) -> None:
    voices.save_voice(tiny, tmp_path / "anna.safetensors", speech_token_size=S)
    (tmp_path / "notes.txt").write_text("not a voice")
    loaded = voices.load_voices_dir(tmp_path, speech_token_size=S, random_weights=True)
    assert list(loaded) == ["random-anna"]
    v = loaded["random-anna"]
    assert v.name == "anna" and v.language == "und" and v.prompt_text == tiny.prompt_text
    for key, t in tiny.tensors().items():
        assert torch.equal(v.tensors()[key], t) and v.tensors()[key].dtype == t.dtype
    plain = voices.load_voices_dir(tmp_path, speech_token_size=S, random_weights=False)
    assert list(plain) == ["anna"]


def _write(tmp_path: Path, tiny: voices.Voice, meta: dict[str, str] | None = None,
           **changes: object) -> Path:
    t: dict[str, object] = dict(tiny.tensors())
    for k, v in changes.items():
        if v is None:
            del t[k]
        else:
            t[k] = v
    path = tmp_path / "bad.safetensors"
    save_file({k: v.contiguous() for k, v in t.items()},
              str(path), metadata=tiny.metadata() if meta is None else meta)
    return path


BROKEN = [
    ({"prompt_feat": None}, "prompt_feat: missing"),
    ({"extra": torch.zeros(1)}, "extra: unexpected key"),
    ({"prompt_speech_tokens": torch.tensor([1, 2], dtype=torch.int64)},
     "prompt_speech_tokens: dtype torch.int64, expected int32"),
    ({"prompt_speech_tokens": torch.zeros(0, dtype=torch.int32)},
     r"prompt_speech_tokens: shape \[0\], expected \[P\] with P >= 1"),
    ({"prompt_speech_tokens": torch.tensor([1, 2, 3, 4, 5, 6, 81], dtype=torch.int32)},
     r"prompt_speech_tokens: values in \[1, 81\], expected \[0, 81\)"),
    ({"prompt_speech_tokens": torch.tensor([1, 2, 3, 4, 5, 6, -1], dtype=torch.int32)},
     r"prompt_speech_tokens: values in \[-1, 6\]"),
    ({"prompt_feat": torch.zeros(13, 80)},
     r"prompt_feat: shape \[13, 80\], expected \[2P, 80\] = \[14, 80\] \(P = 7\)"),
    ({"prompt_feat": torch.zeros(14, 80, dtype=torch.float64)},
     "prompt_feat: dtype torch.float64, expected float32"),
    ({"prompt_feat": torch.full((14, 80), float("nan"))}, "prompt_feat: holds NaN"),
    ({"embedding": torch.zeros(1, 192)},
     r"embedding: shape \[1, 192\], expected \[192\]"),
    ({"embedding": torch.full((192,), float("inf"))}, "embedding: holds NaN or infinity"),
    ({"prompt_text_ids": torch.tensor([1, 2, 3], dtype=torch.int32)},
     r"prompt_text_ids: no <\|endofprompt\|> \(151646\)"),
    ({"prompt_text_ids": torch.tensor([151646, 151936], dtype=torch.int32)},
     r"prompt_text_ids: values in \[151646, 151936\], expected \[0, 151936\)"),
    ({"prompt_text_ids": torch.tensor([151646], dtype=torch.int64)},
     "prompt_text_ids: dtype torch.int64, expected int32"),
]


@pytest.mark.parametrize(("changes", "message"), BROKEN)
def test_broken_files(tiny: voices.Voice, tmp_path: Path, changes: dict[str, object],
                      message: str) -> None:
    path = _write(tmp_path, tiny, **changes)
    with pytest.raises(voices.VoiceError, match=f"^voice {path}: {message}"):
        voices.load_voice(path, speech_token_size=S)


@pytest.mark.parametrize(("meta", "message"), [
    ({"prompt_text": "x"}, "language: missing metadata string"),
    ({"language": "en"}, "prompt_text: missing metadata string"),
    ({"language": " ", "prompt_text": "x"}, "language: empty"),
])
def test_broken_metadata(tiny: voices.Voice, tmp_path: Path, meta: dict[str, str],
                         message: str) -> None:
    path = _write(tmp_path, tiny, meta=meta)
    with pytest.raises(voices.VoiceError, match=f"^voice {path}: {message}"):
        voices.load_voice(path, speech_token_size=S)


def test_not_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(voices.VoiceError, match=f"^voice {path}: not a readable safetensors"):
        voices.load_voice(path, speech_token_size=S)
    missing = tmp_path / "none.safetensors"
    with pytest.raises(voices.VoiceError, match=f"^voice {missing}: not a readable"):
        voices.load_voice(missing, speech_token_size=S)


def test_a_bad_voice_fails_the_directory(tiny: voices.Voice, tmp_path: Path) -> None:
    voices.save_voice(tiny, tmp_path / "good.safetensors", speech_token_size=S)
    _write(tmp_path, tiny, prompt_text_ids=torch.tensor([5], dtype=torch.int32))
    with pytest.raises(voices.VoiceError, match="bad.safetensors: prompt_text_ids: no"):
        voices.load_voices_dir(tmp_path, speech_token_size=S, random_weights=True)
    with pytest.raises(voices.VoiceError, match="not a directory"):
        voices.load_voices_dir(tmp_path / "nope", speech_token_size=S, random_weights=True)


def test_save_refuses_an_invalid_voice(tiny: voices.Voice, tmp_path: Path) -> None:
    bad = dataclasses.replace(tiny, embedding=torch.zeros(191))
    path = tmp_path / "x.safetensors"
    with pytest.raises(voices.VoiceError, match="embedding: shape"):
        voices.save_voice(bad, path, speech_token_size=S)
    assert not path.exists()


def test_full_size_token_range(tiny: voices.Voice, tmp_path: Path) -> None:
    # token 80 is valid at S = 6561 but a tiny S = 81 voice file is checked against its S
    path = _write(tmp_path, tiny,
                  prompt_speech_tokens=torch.tensor([6000] * 7, dtype=torch.int32))
    assert voices.load_voice(path, speech_token_size=6561).prompt_tokens == 7
    with pytest.raises(voices.VoiceError, match="expected \\[0, 81\\)"):
        voices.load_voice(path, speech_token_size=S)
