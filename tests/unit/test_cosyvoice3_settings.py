"""CosyVoice3 settings (voxflow/models/cosyvoice3/settings.py, spec §9.3, §10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from voxflow.models.cosyvoice3.settings import CosyVoice3Settings
from voxflow.settings_doc import field_rows


def _error(**options: Any) -> str:
    with pytest.raises(ValidationError) as info:
        CosyVoice3Settings.model_validate(options)
    return str(info.value)


def _checkpoint(tmp_path: Path, files: tuple[str, ...] = ("llm.pt", "flow.pt", "hift.pt")) -> Path:
    for name in files:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_defaults_tiny() -> None:
    s = CosyVoice3Settings()
    assert s.weights == "tiny_fixture" and s.random_weights
    assert (s.static_chunk_size, s.hop_len, s.max_hop_len) == (10, 5, 20)
    assert s.stream_scale_factor == 2 and s.token2wav_mode == "streaming"
    assert s.min_len_rule == "mask_all_stop"
    assert s.bistream_rule == "corrected" and s.max_instruction_chars == 1000
    assert s.flow_max_batch_size == 8 and s.capture_enabled
    assert len(s.flow_capture_frame_buckets) == 20
    assert s.flow_capture_batch_sizes == (1, 2, 3, 4, 6, 8)


def test_full_size_hops(tmp_path: Path) -> None:
    s = CosyVoice3Settings(weights="full_random", device="cuda")
    assert s.random_weights and (s.static_chunk_size, s.hop_len, s.max_hop_len) == (50, 25, 100)
    real = CosyVoice3Settings.model_validate({"weights": str(_checkpoint(tmp_path))})
    assert isinstance(real.weights, Path) and not real.random_weights
    assert real.hop_len == 25


def test_hop_must_be_half_the_chunk() -> None:
    assert "token_hop_len 25 must be static_chunk_size/2 = 5 for tiny_fixture weights" in _error(
        token_hop_len=25)
    assert "token_hop_len 5 must be static_chunk_size/2 = 25 for full_random weights" in _error(
        weights="full_random", token_hop_len=5)
    assert CosyVoice3Settings(token_hop_len=5, token_max_hop_len=20).max_hop_len == 20
    assert "token_max_hop_len 12 must be a multiple of token_hop_len 5" in _error(
        token_max_hop_len=12)
    assert "token_max_hop_len 3 must be a multiple" in _error(token_max_hop_len=3)


def test_defaults_match_the_modules() -> None:
    pytest.importorskip("torch")
    from voxflow.models.cosyvoice3 import bistream, sampling, token2wav
    from voxflow.models.cosyvoice3.loader import CHECKPOINT_FILES
    from voxflow.models.cosyvoice3.settings import CHECKPOINT_FILES as OURS

    s = CosyVoice3Settings(weights="full_random")
    assert (s.top_p, s.top_k, s.ras_win, s.ras_tau) == (
        sampling.RAS_TOP_P, sampling.RAS_TOP_K, sampling.RAS_WIN_SIZE, sampling.RAS_TAU_R)
    assert (s.hop_len, s.max_hop_len, s.stream_scale_factor) == (
        token2wav.TOKEN_HOP_LEN, token2wav.TOKEN_MAX_HOP_LEN, token2wav.STREAM_SCALE_FACTOR)
    tiny = token2wav.Token2WavConfig.tiny()
    assert (CosyVoice3Settings().hop_len, CosyVoice3Settings().max_hop_len) == (
        tiny.token_hop_len, tiny.token_max_hop_len)
    assert set(sampling.MIN_LEN_RULES) == {"mask_all_stop", "reference_sos_only"}
    assert set(bistream.BISTREAM_RULES) == {"corrected", "reference"}  # = the setting's values
    assert OURS == CHECKPOINT_FILES


def test_unknown_and_bad_values() -> None:
    assert "Extra inputs are not permitted" in _error(hop=5)
    assert "token2wav_mode" in _error(token2wav_mode="realtime")
    assert "min_len_rule" in _error(min_len_rule="none")
    assert "bistream_rule" in _error(bistream_rule="fixed")
    assert "max_instruction_chars" in _error(max_instruction_chars=0)
    assert "estimator_dtype" in _error(estimator_dtype="float16")
    assert 'device must be "cpu", "cuda" or "cuda:N", got "gpu"' in _error(device="gpu")
    assert CosyVoice3Settings(device="cuda:1").device == "cuda:1"
    assert "top_p" in _error(top_p=0)
    assert "weights" in _error(weights=3)


def test_paths(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert f'weights: "{missing}" is neither "tiny_fixture", "full_random"' in _error(
        weights=str(missing))
    # The spelling "random" is not a second name for full_random: refused, named.
    assert 'weights: "random" is neither "tiny_fixture", "full_random" (full-size random ' \
        'weights, for timing) nor an existing checkpoint directory' in _error(weights="random")
    ck = _checkpoint(tmp_path, ("llm.pt",))
    assert f"weights: checkpoint directory {ck} lacks flow.pt, hift.pt" in _error(weights=str(ck))
    assert f"voices_dir {missing} is not a directory" in _error(voices_dir=str(missing))
    assert f"fixtures_dir {missing} is not a directory" in _error(fixtures_dir=str(missing))


def test_capture_lists() -> None:
    s = CosyVoice3Settings(flow_capture_frame_buckets=(200, 100, 200),
                           flow_capture_batch_sizes=(4, 1, 1))
    assert s.flow_capture_frame_buckets == (100, 200) and s.flow_capture_batch_sizes == (1, 4)
    assert "must be positive integers, got 0" in _error(flow_capture_frame_buckets=[100, 0])
    assert "must be positive integers, got -1" in _error(flow_capture_batch_sizes=[-1])
    assert "flow_capture_frame_buckets: 15050 frames pass the 15000-frame flow noise" in _error(
        flow_capture_frame_buckets=[15050])
    assert "flow_capture_frame_buckets: 125 is not whole 50-frame streaming chunks" in _error(
        weights="full_random", flow_capture_frame_buckets=[125])
    assert "flow_capture_frame_buckets: 15 is not whole 10-frame" in _error(
        flow_capture_frame_buckets=[15])
    assert "flow_capture_batch_sizes: 6 exceeds flow_max_batch_size 4 (drop it" in _error(
        flow_max_batch_size=4)
    assert CosyVoice3Settings(flow_max_batch_size=4, flow_capture_batch_sizes=[1, 2, 4])
    assert not CosyVoice3Settings(flow_capture_frame_buckets=[]).capture_enabled
    assert not CosyVoice3Settings(flow_capture_batch_frames=0).capture_enabled
    assert not CosyVoice3Settings(capture_graphs=False).capture_enabled
    assert CosyVoice3Settings().capture_enabled


def test_require_graphs() -> None:
    assert CosyVoice3Settings(weights="full_random", device="cuda", require_graphs=True)
    assert "require_graphs needs a CUDA device, not cpu" in _error(require_graphs=True)
    assert "require_graphs is set but capture is off" in _error(
        weights="full_random", device="cuda", require_graphs=True, flow_capture_batch_frames=0)
    assert "require_graphs is set but capture is off" in _error(
        weights="full_random", device="cuda", require_graphs=True, capture_graphs=False)


def test_segment_caps() -> None:
    assert "first_segment_chars must not exceed max_segment_chars" in _error(
        max_segment_chars=100, first_segment_chars=150)
    assert CosyVoice3Settings(first_segment_chars=None).first_segment_chars is None


def test_documentable() -> None:
    rows = field_rows(CosyVoice3Settings, "models[].options.")
    assert len(rows) == len(CosyVoice3Settings.model_fields)
    assert any("`models[].options.weights`" in r and "path" in r for r in rows)
