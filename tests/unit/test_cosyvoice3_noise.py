"""CosyVoice3 fixed random buffers (spec §8, build item 2) against the reference fixtures: exact."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.unit.cosyvoice3_fixtures import meta, tensors  # noqa: E402
from voxflow.models.cosyvoice3 import noise  # noqa: E402


def test_constants_match_the_fixture_metadata() -> None:
    full = meta("full_size_noise_buffers.json")
    assert meta("flow_tiny_meta.json")["rand_noise_sha256"] == noise.RAND_NOISE_SHA256
    expected = {
        "flow.decoder.rand_noise": (noise.RAND_NOISE_SHAPE, noise.RAND_NOISE_SHA256),
        "hift.m_source.l_sin_gen.rand_ini": (noise.RAND_INI_SHAPE, noise.RAND_INI_SHA256),
        "hift.m_source.l_sin_gen.sine_waves": (noise.SINE_WAVES_SHAPE, noise.SINE_WAVES_SHA256),
        "hift.m_source.uv": (noise.UV_SHAPE, noise.UV_SHA256),
    }
    for name, (shape, digest) in expected.items():
        assert tuple(full[name]["shape"]) == shape, name
        assert full[name]["dtype"] == "torch.float32", name
        assert full[name]["sha256_of_raw_little_endian_bytes"] == digest, name


def test_flow_rand_noise_is_exact() -> None:
    before = torch.random.get_rng_state()
    buf = noise.flow_rand_noise()
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is untouched
    assert buf.shape == (1, 80, 15000) and buf.dtype == torch.float32
    assert noise.tensor_sha256(buf) == noise.RAND_NOISE_SHA256
    assert torch.equal(
        buf[:, :, :200], tensors("flow_tiny_fixtures.safetensors")["rand_noise.first200"]
    )
    first500 = tensors("full_size_noise_buffers.safetensors")["flow.decoder.rand_noise.first500"]
    assert torch.equal(buf[:, :, :500], first500)
    # it equals what the reference did: seed everything with 0, then randn
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        assert torch.equal(torch.randn(1, 80, 15000), buf)
    finally:
        torch.random.set_rng_state(state)


def test_full_size_replay_matches_every_digest_and_prefix() -> None:
    bufs = noise.replay_full_size_buffers(with_uv=True)  # verifies all four sha256 digests
    ref = tensors("full_size_noise_buffers.safetensors")
    assert torch.equal(bufs.rand_ini, ref["hift.rand_ini"])
    assert bufs.rand_ini[0, 0].item() == 0.0
    assert torch.equal(bufs.sine_waves[:, :24000], ref["hift.sine_waves.first24000"])
    assert bufs.uv is not None
    assert torch.equal(bufs.uv[:, :24000], ref["hift.uv.first24000"])
    assert torch.equal(bufs.rand_noise, noise.flow_rand_noise())
    assert bufs.sine_waves.shape == (1, 7_200_000, 9)
    assert 0.0 <= float(bufs.sine_waves.min()) and float(bufs.sine_waves.max()) < 1.0


def test_full_size_sine_waves_is_replayed_once() -> None:
    try:
        first = noise.full_size_sine_waves()
        assert first is noise.full_size_sine_waves()
        assert noise.tensor_sha256(first) == noise.SINE_WAVES_SHA256
    finally:
        noise.full_size_sine_waves.cache_clear()  # 259 MB: not for the rest of the test run


def test_a_wrong_digest_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise, "RAND_NOISE_SHA256", "0" * 64)
    with pytest.raises(
        noise.NoiseDigestError, match=r"rand_noise \(1, 80, 15000\): sha256 584a26e6"
    ):
        noise.flow_rand_noise()
    assert noise.flow_rand_noise(verify=False).shape == (1, 80, 15000)


def test_extend_tiny_sine_waves() -> None:
    prefix = tensors("hift_tiny_fixtures.safetensors")["buf.sine_waves_prefix"]
    assert prefix.shape == (1, noise.TINY_SINE_PREFIX_SAMPLES, 9)
    longer = noise.extend_sine_waves(prefix, 60_000)
    assert longer.shape == (1, 60_000, 9) and longer.dtype == prefix.dtype
    assert torch.equal(longer[:, :48_000], prefix)
    assert torch.equal(longer, noise.extend_sine_waves(prefix, 60_000))  # fixed seed
    tail = longer[:, 48_000:]
    assert 0.0 <= float(tail.min()) and float(tail.max()) < 1.0
    assert not torch.equal(tail, noise.extend_sine_waves(prefix, 60_000, seed=1)[:, 48_000:])
    shorter = noise.extend_sine_waves(prefix, 100)
    assert torch.equal(shorter, prefix[:, :100])
    shorter[0, 0, 0] = 5.0  # a copy, not a view of the prefix
    assert prefix[0, 0, 0].item() != 5.0
    with pytest.raises(ValueError, match="must be"):
        noise.extend_sine_waves(prefix[0], 10)
    with pytest.raises(ValueError, match="positive"):
        noise.extend_sine_waves(prefix, 0)
