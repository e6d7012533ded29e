"""NanoCodec's batched chunk step (spec §6 "Device residency", "Graph capture") on the tiny
fixture decoder: codes → audio over pool rows, in fp64 within 1e-11 of NeMo, views and
gather/scatter paths bit-identical, batched rows within the fp32 tolerance of lone ones, a
padded fixed-shape step (the captured graph's path, replayed here by a stand-in graph on the
CPU) touching only its own rows and the scratch row, no host read inside a step."""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from nanocodec_fixtures import tensors  # noqa: E402

from voxflow.models.nanocodec.config import DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.loader import load_decoder  # noqa: E402
from voxflow.models.nanocodec.step import ChunkStep  # noqa: E402
from voxflow.models.nanocodec.stream import StatePool  # noqa: E402
from voxflow.stages.graphs import _Graph  # noqa: E402

FP32 = 5e-5
FP64 = 1e-11


@pytest.fixture(scope="module")
def io() -> dict[str, Any]:
    return tensors("tiny_decoder_io.safetensors")


@pytest.fixture(scope="module")
def prefixes() -> dict[str, Any]:
    return tensors("tiny_decoder_prefixes.safetensors")


def make_step(dtype: Any = torch.float32, streams: int = 3, rows: tuple[int, ...] = (1,),
              capture: tuple[int, ...] = ()) -> ChunkStep:
    state = tensors("tiny_decoder_state_dict.safetensors")
    pool = StatePool(load_decoder(state, DecoderConfig.tiny(), dtype=dtype), streams)
    return ChunkStep(pool, capture, rows)


def stream(step: ChunkStep, slots: list[Any], codes: Any, chunk: int) -> Any:
    """codes [B, 8, T] through ``slots`` in chunks of ``chunk`` → audio [B, 96·T]."""
    pieces = [step.run(slots, codes[:, :, a : a + chunk])[0]
              for a in range(0, codes.shape[-1], chunk)]
    return torch.cat(pieces, dim=-1)


def test_fp64_step_equals_nemo_within_1e_11(io: dict[str, Any], prefixes: dict[str, Any]) -> None:
    step = make_step(torch.float64)
    slot = step.pool.acquire("r")
    audio = stream(step, [slot], io["tokens"][:1], 4)
    assert slot.frames == 12 and audio.dtype == torch.float64
    assert float((audio - prefixes["audio_full_fp64"]).abs().max()) <= FP64


def test_gather_path_is_bit_identical_to_pool_views(io: dict[str, Any]) -> None:
    step = make_step()
    a, b = step.pool.acquire("a"), step.pool.acquire("b")
    codes = io["tokens"][:1]
    views = stream(step, [a], codes, 4)  # one row: the pool's views
    gathered = []
    for start in range(0, 12, 4):
        rows = torch.tensor([b.index])
        gathered.append(step.forward({"codes": codes[:, :, start : start + 4], "rows": rows}))
    assert torch.equal(views, torch.cat(gathered, dim=-1))
    assert all(torch.equal(x, y) for x, y in zip(a.caches, b.caches, strict=True))


def test_batched_rows_match_lone_rows_and_rerun_bit_identically(io: dict[str, Any]) -> None:
    tokens = io["tokens"][:, :, :9]  # two different streams of 9 frames
    step = make_step()
    lone = [stream(step, [step.pool.acquire(f"l{i}")], tokens[i : i + 1], 3) for i in range(2)]
    for slot in list(step.pool.slots[:2]):
        step.pool.release(slot)
    runs = []
    for k in range(2):
        a, b = step.pool.acquire(f"a{k}"), step.pool.acquire(f"b{k}")
        runs.append(stream(step, [b, a], tokens.flip(0), 3))  # rows out of order: gathered
        step.pool.release(a)
        step.pool.release(b)
    assert torch.equal(runs[0], runs[1])
    assert float((runs[0][1] - lone[0][0]).abs().max()) <= FP32
    assert float((runs[0][0] - lone[1][0]).abs().max()) <= FP32


class StandInGraph:
    """Replays ``forward`` on the static inputs into the static output (a CUDA graph's effect,
    on the CPU), so the padded fixed-shape path runs here."""

    def __init__(self, step: ChunkStep, static: dict[str, Any], out: Any) -> None:
        self.step, self.static, self.out = step, static, out
        self.replays = 0

    def replay(self) -> None:
        self.out.copy_(self.step.forward(self.static))
        self.replays += 1


def test_padded_step_writes_only_its_rows_and_the_scratch_row(io: dict[str, Any]) -> None:
    step = make_step(streams=4, rows=(1, 4), capture=(4,))
    static = step.example_inputs(4, 4)
    graph = StandInGraph(step, static, torch.zeros(4, 4 * 96))
    step.graphs.graphs[(4, 4)] = _Graph(graph, static, graph.out, threading.Lock())
    eager = make_step(streams=4)
    slots = [step.pool.acquire(f"s{i}") for i in range(4)]
    ref_slots = [eager.pool.acquire(f"s{i}") for i in range(2)]
    idle = slots[1]  # acquired, not in the batch: must stay untouched
    codes = io["tokens"][:, :, :8]
    out = [step.run([slots[3], slots[0]], codes[:, :, a : a + 4]) for a in (0, 4)]
    assert [replayed for _, replayed in out] == [True, True] and graph.replays == 2
    audio = torch.cat([piece for piece, _ in out], dim=-1)  # [2, 768]: the padding cut off
    ref = torch.cat([eager.run(ref_slots, codes[:, :, a : a + 4])[0] for a in (0, 4)], dim=-1)
    assert audio.shape == (2, 8 * 96) and float((audio - ref).abs().max()) <= FP32
    assert all(torch.count_nonzero(c) == 0 for c in idle.caches + slots[2].caches)
    assert any(torch.count_nonzero(layer[step.pool.scratch_row]) for layer in step.pool.layers)
    short, replayed = step.run([slots[3]], io["tokens"][:1, :, 8:11])  # 3 frames: eager
    assert not replayed and short.shape == (1, 3 * 96)


def test_start_off_cuda_runs_eagerly_and_says_why() -> None:
    step = make_step(rows=(1, 2), capture=(4,))
    step.start()
    assert step.graphs.status == {(2, 4): "eager: device is cpu", (1, 4): "eager: device is cpu"}
    assert not step.graphs.graphs


def test_step_refuses_bad_shapes_and_repeated_slots() -> None:
    step = make_step()
    slot = step.pool.acquire("x")
    zeros = torch.zeros(1, 8, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"codes must be \[2, 8, T\]"):
        step.run([slot, slot], zeros)
    with pytest.raises(ValueError, match="distinct"):
        step.run([slot, slot], zeros.repeat(2, 1, 1))
    other = make_step().pool.acquire("y")  # same row number, another pool
    with pytest.raises(ValueError, match="its own pool"):
        step.run([other], zeros)
    with pytest.raises(ValueError, match="at least one frame"):
        step.run([slot], zeros[:, :, :0])
    assert slot.frames == 0


def test_step_reads_no_value_on_the_host(io: dict[str, Any]) -> None:
    from torch.profiler import ProfilerActivity, profile

    step = make_step()
    a, b = step.pool.acquire("a"), step.pool.acquire("b")
    codes = io["tokens"][:, :, :4]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step.run([b, a], codes)  # the gather/scatter path
        step.run([a], codes[:1])  # the views path
    names = [(e.name, e.input_shapes) for e in prof.events()]
    assert not [n for n, _ in names if n in ("aten::_local_scalar_dense", "aten::item")]
    assert not [n for n, shapes in names if n == "aten::_to_copy" and any(shapes)]


def test_pad_to_runs_every_step_at_the_same_row_count(io: dict[str, Any]) -> None:
    """`pad_to` (the codec's batch_invariant setting): lone, batched and short-last-chunk steps
    all reach the decoder with exactly pad_to rows, and a stream's audio decoded alone equals
    the same stream decoded beside another, bit for bit, chunk lengths 4 and a last 2."""
    step = ChunkStep(make_step(streams=4).pool, (), (4,), pad_to=4)
    seen: list[int] = []
    decoder_forward = step.decoder.forward

    def spy(latent: Any, **kwargs: Any) -> Any:
        seen.append(latent.shape[0])
        return decoder_forward(latent, **kwargs)

    step.decoder.forward = spy  # type: ignore[method-assign]
    codes = io["tokens"][:2, :, :10]  # two streams, 10 frames: chunks 4, 4, 2
    first, second = step.pool.acquire("a"), step.pool.acquire("b")
    together = stream(step, [first, second], codes, 4)
    alone = stream(step, [step.pool.acquire("c")], codes[:1], 4)
    assert seen == [4] * 6
    assert torch.equal(alone[0], together[0])
    with pytest.raises(ValueError, match="a step pads to 4 rows: 5 streams are too many"):
        step.run([object()] * 5, torch.zeros(5, 8, 4, dtype=torch.int64))  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"pad_to 2 must be the top of batch_rows \(1, 4\)"):
        ChunkStep(step.pool, (), (1, 4), pad_to=2)
