"""The NanoCodec engine stage (issue 12; spec §6, §8.2, §9) on the tiny fixture decoder: codes
streamed through the stage in any parts and chunk sizes equal NeMo's one-shot decode, requests
interleaved in batches do not disturb each other, a request's slot is freed however it ends
(``voxflow_stage_states`` / ``voxflow_stage_state_bytes`` back to 0), reruns are bit-identical,
bad codes fail only their own request."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from nanocodec_fixtures import tensors  # noqa: E402

from voxflow.engine.metrics import StageCollector  # noqa: E402
from voxflow.models.nanocodec.config import DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.fsq import CodeError, fsq_decode  # noqa: E402
from voxflow.models.nanocodec.loader import load_decoder  # noqa: E402
from voxflow.models.nanocodec.stage import NanoCodecStage  # noqa: E402
from voxflow.models.nanocodec.stream import PoolExhausted, StatePool, decode  # noqa: E402
from voxflow.stages.items import RequestInfo, StageBatch, StageItem  # noqa: E402
from voxflow.stages.outputs import Audio  # noqa: E402
from voxflow.stages.state import StateReleased  # noqa: E402

FP32 = 5e-5
FP64_AS_FP32 = 2**-24  # an fp64 decode, emitted as float32 `Audio`: within float32 rounding
SPF = 96  # tiny decoder: samples per frame
FRAMES = 12


def cuts(sizes: list[int]) -> list[tuple[int, int]]:
    ends = np.cumsum(sizes).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def random_parts(seed: int) -> list[int]:
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, FRAMES), rng.randint(2, 6)))
    return [b - a for a, b in zip([0, *points], [*points, FRAMES], strict=True)]


# how the upstream stage splits the segment into parts (0: an empty part, then the rest)
PART_SPLITS = [[12], [1] * 12, [5, 7], [2, 1, 5, 3, 1], [0, 4, 0, 8], random_parts(1),
               random_parts(2)]
CHUNKS = [1, 2, 3, 4, 5, 7, 12]


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


def make_stage(decoder: Any, chunk: int = 4, streams: int = 4, batch: int = 4) -> NanoCodecStage:
    stage = NanoCodecStage(StatePool(decoder, streams), chunk_frames=chunk, max_batch_size=batch)
    stage.start()
    return stage


def item(request: str, codes: Any, segment: int = 0, part: int = 0,
         final: bool = True) -> StageItem:
    info = RequestInfo(request, "magpie", "random-0", None, seed=7, seeded=False)
    return StageItem(info, segment, codes, part=part, final=final)


def parts_of(request: str, codes: np.ndarray, sizes: list[int], segment: int = 0) -> list[Any]:
    spans = cuts(sizes)
    return [item(request, codes[:, a:b], segment, k, k == len(spans) - 1)
            for k, (a, b) in enumerate(spans)]


def run_one(stage: NanoCodecStage, it: StageItem) -> Any:
    (out,) = stage.run(StageBatch.of([it]))
    return out


def stream(stage: NanoCodecStage, request: str, codes: np.ndarray, sizes: list[int]) -> list[Any]:
    outs = [run_one(stage, it) for it in parts_of(request, codes, sizes)]
    assert all(isinstance(o, Audio) for o in outs), outs
    return [o.samples for o in outs]


def item0(io: dict[str, Any]) -> np.ndarray:
    return io["tokens"][0].numpy()  # (8, 12): the prefixes fixture is its decode


def gauges(stage: NanoCodecStage) -> dict[str, float]:
    collector = StageCollector()
    collector.models["magpie"] = [stage]
    out = {}
    for family in collector.collect():
        for sample in family.samples:
            if sample.name in ("voxflow_stage_states", "voxflow_stage_state_bytes"):
                out[sample.name] = sample.value
    return out


@pytest.mark.parametrize("chunk", CHUNKS)
def test_streamed_through_the_stage_equals_one_shot_for_every_part_split(
    decoders: dict[Any, Any], io: dict[str, Any], prefixes: dict[str, Any], chunk: int
) -> None:
    codes = item0(io)
    for dtype, key, tol in ((torch.float32, "audio_full", FP32),
                            (torch.float64, "audio_full_fp64", FP64_AS_FP32)):
        stage = make_stage(decoders[dtype], chunk)
        first = None
        for n, sizes in enumerate(PART_SPLITS):
            pieces = stream(stage, f"r{n}", codes, sizes)
            # a part emits exactly the chunks it completes (the last part: the rest)
            done = [min(FRAMES, e // chunk * chunk) for _, e in cuts(sizes)[:-1]] + [FRAMES]
            assert [p.size for p in pieces] == [SPF * int(d) for d in np.diff([0, *done])]
            audio = np.concatenate(pieces)
            ref = prefixes[key][0].numpy()
            assert float(np.abs(audio.astype(np.float64) - ref).max()) <= tol
            # the stage's chunking depends on the codes only: any part split, the same bytes
            if dtype == torch.float32:
                first = audio if first is None else first
                assert np.array_equal(audio, first)
        assert stage.live_states() == len(PART_SPLITS)  # until the engine releases them
        assert stage.pool.in_use == 0  # each segment's final part returned its slot
        stage.close()
        assert stage.live_states() == 0 and stage.state_bytes() == 0


def test_two_interleaved_requests_do_not_disturb_each_other(
    decoders: dict[Any, Any], io: dict[str, Any]
) -> None:
    decoder = decoders[torch.float32]
    a = item0(io)
    b = io["tokens"][1, :, :9].numpy()  # the io batch's second item, 9 frames
    ref_a = decode(decoder, fsq_decode(torch.from_numpy(a)[None]))[0].numpy()
    ref_b = decode(decoder, fsq_decode(torch.from_numpy(b)[None]))[0].numpy()
    stage = make_stage(decoder, chunk=2)
    alone_a = np.concatenate(stream(stage, "solo-a", a, [3, 4, 5]))
    alone_b = np.concatenate(stream(stage, "solo-b", b, [2, 6, 1]))
    # b takes a slot first, so the batch [a, b] runs rows (1, 0): the gather/scatter path;
    # then [b, a] runs adjacent rows (0, 1) as views
    pa, pb = parts_of("a", a, [3, 4, 5]), parts_of("b", b, [2, 6, 1])
    outs: dict[str, list[np.ndarray]] = {"a": [], "b": []}
    for batch in ([pb[0]], [pa[0], pb[1]], [pb[2], pa[1]], [pa[2]]):
        results = stage.run(StageBatch.of(batch))
        for it, out in zip(batch, results, strict=True):
            assert isinstance(out, Audio), out
            outs[it.request.request_id].append(out.samples)
    got_a, got_b = np.concatenate(outs["a"]), np.concatenate(outs["b"])
    assert got_a.shape == (12 * SPF,) and got_b.shape == (9 * SPF,)
    for got, alone, ref in ((got_a, alone_a, ref_a), (got_b, alone_b, ref_b)):
        assert float(np.abs(got - ref).max()) <= FP32
        assert float(np.abs(got - alone).max()) <= FP32


def test_cancel_frees_the_slot_and_the_gauges_return_to_zero(
    decoders: dict[Any, Any], io: dict[str, Any]
) -> None:
    stage = make_stage(decoders[torch.float32], chunk=4)
    codes = item0(io)
    assert gauges(stage) == {"voxflow_stage_states": 0, "voxflow_stage_state_bytes": 0}
    out = run_one(stage, item("c", codes[:, :6], final=False))  # one chunk, 2 frames queued
    assert isinstance(out, Audio) and out.samples.size == 4 * SPF
    assert stage.pool.in_use == 1
    assert gauges(stage) == {"voxflow_stage_states": 1,
                             "voxflow_stage_state_bytes": stage.pool.slot_bytes + 2 * 8 * 8}
    assert stage.pool.slot_bytes == 16_812 * 4
    stage.release("c")  # the client went away
    assert gauges(stage) == {"voxflow_stage_states": 0, "voxflow_stage_state_bytes": 0}
    slot = stage.pool.slots[0]
    assert stage.pool.in_use == 0 and all(torch.count_nonzero(c) == 0 for c in slot.caches)
    late = run_one(stage, item("c", codes[:, 6:], part=1))  # a part still queued
    assert isinstance(late, StateReleased)
    assert stage.pool.in_use == 0 and stage.live_states() == 0


def test_cancel_during_a_run_frees_the_slot_when_that_run_ends(
    decoders: dict[Any, Any], io: dict[str, Any]
) -> None:
    stage = make_stage(decoders[torch.float32], chunk=4)
    run = stage.step.run
    seen = []

    def cancelled_meanwhile(slots: Any, codes: Any) -> Any:
        stage.release("mid")  # the engine's release, from another thread, mid-decode
        seen.append(stage.pool.in_use)  # the slot is still being written: not yet returned
        return run(slots, codes)

    stage.step.run = cancelled_meanwhile  # type: ignore[method-assign]
    out = run_one(stage, item("mid", item0(io), final=False))  # 3 chunks: 1 runs, 2 skipped
    assert isinstance(out, StateReleased) and seen == [1]
    assert stage.pool.in_use == 0 and stage.live_states() == 0 and stage.state_bytes() == 0


def test_same_parts_twice_are_bit_identical(
    decoders: dict[Any, Any], io: dict[str, Any]
) -> None:
    codes = item0(io)
    runs = []
    for _ in range(2):
        stage = make_stage(decoders[torch.float32], chunk=4)
        runs.append([stream(stage, f"x{k}", codes, sizes)
                     for k, sizes in enumerate(([5, 7], [1] * 12))])
    for first, second in zip(*runs, strict=True):
        assert all(np.array_equal(p, q) for p, q in zip(first, second, strict=True))


def test_each_segment_starts_from_zero_state(
    decoders: dict[Any, Any], io: dict[str, Any], prefixes: dict[str, Any]
) -> None:
    stage = make_stage(decoders[torch.float32], chunk=4)
    codes = item0(io)
    ref = prefixes["audio_full"][0].numpy()
    for segment in range(2):
        out = run_one(stage, item("two", codes, segment=segment))
        assert float(np.abs(out.samples - ref).max()) <= FP32
    assert stage.live_states() == 1 and stage.pool.in_use == 0


@pytest.mark.parametrize("codes, match", [
    (np.full((8, 3), 2016), "0..2015"),  # a Magpie special: NeMo would wrap it to 0
    (np.full((8, 3), -1), "0..2015"),
    (np.zeros((7, 3), np.int64), r"\(B, 8, T\)"),
    (np.zeros((1, 8, 3), np.int64), r"\(8, T\)"),
    (np.zeros((8, 3), np.float32), "integers"),
    ([[0] * 3] * 8, "array or a tensor"),
])
def test_bad_codes_fail_only_their_own_request(
    decoders: dict[Any, Any], io: dict[str, Any], codes: Any, match: str
) -> None:
    stage = make_stage(decoders[torch.float32], chunk=4)
    good, bad = stage.run(StageBatch.of([item("good", item0(io)), item("bad", codes)]))
    assert isinstance(good, Audio) and good.samples.size == 12 * SPF
    assert isinstance(bad, CodeError)
    with pytest.raises(CodeError, match=match):
        raise bad
    assert stage.pool.in_use == 0


def test_full_pool_fails_the_newcomer_only(decoders: dict[Any, Any], io: dict[str, Any]) -> None:
    stage = make_stage(decoders[torch.float32], chunk=4, streams=1)
    codes = item0(io)
    first, second = stage.run(StageBatch.of([item("p1", codes[:, :4], final=False),
                                             item("p2", codes[:, :4], final=False)]))
    assert isinstance(first, Audio) and isinstance(second, PoolExhausted)
    stage.release("p2")
    stage.release("p1")
    assert stage.pool.in_use == 0 and stage.state_bytes() == 0


def test_health_says_why_the_step_runs_eagerly(decoders: dict[Any, Any]) -> None:
    stage = make_stage(decoders[torch.float32], chunk=4)
    health = stage.health()
    assert health["chunk_frames"] == 4 and health["streams"] == {"in_use": 0, "max": 4}
    assert health["graphs"]["captured"] == 0 and health["graphs"]["eager"] == [
        "eager: device is cpu"]
