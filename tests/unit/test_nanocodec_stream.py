"""NanoCodec streaming decode (spec §1 item 5, §6): a stream from zero state fed the fixture's 12
frames in any split reproduces NeMo's one-shot decode, emits each prefix's decode after that
prefix, reruns bit-identically, and keeps its caches on the model's device with no host copy;
stream slots follow the engine's per-request state contract (voxflow/stages/state.py)."""

from __future__ import annotations

import random
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from nanocodec_fixtures import tensors  # noqa: E402

from voxflow.models.nanocodec.config import DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.loader import load_decoder, random_state_dict  # noqa: E402
from voxflow.models.nanocodec.stream import (  # noqa: E402
    PoolExhausted,
    StatePool,
    decode,
    decode_chunk,
)
from voxflow.stages.state import RequestStates  # noqa: E402

FP32 = 5e-5
FP64 = 1e-11
FULL_SIZE_FP64 = 1e-10
FRAMES = 12
PREFIXES = (1, 2, 3, 5, 8)


def even(size: int) -> list[int]:
    return [min(size, FRAMES - start) for start in range(0, FRAMES, size)]


def random_splits(count: int, seed: int = 12) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        cuts = sorted(rng.sample(range(1, FRAMES), rng.randint(2, 6)))
        out.append([b - a for a, b in zip([0, *cuts], [*cuts, FRAMES], strict=True)])
    return out


# spec §1 item 5: chunks of 1, 2, 3, 4, 5, 7, 12, the §6 uneven split, and 5 random ones
SPLITS = [even(n) for n in (1, 2, 3, 4, 5, 7, 12)] + [[5, 7], [2, 1, 5, 3, 1]] + random_splits(5)


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


@pytest.fixture(scope="module")
def prefixes() -> dict[str, Any]:
    return tensors("tiny_decoder_prefixes.safetensors")


@pytest.fixture(scope="module")
def pools() -> dict[Any, StatePool]:
    state = tensors("tiny_decoder_state_dict.safetensors")
    return {dtype: StatePool(load_decoder(state, DecoderConfig.tiny(), dtype=dtype), 2)
            for dtype in (torch.float32, torch.float64)}


def stream(pool: StatePool, latent: Any, split: list[int]) -> list[Any]:
    """The pieces of one stream over ``split``, its slot released afterwards."""
    state = pool.acquire("req", 0)
    try:
        pieces, start = [], 0
        for size in split:
            pieces.append(decode_chunk(pool.decoder, state, latent[:, :, start:start + size]))
            start += size
        assert state.frames == FRAMES
        return pieces
    finally:
        pool.release(state)


@pytest.mark.parametrize("split", SPLITS, ids=["-".join(map(str, s)) for s in SPLITS])
def test_stream_from_zero_state_equals_one_shot_and_each_prefix_fp32_and_fp64(
    pools: dict[Any, StatePool], prefixes: dict[str, Any], split: list[int]
) -> None:
    for dtype, key, tol in ((torch.float32, "latent", FP32),
                            (torch.float64, "latent_fp64", FP64)):
        pieces = stream(pools[dtype], prefixes[key], split)
        assert [p.shape[-1] for p in pieces] == [96 * n for n in split]
        suffix = "_fp64" if dtype == torch.float64 else ""
        audio = torch.cat(pieces, dim=-1)
        assert max_diff(audio, prefixes[f"audio_full{suffix}"]) <= tol
        assert max_diff(audio, decode(pools[dtype].decoder, prefixes[key])) <= tol
        # the audio emitted once k frames went in is NeMo's decode of those k frames alone
        cumulative = [sum(split[: i + 1]) for i in range(len(split))]
        for i, k in enumerate(cumulative):
            if k in PREFIXES:
                emitted = torch.cat(pieces[: i + 1], dim=-1)
                assert max_diff(emitted, prefixes[f"audio_prefix_{k}{suffix}"]) <= tol


@pytest.mark.parametrize("split", [even(1), even(4), [2, 1, 5, 3, 1]])
def test_same_split_twice_is_bit_identical(
    pools: dict[Any, StatePool], prefixes: dict[str, Any], split: list[int]
) -> None:
    first = torch.cat(stream(pools[torch.float32], prefixes["latent"], split), dim=-1)
    second = torch.cat(stream(pools[torch.float32], prefixes["latent"], split), dim=-1)
    assert torch.equal(first, second)


def test_state_starts_at_zeros_not_silence_codes_and_lives_on_the_model_device(
    pools: dict[Any, StatePool],
) -> None:
    pool = pools[torch.float64]
    state = pool.acquire("r1")
    try:
        assert len(state.caches) == 78 and state.numel == 16_812 and state.frames == 0
        weight = pool.decoder.pre_conv.conv.weight
        assert all(c.device == weight.device and c.dtype == torch.float64 for c in state.caches)
        assert all(torch.count_nonzero(c) == 0 for c in state.caches)
        assert [tuple(c.shape[1:]) for c in state.caches] == [
            (s.channels, s.columns) for s in pool.inventory]
    finally:
        pool.release(state)


def test_chunk_step_makes_no_host_copy_or_sync(pools: dict[Any, StatePool]) -> None:
    from torch.profiler import ProfilerActivity, profile

    pool = pools[torch.float32]
    decoder = pool.decoder
    state = pool.acquire("r2")
    latent = torch.rand(1, 32, 8) * 2 - 1
    try:
        decode_chunk(decoder, state, latent[:, :, :4])
        ptrs = [c.data_ptr() for c in state.caches]
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            decode_chunk(decoder, state, latent[:, :, 4:])
    finally:
        pool.release(state)
    names = [(e.name, e.input_shapes) for e in prof.events()]
    assert not [n for n, _ in names if n in ("aten::_local_scalar_dense", "aten::item")]
    assert not [n for n, shapes in names if n == "aten::_to_copy" and any(shapes)]
    assert ptrs == [c.data_ptr() for c in state.caches]  # updated in place, never reallocated


def test_pool_preallocates_slots_refuses_when_exhausted_and_zeroes_on_release(
    pools: dict[Any, StatePool], prefixes: dict[str, Any],
) -> None:
    pool = pools[torch.float32]
    a, b = pool.acquire("a"), pool.acquire("b", 3)
    assert b.owner == ("b", 3) and pool.in_use == 2
    with pytest.raises(PoolExhausted):
        pool.acquire("c")
    decode_chunk(pool.decoder, a, prefixes["latent"][:, :, :2])
    assert any(torch.count_nonzero(c) for c in a.caches)
    pool.release(a)
    pool.release(b)
    assert pool.in_use == 0
    assert all(torch.count_nonzero(c) == 0 for c in a.caches) and a.owner is None
    with pytest.raises(ValueError, match="not an acquired slot"):
        pool.release(a)


def test_request_states_free_the_slot_on_release_however_the_request_ends(
    pools: dict[Any, StatePool], prefixes: dict[str, Any],
) -> None:
    pool = StatePool(pools[torch.float32].decoder, 3)
    states: RequestStates[Any] = RequestStates(create=pool.acquire, free=pool.release)
    for request in ("finished", "cancelled", "failed"):
        state = states.get_or_create(request)
        decode_chunk(pool.decoder, state, prefixes["latent"][:, :, :3])
    assert pool.in_use == 3
    assert states.release("finished")  # last chunk
    assert states.release("cancelled")  # client gone
    assert states.release_all() == 1  # shutdown frees the failed one too
    assert pool.in_use == 0 and len(states) == 0
    assert not states.release("finished")  # idempotent: the slot is not freed twice


def test_chunk_with_wrong_batch_or_channels_refused(pools: dict[Any, StatePool]) -> None:
    pool = pools[torch.float32]
    state = pool.acquire("r3")
    try:
        with pytest.raises(ValueError, match=r"latent must be \[1, 32, T\]"):
            decode_chunk(pool.decoder, state, torch.zeros(2, 32, 4))
        with pytest.raises(ValueError, match="at least one frame"):
            decode_chunk(pool.decoder, state, torch.zeros(1, 32, 0))
    finally:
        pool.release(state)


def test_full_size_fp64_stream_equals_one_shot_random_weights() -> None:
    config = DecoderConfig()
    decoder = load_decoder(random_state_dict(config, seed=3), config, dtype=torch.float64)
    latent = torch.rand(1, 32, 5, generator=torch.Generator().manual_seed(4),
                        dtype=torch.float64) * 2 - 1
    whole = decode(decoder, latent)
    pool = StatePool(decoder, 1)
    state = pool.acquire("full")
    pieces = [decode_chunk(decoder, state, latent[:, :, a:b]) for a, b in ((0, 1), (1, 3), (3, 5))]
    pool.release(state)
    assert whole.shape == (1, 5 * 1024) and float(whole.abs().max()) > 1e-3
    assert max_diff(torch.cat(pieces, dim=-1), whole) <= FULL_SIZE_FP64
