"""Issue 40 item 4: a model file that cannot be read fails with one message naming the file
and what is wrong, for every family's kind of file (ONNX, safetensors, torch checkpoints,
JSON manifests, .nemo archives); start-up logs it as one line (the subprocess check is in
tests/integration/test_graceful_stop.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxflow.models.files import ModelFileError, reading


def garbage(path: Path, size: int = 4096) -> Path:
    path.write_bytes(bytes((i * 131 + 7) % 256 for i in range(size)))
    return path


def test_reading_names_the_file_and_the_first_line_of_the_cause(tmp_path):
    path = tmp_path / "x.bin"
    with pytest.raises(ModelFileError) as caught:
        with reading(path, "test file"):
            raise ValueError("bad header\nsecond line")
    assert str(caught.value) == f"test file {path} cannot be read: ValueError: bad header"
    with pytest.raises(ModelFileError, match="^inner$"):  # passes unchanged
        with reading(path, "outer"):
            raise ModelFileError("inner")


def test_a_corrupt_piper_onnx(tmp_path):
    from voxflow.models.piper.loader import prepare_graph

    path = garbage(tmp_path / "broken.onnx")
    with pytest.raises(ModelFileError, match=rf"^Piper voice model {path} cannot be read: "
                       "DecodeError: Error parsing message"):
        prepare_graph(path)


def test_a_corrupt_cosyvoice3_safetensors_and_checkpoint(tmp_path):
    pytest.importorskip("torch")
    from voxflow.models.cosyvoice3.loader import read_checkpoint, read_safetensors

    path = garbage(tmp_path / "flow.safetensors")
    with pytest.raises(ModelFileError, match=rf"^CosyVoice3 checkpoint {path} cannot be read"):
        read_safetensors(path)
    path = garbage(tmp_path / "llm.pt")
    with pytest.raises(ModelFileError, match=rf"^CosyVoice3 checkpoint {path} cannot be read"):
        read_checkpoint(path)


@pytest.mark.parametrize(("module", "kind"), [
    ("voxflow.models.cosyvoice3.loader", "CosyVoice3 manifest"),
    ("voxflow.models.nanocodec.loader", "NanoCodec manifest"),
    ("voxflow.models.magpie.loader", "MagpieTTS manifest"),
])
def test_a_corrupt_json_manifest(tmp_path, module, kind):
    pytest.importorskip("torch")
    import importlib

    path = tmp_path / "manifest.json"
    path.write_text('{"decoder_keys": [', encoding="utf-8")
    with pytest.raises(ModelFileError, match=rf"^{kind} {path} cannot be read: "
                       "JSONDecodeError"):
        importlib.import_module(module).read_manifest(path)


def test_a_corrupt_nemo_archive_names_the_file(tmp_path):
    from voxflow.models.nemo_archive import NemoArchiveError, read_nemo

    path = garbage(tmp_path / "magpie.nemo")
    with pytest.raises(NemoArchiveError, match=rf"^{path}: not a .nemo \(tar\) archive"):
        read_nemo(path)
