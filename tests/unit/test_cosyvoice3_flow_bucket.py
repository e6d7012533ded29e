"""The bucketed flow solve (`FlowBucketRunner`, spec §10 "Tests", on CPU with capture replaced by
an eager rerun): padding by 0, 1, 37 frames or 2x and padding rows leave each row's mel as the
row alone (spec §1 item 7 tolerance 1e-4); streamed and final rows mix in one call; a bucket
shorter than a row is refused; routing groups by bucket and cuts at the batch cap; the eager
path of one solve is bit-identical to the unbatched flow; streamed segments through the runner
equal the eager stream; on CPU everything runs eagerly and says why."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import one_torch_thread, tiny_flow, tiny_hift, tiny_prompt  # noqa: E402, F401

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT  # noqa: E402
from voxflow.models.cosyvoice3.flow_bucket import FlowBucketRunner, FlowSolve  # noqa: E402
from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator  # noqa: E402
from voxflow.models.cosyvoice3.token2wav import (  # noqa: E402
    FlowPrompt,
    Token2WavConfig,
    Token2WavSegment,
)

TOL = 1e-4  # spec §1 item 7 (flow inference)
LADDER = (20, 30, 40, 60, 80)  # whole 10-frame tiny chunks


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def flow() -> CausalMaskedDiffWithDiT:
    return tiny_flow()


@pytest.fixture(scope="module")
def hift() -> CausalHiFTGenerator:
    return tiny_hift()


@pytest.fixture(scope="module")
def prompt() -> FlowPrompt:
    return tiny_prompt()


def runner(flow: Any, max_batch: int = 8, **kw: Any) -> FlowBucketRunner:
    args: dict[str, Any] = {"buckets": LADDER, "batch_rows": (1, 2, 3, 4, 6, 8),
                            "max_batch_size": max_batch, "batch_frames": 8192,
                            "capture_graphs": True, "device": "cpu"}
    args.update(kw)
    return FlowBucketRunner(flow, **args)


def solve_of(flow: Any, prompt: FlowPrompt, tokens: list[int], streaming: bool) -> FlowSolve:
    token = torch.tensor([tokens], dtype=torch.int32)
    with torch.inference_mode():
        cond = flow.conditioning(token, prompt.prompt_token, prompt.prompt_feat,
                                 prompt.embedding, finalize=not streaming)
    return FlowSolve(cond, streaming)


def alone(flow: Any, prompt: FlowPrompt, tokens: list[int], streaming: bool) -> Any:
    token = torch.tensor([tokens], dtype=torch.int32)
    return flow.inference(token, prompt.prompt_token, prompt.prompt_feat, prompt.embedding,
                          streaming=streaming, finalize=not streaming)


def tokens(n: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 81, (n,), generator=g).tolist()


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


def padded(r: FlowBucketRunner, solves: list[FlowSolve], rows: int, frames: int) -> list[Any]:
    with torch.inference_mode():
        mel = r.forward(r.pack(solves, rows, frames))
    return [mel[i:i + 1, :, s.cond.prompt_frames:s.frames] for i, s in enumerate(solves)]


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("extra", [0, 1, 37, "2x"])
def test_padding_frames_and_rows_leave_each_row_as_alone(flow, prompt, streaming, extra):
    r = runner(flow)
    toks = tokens(13)
    solve = solve_of(flow, prompt, toks, streaming)
    frames = solve.frames * 2 if extra == "2x" else solve.frames + int(extra)
    for rows in (1, 3):
        (mel, *_) = padded(r, [solve], rows, frames)
        ref = alone(flow, prompt, toks, streaming)
        assert mel.shape == ref.shape
        assert max_diff(mel, ref) < TOL


def test_streamed_and_final_rows_of_different_lengths_share_one_call(flow, prompt):
    r = runner(flow)
    cases = [(tokens(13, 1), True), (tokens(9, 2), False), (tokens(16, 3), False),
             (tokens(11, 4), True)]
    solves = [solve_of(flow, prompt, t, s) for t, s in cases]
    mels = padded(r, solves, 4, 80)
    for (toks, streaming), mel in zip(cases, mels, strict=True):
        assert max_diff(mel, alone(flow, prompt, toks, streaming)) < TOL


def test_a_bucket_shorter_than_a_row_or_too_few_rows_is_refused(flow, prompt):
    r = runner(flow)
    solve = solve_of(flow, prompt, tokens(13), False)
    with pytest.raises(ValueError, match="do not fit"):
        r.pack([solve], 1, solve.frames - 1)
    with pytest.raises(ValueError, match="do not fit"):
        r.pack([solve, solve], 1, 80)


def test_one_eager_solve_is_bit_identical_to_the_unbatched_flow(flow, prompt):
    r = runner(flow)
    for streaming in (True, False):
        toks = tokens(12, 5)
        (mel,) = r.solve([solve_of(flow, prompt, toks, streaming)])
        assert torch.equal(mel, alone(flow, prompt, toks, streaming))


def test_solves_group_by_bucket_and_cut_at_the_batch_cap(flow, prompt):
    r = runner(flow, max_batch=2)
    lengths = [8, 9, 10, 20, 21]  # T = 2(P + N) = 30, 32, 34 | 54, 56 frames (P = 7)
    solves = [solve_of(flow, prompt, tokens(n, n), False) for n in lengths]
    mels = r.solve(solves)
    for n, mel in zip(lengths, mels, strict=True):
        assert max_diff(mel, alone(flow, prompt, tokens(n, n), False)) < TOL
    hits, replays, eager, _, calls = r.stats.snapshot()
    # bucket 30: one solve; bucket 40: two (one call); bucket 60: two (one call)
    assert hits == {(1, 30): 1, (2, 40): 1, (2, 60): 1}
    assert (replays, eager, calls) == (0, 3, 3)


def test_routed_replays_of_padded_shapes_equal_the_eager_route(flow, prompt, monkeypatch):
    """Capture replaced by an eager rerun at the padded (rows, bucket) shape."""
    eager, routed = runner(flow), runner(flow)
    for shape in routed.shapes():
        routed.graphs.graphs[shape] = None  # type: ignore[assignment]
    shapes_run: list[tuple[int, int]] = []

    def replay(key: Any, inputs: dict[str, Any]) -> tuple[Any, bool]:
        shapes_run.append((inputs["mu"].shape[0], inputs["mu"].shape[2]))
        return routed.forward(inputs).clone(), True

    monkeypatch.setattr(routed.graphs, "run", replay)
    cases = [(tokens(13, 1), True), (tokens(9, 2), False), (tokens(12, 3), True)]
    solves = [solve_of(flow, prompt, t, s) for t, s in cases]  # T = 34, 32, 32 frames
    for a, b in zip(eager.solve(solves), routed.solve(solves), strict=True):
        assert a.shape == b.shape and max_diff(a, b) < TOL
    assert shapes_run == [(3, 40)]  # 3 rows of 34..40 frames: one call, bucket 40
    assert routed.stats.snapshot()[1] == 1  # replayed


def test_streamed_segments_through_the_runner_equal_the_eager_stream(flow, hift, prompt):
    """Two segments driven together, every flow call batched through the runner, give the
    pieces of each segment streamed alone with the eager flow."""
    r = runner(flow)
    scripts = [tokens(37, 7), tokens(30, 8)]
    ref = []
    for script in scripts:
        seg = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), filter_silent=False)
        pieces = [p for t in script for p in seg.push(t)] + seg.finish()
        ref.append(torch.cat(pieces, dim=-1))
    segs = [Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), filter_silent=False)
            for _ in scripts]
    out: list[list[Any]] = [[], []]
    for step in range(max(map(len, scripts)) + 1):
        plans = []
        for seg, script in zip(segs, scripts, strict=True):
            if step < len(script):
                plans.append(seg.plan(script[step], final=False))
            elif step == len(script):
                plans.append(seg.plan((), final=True))
            else:
                plans.append([])
        mels = iter(r.solve([j.solve for jobs in plans for j in jobs if j.solve is not None]))
        for i, (seg, jobs) in enumerate(zip(segs, plans, strict=True)):
            out[i] += seg.complete(jobs, [next(mels) for _ in jobs])
    for pieces, expected in zip(out, ref, strict=True):
        speech = torch.cat(pieces, dim=-1)
        assert speech.shape == expected.shape and max_diff(speech, expected) < 1e-3
    assert any(rows == 2 for rows, _ in r.stats.snapshot()[0])


def test_on_cpu_every_shape_runs_eagerly_and_says_why(flow):
    r = runner(flow)
    r.start()
    assert r.health() == {"captured": 0, "shapes": 5 * 6, "eager": ["eager: device is cpu"]}
    off = runner(flow, buckets=())
    off.start()
    assert off.health()["eager"] == ["eager: capture_graphs is off"]
    assert runner(flow, batch_frames=100).shapes() == [
        (4, 20), (3, 30), (3, 20), (2, 40), (2, 30), (2, 20), (1, 80), (1, 60), (1, 40), (1, 30),
        (1, 20)]
