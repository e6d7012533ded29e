"""NanoCodec FSQ decode against NeMo (spec §1 item 1, §3): exact, with and without lengths,
fp32 and fp64; ids NeMo would wrap silently are refused."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from nanocodec_fixtures import config, tensors  # noqa: E402

from voxflow.models.nanocodec.fsq import (  # noqa: E402
    LEVELS,
    NUM_GROUPS,
    CodeError,
    codebook,
    fsq_decode,
)


@pytest.fixture(scope="module")
def fx() -> dict[str, Any]:
    return tensors("fsq.safetensors")


def test_fixture_config_is_eight_groups_of_levels_8_7_6_6() -> None:
    assert config("fsq.safetensors") == {"num_groups": NUM_GROUPS,
                                         "num_levels_per_group": list(LEVELS)}


def test_codebook_digit_minus_half_over_half_equals_nemo_exactly(fx: dict[str, Any]) -> None:
    table = codebook(torch.float32)
    assert table.shape == (2016, 4)
    assert torch.equal(table, fx["codebook"])
    assert table[0].tolist() == [-1.0, -1.0, -1.0, -1.0]
    assert torch.equal(table[2015], torch.tensor([0.75, 1.0, 2 / 3, 2 / 3]))


def test_decode_with_lengths_zeroes_frames_past_length_exactly(fx: dict[str, Any]) -> None:
    latent = fsq_decode(fx["tokens"], fx["tokens_len"])
    assert latent.shape == (2, 32, 64) and latent.dtype == torch.float32
    assert torch.equal(latent, fx["latent"])
    assert torch.count_nonzero(latent[1, :, 50:]) == 0


def test_decode_without_lengths_is_nemo_unmasked(fx: dict[str, Any]) -> None:
    assert torch.equal(fsq_decode(fx["tokens"]), fx["latent_unmasked"])


def test_decode_fp64_exact_and_rounds_to_the_fp32_decode(fx: dict[str, Any]) -> None:
    latent = fsq_decode(fx["tokens"], fx["tokens_len"], dtype=torch.float64)
    assert torch.equal(latent, fx["latent_fp64"])
    assert torch.equal(latent.float(), fx["latent"])


def test_codebook_major_group_c_fills_dims_4c_to_4c_plus_3() -> None:
    tokens = torch.zeros(1, 8, 1, dtype=torch.int64)
    tokens[0, 3, 0] = 2015  # group 3 only
    latent = fsq_decode(tokens)[0, :, 0]
    assert latent[12:16].tolist() == pytest.approx([0.75, 1.0, 2 / 3, 2 / 3])
    assert torch.all(latent[:12] == -1) and torch.all(latent[16:] == -1)


def test_io_fixture_latent_is_the_fsq_decode_of_its_tokens() -> None:
    io = tensors("tiny_decoder_io.safetensors")
    assert torch.equal(fsq_decode(io["tokens"], io["tokens_len"]), io["latent"])
    assert torch.equal(fsq_decode(io["tokens"], io["tokens_len"], dtype=torch.float64),
                       io["latent_fp64"])


@pytest.mark.parametrize("bad_id", [2016, 2017, 2023, -1])
def test_ids_outside_0_2015_refused_where_nemo_wraps_2016_to_0(bad_id: int) -> None:
    tokens = torch.zeros(1, 8, 3, dtype=torch.int64)
    tokens[0, 5, 1] = bad_id
    with pytest.raises(CodeError, match="0..2015"):
        fsq_decode(tokens)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (torch.zeros(1, 8, 3), "integers"),
        (torch.zeros(1, 7, 3, dtype=torch.int64), r"\(B, 8, T\)"),
        (torch.zeros(8, 3, dtype=torch.int64), r"\(B, 8, T\)"),
    ],
)
def test_wrong_dtype_or_codebook_count_refused(tokens: Any, message: str) -> None:
    with pytest.raises(CodeError, match=message):
        fsq_decode(tokens)


def test_lengths_longer_than_the_tokens_refused() -> None:
    tokens = torch.zeros(2, 8, 3, dtype=torch.int64)
    with pytest.raises(CodeError, match="lengths"):
        fsq_decode(tokens, torch.tensor([3, 4]))
    with pytest.raises(CodeError, match="lengths"):
        fsq_decode(tokens, torch.tensor([3]))
