"""The settled-frame DiT cache of streamed flow calls (`flow_cache`, spec §9.7 end, §6
"Streaming property"): over the §9.7 hop schedule (tiny: 8, 10, 20, 20, ... tokens) each cached
call's new frames equal the slice of the full streamed recompute (float32 within 1e-5, bfloat16
estimator within a looser bound); the first call includes the prompt frames; a call ending
mid-chunk settles only whole chunks and the next call is still exact; errors and memory
accounting."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import one_torch_thread, tiny_flow, tiny_prompt  # noqa: E402, F401

from voxflow.models.cosyvoice3.dit import DiT  # noqa: E402
from voxflow.models.cosyvoice3.flow import FlowConditioning, FlowConfig  # noqa: E402
from voxflow.models.cosyvoice3.flow_cache import (  # noqa: E402
    SettledFlowCache,
    solve_streamed_chunk,
)
from voxflow.models.cosyvoice3.token2wav import (  # noqa: E402
    FlowPrompt,
    HopSchedule,
    Token2WavConfig,
)

TOL_FP32 = 1e-5  # float rounding only: the same ops on fewer frames
TOL_BF16 = 2e-2  # bf16 matmuls over different shapes may round differently

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def prompt() -> FlowPrompt:
    return tiny_prompt()


def random_tokens(n: int, seed: int) -> Any:
    return torch.randint(0, 81, (1, n), generator=torch.Generator().manual_seed(seed),
                         dtype=torch.int32)


def conditioning(flow: Any, prompt: FlowPrompt, token: Any) -> FlowConditioning:
    with torch.inference_mode():
        c: FlowConditioning = flow.conditioning(token, prompt.prompt_token, prompt.prompt_feat,
                                                prompt.embedding, finalize=False)
    return c


def full(flow: Any, c: FlowConditioning, start: int) -> Any:
    with torch.inference_mode():
        return flow.decoder(c.mu, c.mask, c.spks, c.cond, streaming=True)[:, :, start:]


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


def hop_calls(prompt: FlowPrompt, n_tokens: int) -> list[int]:
    """Token counts of the streamed calls the §9.7 schedule makes as tokens arrive one by one."""
    schedule = HopSchedule(Token2WavConfig.tiny(), prompt.prompt_token.shape[1])
    return [n for k in range(1, n_tokens + 1) for n, _, _ in schedule.take_due(k)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_streamed_hops_equal_the_full_recompute(prompt, dtype):
    flow = tiny_flow()
    flow.decoder.estimator.set_compute_dtype(dtype)
    tol = TOL_FP32 if dtype == torch.float32 else TOL_BF16
    token = random_tokens(125, seed=11)
    calls = hop_calls(prompt, 125)
    assert len(calls) >= 6
    cache = SettledFlowCache(flow.decoder.estimator)
    chunk = flow.config.static_chunk_size
    for i, n in enumerate(calls):
        c = conditioning(flow, prompt, token[:, :n])
        start = cache.settled
        frames = c.mu.shape[2]
        expected = full(flow, c, start)
        got = solve_streamed_chunk(flow.decoder, c, cache)
        assert got.dtype == torch.float32 and got.shape == (1, 80, frames - start)
        assert max_diff(got, expected) < tol, (i, n)
        assert frames % chunk == 0 and cache.settled == frames
        if i == 0:  # the first call starts at prompt frame 0
            assert start == 0 and frames > c.prompt_frames


def test_a_call_ending_mid_chunk_settles_whole_chunks_only(prompt):
    flow = tiny_flow()
    token = random_tokens(40, seed=3)
    cache = SettledFlowCache(flow.decoder.estimator)
    # 7 prompt tokens: 7+6 = 13 tokens -> 26 frames (2 chunks + 6), then 29 -> 58, then 36 -> 72.
    for n, settled in ((9, 20), (25, 50), (32, 70), (32, 70)):
        c = conditioning(flow, prompt, token[:, :n])
        start = cache.settled
        got = solve_streamed_chunk(flow.decoder, c, cache)
        assert got.shape[2] == c.mu.shape[2] - start
        assert max_diff(got, full(flow, c, start)) < TOL_FP32
        assert cache.settled == settled


def test_a_call_with_no_new_frames_is_empty_and_changes_nothing(prompt):
    flow = tiny_flow()
    cache = SettledFlowCache(flow.decoder.estimator)
    c = conditioning(flow, prompt, random_tokens(11, seed=4))
    solve_streamed_chunk(flow.decoder, c, cache)
    settled = cache.settled
    assert solve_streamed_chunk(flow.decoder, c, cache).shape == (1, 80, 0)
    assert cache.settled == settled


def test_reset_reuses_the_buffers_for_a_new_segment(prompt):
    flow = tiny_flow()
    cache = SettledFlowCache(flow.decoder.estimator)
    token = random_tokens(30, seed=5)
    first = [solve_streamed_chunk(flow.decoder, conditioning(flow, prompt, token[:, :n]), cache)
             for n in (11, 21)]
    cache.reset()
    assert cache.settled == 0
    again = [solve_streamed_chunk(flow.decoder, conditioning(flow, prompt, token[:, :n]), cache)
             for n in (11, 21)]
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)


def test_memory_per_settled_frame(prompt):
    flow = tiny_flow()
    est = flow.decoder.estimator
    # 2 (K, V) · 2 layers · 10 steps · 2 CFG rows · 4 heads · 16 · 4 bytes
    assert SettledFlowCache.bytes_per_frame(est) == 20_480
    assert SettledFlowCache.bytes_per_frame(est, dtype=torch.bfloat16) == 10_240
    cache = SettledFlowCache(est, reserve_frames=95)
    solve_streamed_chunk(flow.decoder, conditioning(flow, prompt, random_tokens(11, 6)), cache)
    assert cache.capacity == 100  # reserve rounded up to whole 10-frame chunks
    conv = 2 * 10 * 2 * 64 * 30 * 4
    assert cache.nbytes == 20_480 * 100 + conv
    cfg = FlowConfig()
    with torch.device("meta"):
        big = DiT(dim=cfg.dim, depth=cfg.depth, heads=cfg.heads, dim_head=cfg.dim_head,
                  ff_mult=cfg.ff_mult)
    assert SettledFlowCache.bytes_per_frame(big) == 3_604_480  # full size, float32


def test_capacity_grows_keeping_the_settled_frames(prompt):
    flow = tiny_flow()
    token = random_tokens(60, seed=8)
    cache = SettledFlowCache(flow.decoder.estimator)
    for n in (11, 21, 41, 60):
        c = conditioning(flow, prompt, token[:, :n])
        start = cache.settled
        assert max_diff(solve_streamed_chunk(flow.decoder, c, cache), full(flow, c, start)) \
            < TOL_FP32
    assert cache.capacity >= cache.settled


def test_misuse_is_refused(prompt):
    flow = tiny_flow()
    est = flow.decoder.estimator
    token = random_tokens(30, seed=9)
    cache = SettledFlowCache(est)
    solve_streamed_chunk(flow.decoder, conditioning(flow, prompt, token[:, :21]), cache)
    with pytest.raises(ValueError, match="fewer than"):
        solve_streamed_chunk(flow.decoder, conditioning(flow, prompt, token[:, :11]), cache)
    c = conditioning(flow, prompt, token)
    two = FlowConditioning(c.mu.repeat(2, 1, 1), c.mask.repeat(2, 1, 1), c.spks.repeat(2, 1),
                           c.cond.repeat(2, 1, 1), c.prompt_frames)
    with pytest.raises(ValueError, match="batch 1"):
        solve_streamed_chunk(flow.decoder, two, cache)
    other = FlowConditioning(c.mu, c.mask, c.spks, c.cond, c.prompt_frames + 2)
    with pytest.raises(ValueError, match="prompt"):
        solve_streamed_chunk(flow.decoder, other, cache)
    with pytest.raises(ValueError, match="another estimator"):
        solve_streamed_chunk(tiny_flow().decoder, c, cache)
    est.set_compute_dtype(torch.bfloat16)
    with pytest.raises(ValueError, match="set_compute_dtype"):
        solve_streamed_chunk(flow.decoder, c, cache)
    est.static_chunk_size = 0
    with pytest.raises(ValueError, match="static_chunk_size"):
        SettledFlowCache(est)
    est.static_chunk_size, est.num_decoding_left_chunks = 10, 2
    with pytest.raises(ValueError, match="left_chunks"):
        SettledFlowCache(est)
