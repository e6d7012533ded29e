"""Stand-ins for CosyVoice3's prompt ONNX models (``campplus.onnx``, ``speech_tokenizer_v3.onnx``),
built with the onnx helper, so the audio path of ``POST /v1/audio/voices`` runs end to end.

They have the real models' inputs and output shapes, not their function:
- speaker: feats (1, frames, 80) float -> (1, 192): the mean over time times a fixed matrix;
- tokenizer: feats (1, 128, T) float, feats_length (1,) int32 -> (1, ceil(T / 4)) int64 tokens
  (25 Hz from the 100 fps mel): |mel bin 0| x 40, clipped to [0, max_token].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_speaker_model(path: Path) -> None:
    """A CAM++ stand-in: (1, frames, 80) -> (1, 192)."""
    weight = np.random.default_rng(0).standard_normal((80, 192)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["feats"], ["mean"], axes=[1], keepdims=0),
         helper.make_node("MatMul", ["mean", "w"], ["embedding"])],
        "fake_campplus",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, None, 80])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, 192])],
        [numpy_helper.from_array(weight, "w")],
    )
    _save(graph, path)


def write_tokenizer_model(path: Path, max_token: int) -> None:
    """An S3 tokenizer stand-in: (1, 128, T) + (1,) -> (1, ceil(T/4)) int64 in [0, max_token]."""
    consts = [
        numpy_helper.from_array(np.array([0, 0], np.int64), "starts"),
        numpy_helper.from_array(np.array([1, 2**62], np.int64), "ends"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "steps"),
        numpy_helper.from_array(np.array(40.0, np.float32), "scale"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(float(max_token), np.float32), "hi"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["feats", "starts", "ends", "axes", "steps"], ["picked"]),
         helper.make_node("Abs", ["picked"], ["magnitude"]),
         helper.make_node("Mul", ["magnitude", "scale"], ["scaled"]),
         helper.make_node("Clip", ["scaled", "lo", "hi"], ["clipped"]),
         helper.make_node("Cast", ["clipped"], ["cast"], to=TensorProto.INT64),
         helper.make_node("Reshape", ["cast", "shape"], ["tokens"])],
        "fake_speech_tokenizer",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, None]),
         helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, None])],
        consts,
    )
    _save(graph, path)


def write_prompt_models(folder: Path, max_token: int = 80) -> Path:
    """Both stand-ins in `folder` under the real file names; returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    write_speaker_model(folder / "campplus.onnx")
    write_tokenizer_model(folder / "speech_tokenizer_v3.onnx", max_token)
    return folder


def speech_like(seconds: float, rate: int = 24000, level: float = 0.3) -> np.ndarray:
    """(N,) float32: a tone with a syllable-rate envelope, `level` peak, at `rate` Hz."""
    t = np.arange(int(seconds * rate)) / rate
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4 * t)
    tone = np.sin(2 * np.pi * 180 * t) + 0.3 * np.sin(2 * np.pi * 360 * t)
    return (level * envelope * tone / 1.3).astype(np.float32)
