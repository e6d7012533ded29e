"""NanoCodec one-shot decode against NeMo's `CausalHiFiGANDecoder` (spec §1 items 3 and 4):
a padded batch with lengths, every intermediate, fp32 and fp64, and causality on prefixes."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from nanocodec_fixtures import tensors  # noqa: E402

from voxflow.models.nanocodec.config import DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.layers import HalfSnake  # noqa: E402
from voxflow.models.nanocodec.loader import load_decoder  # noqa: E402
from voxflow.models.nanocodec.stream import decode  # noqa: E402

FP32 = 5e-5
FP64 = 1e-11
PREFIXES = (1, 2, 3, 5, 8)
TAPS = ("pre_conv", *[f"{k}{i}" for i in range(4) for k in ("act", "up", "res")], "post_act")


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


@pytest.fixture(scope="module")
def io() -> dict[str, Any]:
    return tensors("tiny_decoder_io.safetensors")


@pytest.fixture(scope="module")
def prefixes() -> dict[str, Any]:
    return tensors("tiny_decoder_prefixes.safetensors")


@pytest.fixture(scope="module")
def decoders() -> dict[Any, Any]:
    state = tensors("tiny_decoder_state_dict.safetensors")
    return {dtype: load_decoder(state, DecoderConfig.tiny(), dtype=dtype)
            for dtype in (torch.float32, torch.float64)}


def run_with_taps(decoder: Any, latent: Any, lengths: Any) -> tuple[Any, dict[str, Any]]:
    taps: dict[str, Any] = {}
    with torch.inference_mode():
        audio = decoder(latent, lengths, taps=taps)
    return audio, taps


@pytest.fixture(scope="module")
def fp32_run(decoders: dict[Any, Any], io: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    return run_with_taps(decoders[torch.float32], io["latent"], io["tokens_len"])


@pytest.fixture(scope="module")
def fp64_run(decoders: dict[Any, Any], io: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    return run_with_taps(decoders[torch.float64], io["latent_fp64"], io["tokens_len"])


def test_fp32_audio_and_pre_clamp_equal_nemo(
    fp32_run: tuple[Any, dict[str, Any]], io: dict[str, Any]
) -> None:
    audio, taps = fp32_run
    assert audio.shape == (2, 1152) and audio.dtype == torch.float32
    assert max_diff(audio, io["audio"]) <= FP32
    assert max_diff(taps["pre_clamp"], io["pre_clamp"]) <= FP32


@pytest.mark.parametrize("tap", TAPS)
def test_fp32_every_intermediate_equals_nemo(
    fp32_run: tuple[Any, dict[str, Any]], io: dict[str, Any], tap: str
) -> None:
    ours, ref = fp32_run[1][tap], io[f"inter.{tap}"]
    assert ours.shape == ref.shape
    assert max_diff(ours, ref) <= FP32


def test_fp64_audio_and_pre_clamp_equal_nemo_fp64(
    fp64_run: tuple[Any, dict[str, Any]], io: dict[str, Any]
) -> None:
    audio, taps = fp64_run
    assert audio.dtype == torch.float64
    assert max_diff(audio, io["audio_fp64"]) <= FP64
    assert max_diff(taps["pre_clamp"], io["pre_clamp_fp64"]) <= FP64


def test_nemo_masks_after_every_conv_so_padded_tails_are_exactly_zero(
    fp32_run: tuple[Any, dict[str, Any]], fp64_run: tuple[Any, dict[str, Any]]
) -> None:
    # Item 1 has 9 of 12 frames: every intermediate past 9 * (cumulative rate) is exactly 0.
    for audio, taps in (fp32_run, fp64_run):
        assert torch.count_nonzero(audio[1, 864:]) == 0
        for name, value in taps.items():
            frames = value.shape[-1]
            valid = 9 * frames // 12
            assert torch.count_nonzero(value[1, ..., valid:]) == 0, name
            assert torch.count_nonzero(value[0, ..., -1:]) > 0 or name == "pre_clamp", name


def test_latent_not_masked_before_pre_conv_is_harmless(
    decoders: dict[Any, Any], io: dict[str, Any]
) -> None:
    # NeMo feeds pre_conv the unmasked latent; causality keeps the valid part independent.
    noisy = io["latent_fp64"].clone()
    noisy[1, :, 9:] = 0.5
    audio = decode(decoders[torch.float64], noisy, io["tokens_len"])
    assert max_diff(audio, io["audio_fp64"]) <= FP64


def test_output_is_clamp_of_pre_clamp_exactly_and_length_is_frames_times_96(
    fp32_run: tuple[Any, dict[str, Any]], io: dict[str, Any]
) -> None:
    audio, taps = fp32_run
    assert torch.equal(audio, torch.clamp(taps["pre_clamp"], -1.0, 1.0))
    assert (taps["pre_clamp"].abs() >= 1).any()  # the post_conv gain makes the clamp bite
    assert io["audio_len"].tolist() == [12 * 96, 9 * 96] == [1152, 864]
    assert DecoderConfig.tiny().samples_per_frame == 96


def test_valid_part_of_padded_item_equals_its_own_decode_fp64(
    decoders: dict[Any, Any], io: dict[str, Any]
) -> None:
    alone = decode(decoders[torch.float64], io["latent_fp64"][1:, :, :9])
    assert max_diff(alone[0], io["audio_fp64"][1, :864]) <= FP64


@pytest.mark.parametrize("n", PREFIXES)
def test_causal_prefix_decode_equals_nemo_prefix(
    decoders: dict[Any, Any], prefixes: dict[str, Any], n: int
) -> None:
    for dtype, key, tol in ((torch.float32, "latent", FP32),
                            (torch.float64, "latent_fp64", FP64)):
        audio = decode(decoders[dtype], prefixes[key][:, :, :n])
        suffix = "_fp64" if dtype == torch.float64 else ""
        assert audio.shape == (1, 96 * n)
        assert max_diff(audio, prefixes[f"audio_prefix_{n}{suffix}"]) <= tol
        assert max_diff(audio, prefixes[f"audio_full{suffix}"][:, : 96 * n]) <= tol


def test_half_snake_odd_channels_two_snake_three_leaky() -> None:
    act = HalfSnake(5)
    with torch.no_grad():
        act.activation.snake_act.alpha.fill_(1.0)
    x = torch.full((1, 5, 1), -2.0)
    out = act(x)[0, :, 0]
    snake = -2.0 + torch.sin(torch.tensor(-2.0)) ** 2 / (1.0 + 1e-9)
    assert out[:2].tolist() == pytest.approx([float(snake)] * 2)
    assert out[2:].tolist() == pytest.approx([-0.02] * 3)
    assert act(x).data_ptr() != x.data_ptr()  # a fresh tensor, never the input's buffer


def test_grouped_upsampler_output_j_sums_inputs_2j_and_2j_plus_1(
    decoders: dict[Any, Any],
) -> None:
    up = decoders[torch.float64].up_sample_conv_layers[3]  # 10 -> 5 channels, rate 2
    x = torch.zeros(1, 10, 3, dtype=torch.float64)
    x[0, 6] = 1.0  # feeds output channel 3 only
    with torch.inference_mode():
        out = up(x) - up(torch.zeros_like(x))
    assert torch.count_nonzero(out[0, [0, 1, 2, 4]]) == 0
    assert torch.count_nonzero(out[0, 3]) > 0


def test_rerun_is_bit_identical(decoders: dict[Any, Any], io: dict[str, Any]) -> None:
    first = decode(decoders[torch.float32], io["latent"], io["tokens_len"])
    second = decode(decoders[torch.float32], io["latent"], io["tokens_len"])
    assert torch.equal(first, second)


def test_cpu_prepacked_convs_equal_plain_convs_and_nemo(io: dict[str, Any]) -> None:
    state = tensors("tiny_decoder_state_dict.safetensors")
    packed = load_decoder(state, DecoderConfig.tiny(), prepack=True)
    plain = load_decoder(state, DecoderConfig.tiny(), prepack=False)
    if packed.pre_conv.packed is None:
        pytest.skip("no oneDNN conv ops in this torch build")
    assert plain.pre_conv.packed is None
    a = decode(packed, io["latent"], io["tokens_len"])
    b = decode(plain, io["latent"], io["tokens_len"])
    assert max_diff(a, b) <= FP32 and max_diff(a, io["audio"]) <= FP32
    assert torch.count_nonzero(a[1, 864:]) == 0


def test_prepack_skipped_for_fp64_and_dropped_by_a_move(decoders: dict[Any, Any]) -> None:
    assert decoders[torch.float64].pre_conv.packed is None
    state = tensors("tiny_decoder_state_dict.safetensors")
    decoder = load_decoder(state, DecoderConfig.tiny())
    decoder.to(torch.float64)
    assert decoder.pre_conv.packed is None  # a stale packed copy is never used
