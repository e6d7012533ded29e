"""Run a Piper voice's HiFi-GAN decoder in ONNX Runtime's blocked channel layout (NCHWc).

ONNX Runtime runs a 1-D `Conv` as im2col + SGEMM. A 2-D `Conv` with constant weights it
rewrites (its NchwcTransformer, part of ``ORT_ENABLE_ALL``) into MLAS's direct NCHWc
convolution: channels in blocks of the CPU's vector width (8 floats with AVX2, 16 with
AVX-512), weights reordered once at load. The decoder is all 1-D convolutions over
ever longer sample axes, so it gains from being run as 2-D with a height of 1. ORT's transformer
alone reorders every conv's output back to NCHW, because the residual adds read the NCHW
output of a `ConvTranspose`; this module keeps the blocked layout between the convolutions and
folds each residual add into its convolution (MLAS's fused "Sum" input).

Voice joe's decoder (`split.py`), 412 latent frames, one thread, this project's 2-core AMD EPYC
(AVX-512: blocks of 16 channels): stock 1-D graph 258 ms; 2-D with ORT's transformer alone 240 ms;
with the layout kept (this module) 209 ms, 19% less. The audio is within 2.4e-7 of the stock
graph's (a 16-bit step is 3.1e-5); ORT profile of the rewritten graph: conv 75%, `ConvTranspose`
15% (MLAS has no NCHWc transposed convolution), the rest elementwise. Tried and not kept: each
`ConvTranspose` as a polyphase NCHWc conv (k 3, stride times the channels) and a depth-to-space
transpose in the blocked layout, which also drops the reorders around it: 204-209 against 206-212
ms, 1-1.5%.

Steps (`nchwc_decoder`):
1. `as_2d`: an unsqueeze of each input (B, C, F) -> (B, C, 1, F), every `Conv` and
   `ConvTranspose` in its 2-D form (kernel (1, k), its weight (O, I, 1, k)), the rest unchanged;
   the graph's last node, piper's `Unsqueeze` to (B, 1, 1, N), becomes an `Identity`. Only
   the op types in `PLAIN_OPS` are allowed: anything else (another vocoder) is refused.
2. ONNX Runtime optimizes the 2-D graph on this machine (its NCHWc block size is this CPU's,
   so this runs at load and the result is never kept across machines).
3. `keep_blocked`: an elementwise node (`BLOCKED_OPS`) that reads a blocked tensor runs on the
   blocked tensors instead, its NCHW operands reordered once each; a `ReorderInput` of a tensor
   whose blocked form exists is dropped; an `Add` of a convolution's output (no fused
   activation, read once) folds into the convolution as its Sum input. An NCHW operand is
   allowed only if made by a `ConvTranspose` or from such tensors (same shape as the blocked
   operand: broadcasting differs between the layouts).
4. `check_decoder` runs both graphs on random latents and refuses a rewrite whose audio
   differs by more than `TOLERANCE`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

log = logging.getLogger(__name__)

NCHWC_DOMAIN = "com.microsoft.nchwc"
PLAIN_OPS = frozenset({"Conv", "ConvTranspose", "LeakyRelu", "Add", "Div", "Mul", "Tanh"})
"""Op types `as_2d` accepts besides the final `Unsqueeze`: those of piper's HiFi-GAN."""
BLOCKED_OPS = frozenset({"Add", "Div", "Mul", "LeakyRelu"})
"""Elementwise ops `keep_blocked` runs on blocked tensors (their result is layout-free)."""
TOLERANCE = 1e-4
"""Largest |difference| of samples (in [-1, 1]) `check_decoder` accepts; joe's is 2.4e-7."""
_AXIS = "vf_nchwc/axis2"


def as_2d(model: onnx.ModelProto, inputs: Sequence[str]) -> onnx.ModelProto:
    """A copy of a 1-D decoder graph with its convolutions in 2-D form (height 1).

    Args:
        model: the decoder (`split.SplitGraph.decoder`), weights as initializers; each of
            `inputs` is (B, C, F) float32; its one output (B, 1, 1, N) float32 is made by an
            `Unsqueeze` of the (B, 1, N) waveform.
    Raises:
        ValueError: an op outside `PLAIN_OPS`, or a different last node.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    output = g.output[0].name
    others = {n.op_type for n in g.node if output not in n.output} - PLAIN_OPS
    if others:
        raise ValueError(f"decoder has ops the NCHWc rewrite does not handle: {sorted(others)}")
    last = next(n for n in g.node if output in n.output)
    if last.op_type != "Unsqueeze":
        raise ValueError(f"decoder output made by {last.op_type}, not Unsqueeze")
    weights = {init.name: init for init in g.initializer}
    renamed = {name: f"{name}/vf_2d" for name in inputs}
    nodes = [helper.make_node("Unsqueeze", [name, _AXIS], [renamed[name]], name=f"vf_nchwc/{name}")
             for name in inputs]
    reshaped: set[str] = set()
    for node in g.node:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.input[:] = [renamed.get(name, name) for name in node.input]
        if node is last:
            new.op_type = "Identity"
            del new.input[1:]
            del new.attribute[:]
        elif node.op_type in ("Conv", "ConvTranspose"):
            _conv_2d(new, weights, reshaped)
        nodes.append(new)
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.append(helper.make_tensor(_AXIS, TensorProto.INT64, [1], [2]))
    del g.value_info[:]
    return out


def _conv_2d(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto], done: set[str]) -> None:
    """Turn a 1-D Conv/ConvTranspose node (and its weight initializer) into its 2-D form."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if len(attrs.get("kernel_shape", [])) != 1 or attrs.get("auto_pad", b"NOTSET") != b"NOTSET":
        raise ValueError(f"{node.name}: not a 1-D convolution with explicit pads")
    if "output_padding" in attrs or "output_shape" in attrs:
        raise ValueError(f"{node.name}: output_padding/output_shape are not handled")
    name = node.input[1]
    if name not in weights:
        raise ValueError(f"{node.name}: its weight is not an initializer")
    if name not in done:
        array = np.ascontiguousarray(numpy_helper.to_array(weights[name])[:, :, None])
        weights[name].CopyFrom(numpy_helper.from_array(array, name))
        done.add(name)
    pads = attrs.get("pads", [0, 0])
    del node.attribute[:]
    node.attribute.extend([
        helper.make_attribute("kernel_shape", [1, attrs["kernel_shape"][0]]),
        helper.make_attribute("pads", [0, pads[0], 0, pads[1]]),
        helper.make_attribute("dilations", [1, attrs.get("dilations", [1])[0]]),
        helper.make_attribute("strides", [1, attrs.get("strides", [1])[0]]),
        helper.make_attribute("group", attrs.get("group", 1)),
    ])


def ort_optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` as ONNX Runtime optimizes it on this machine (``ORT_ENABLE_ALL``: NCHWc convs)."""
    with tempfile.TemporaryDirectory(prefix="voxflow-nchwc-") as tmp:
        path = Path(tmp) / "optimized.onnx"
        options = _one_thread_options()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(path)
        ort.InferenceSession(model.SerializeToString(), options,
                             providers=["CPUExecutionProvider"])
        return onnx.load(str(path))


def _one_thread_options() -> ort.SessionOptions:
    """Options of the load-time sessions here: one thread, warnings off (ORT warns that an
    optimized NCHWc graph is hardware specific, which is the point)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return options


def _attr(node: onnx.NodeProto, name: str) -> Any:
    """The value of `node`'s attribute `name`, or None."""
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def keep_blocked(model: onnx.ModelProto, extras: Sequence[str] = ()) -> onnx.ModelProto:
    """Keep ORT's blocked layout between NCHWc convolutions (see the module doc), in place.

    Args:
        model: an ORT-optimized graph (`ort_optimized`), nodes in topological order.
        extras: per-row inputs (a speaker embedding, (B, C, 1)): what is computed from them
            alone broadcasts over time, which the blocked layout does not, so it stays NCHW.
    """
    g = model.graph
    blocked: dict[str, str] = {}  # NCHW tensor -> the blocked tensor of the same values
    channels: dict[str, int] = {}  # blocked tensor, or upsampled NCHW tensor -> channel count
    upsampled: set[str] = set()  # NCHW tensors made by a ConvTranspose or elementwise of them
    per_row = {name for name in extras} | {f"{name}/vf_2d" for name in extras}
    weights = {init.name: init for init in g.initializer}
    scalars = {name for name, init in weights.items() if int(np.prod(init.dims)) == 1}
    wanted_blocked = {n.input[0] for n in g.node
                      if n.op_type == "ReorderInput" and n.domain == NCHWC_DOMAIN}
    nodes: list[onnx.NodeProto] = []

    def to_blocked(name: str) -> str:
        if name not in blocked:
            blocked[name] = f"{name}/vf_blocked"
            channels[blocked[name]] = channels[name]
            nodes.append(helper.make_node("ReorderInput", [name], [blocked[name]],
                                          name=f"vf_nchwc/in/{name}", domain=NCHWC_DOMAIN,
                                          channels_last=0))
        return blocked[name]

    for node in g.node:
        operands = [name for name in node.input if name and name not in scalars]
        if any(name in per_row for name in operands) and all(
                name in per_row or name in weights for name in operands):
            per_row.update(node.output)
        if node.domain == NCHWC_DOMAIN and node.op_type == "ReorderOutput":
            blocked[node.output[0]] = node.input[0]
            channels[node.input[0]] = int(_attr(node, "channels"))
        elif node.domain == "" and node.op_type == "ConvTranspose":
            upsampled.add(node.output[0])
            weight = weights[node.input[1]]
            channels[node.output[0]] = int(weight.dims[1]) * int(_attr(node, "group") or 1)
        elif (node.domain == "" and node.op_type in BLOCKED_OPS and operands
              and not any(name in per_row for name in operands)
              and all(name in upsampled or name in blocked for name in operands)):
            counts = {channels[blocked.get(name, name)] for name in operands}
            if len(counts) == 1:
                (count,) = counts
                if any(name in blocked for name in operands) or node.output[0] in wanted_blocked:
                    _run_blocked(node, nodes, to_blocked, scalars, count, blocked, channels)
                    continue
                upsampled.add(node.output[0])
                channels[node.output[0]] = count
        elif (node.domain == NCHWC_DOMAIN and node.op_type == "ReorderInput"
              and node.input[0] in blocked):
            nodes.append(helper.make_node("Identity", [blocked[node.input[0]]], [node.output[0]],
                                          name=node.name))
            continue
        nodes.append(node)
    nodes = _fold_sums(_prune(_drop_identities(nodes, {o.name for o in g.output}), g))
    del g.node[:]
    g.node.extend(_prune(nodes, g))
    return model


def _run_blocked(node: onnx.NodeProto, nodes: list[onnx.NodeProto],
                 to_blocked: Callable[[str], str], scalars: set[str], count: int,
                 blocked: dict[str, str], channels: dict[str, int]) -> None:
    """Append `node` run on blocked operands, and a `ReorderOutput` back to its NCHW output
    (dropped later if nothing reads it)."""
    new = helper.make_node(node.op_type,
                           [name if name in scalars else to_blocked(name) for name in node.input],
                           [f"{node.output[0]}/vf_blocked"], name=f"{node.name}/vf_blocked")
    new.attribute.extend(node.attribute)
    nodes.append(new)
    blocked[node.output[0]] = new.output[0]
    channels[new.output[0]] = count
    nodes.append(helper.make_node("ReorderOutput", [new.output[0]], [node.output[0]],
                                  name=f"vf_nchwc/out/{node.output[0]}", domain=NCHWC_DOMAIN,
                                  channels=count, channels_last=0))


def _drop_identities(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """`nodes` without their `Identity` nodes (readers read the source instead), except those
    that make a graph output (`outputs`)."""
    alias = {n.output[0]: n.input[0] for n in nodes
             if n.op_type == "Identity" and n.output[0] not in outputs}

    def root(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    kept = [n for n in nodes if n.op_type != "Identity" or n.output[0] not in alias]
    for node in kept:
        node.input[:] = [root(name) for name in node.input]
    return kept


def _prune(nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """`nodes` without those whose outputs nothing reads (repeatedly)."""
    while True:
        used = {o.name for o in graph.output} | {name for n in nodes for name in n.input}
        kept = [n for n in nodes if any(name in used for name in n.output)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


def _fold_sums(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """Fold ``Add(conv, other)`` of blocked tensors into the NCHWc conv's Sum input, where the
    conv has no fused activation and the Add is the only reader of its output."""
    maker = {name: n for n in nodes for name in n.output}
    readers: dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    folded: set[int] = set()
    for node in nodes:
        if not (node.op_type == "Add" and node.domain == "" and node.name.endswith("/vf_blocked")):
            continue
        for k in (0, 1):
            conv = maker.get(node.input[k])
            if (conv is not None and conv.domain == NCHWC_DOMAIN and conv.op_type == "Conv"
                    and len(conv.input) == 3 and _attr(conv, "activation") is None
                    and readers[conv.output[0]] == 1):
                conv.input.append(node.input[1 - k])
                conv.output[0] = node.output[0]
                folded.add(id(node))
                break
    return [n for n in nodes if id(n) not in folded]


def check_decoder(stock: onnx.ModelProto, rewritten: onnx.ModelProto,
                  inputs: Sequence[str], frames: int = 37) -> float:
    """Largest |difference| of the two graphs' audio on random inputs (2 rows, `frames`).

    Each of `inputs` gets standard-normal values (B=2, C from the stock graph's input, F =
    `frames`) from a fixed seed.
    """
    rng = np.random.default_rng(0)
    feed = {}
    for info in stock.graph.input:
        if info.name in inputs:
            dims = info.type.tensor_type.shape.dim
            c = dims[1].dim_value if dims[1].HasField("dim_value") else 1
            t = frames if not dims[2].HasField("dim_value") else dims[2].dim_value
            feed[info.name] = rng.standard_normal((2, c, t)).astype(np.float32)
    outputs = []
    for model in (stock, rewritten):
        session = ort.InferenceSession(model.SerializeToString(), _one_thread_options(),
                                       providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, feed)[0].reshape(2, -1))
    if outputs[0].shape != outputs[1].shape:
        return float("inf")
    return float(np.abs(outputs[0] - outputs[1]).max())


def nchwc_decoder(decoder: onnx.ModelProto, inputs: Sequence[str]) -> onnx.ModelProto | None:
    """The decoder rewritten to run in the NCHWc layout on this machine, or None where it
    cannot be (an op `as_2d` refuses, a rewritten graph ONNX Runtime cannot run, or audio off
    by more than `TOLERANCE`; logged).

    Args:
        decoder: the stock decoder graph, weights as initializers (not changed).
        inputs: its non-weight inputs, each (B, C, F) float32 (`split.SplitGraph.decoder_inputs`).
    """
    try:
        plain = as_2d(decoder, inputs)
    except ValueError as exc:
        log.info("decoder kept in its stock layout: %s", exc)
        return None
    try:
        rewritten = keep_blocked(ort_optimized(plain), inputs[1:])
        error = check_decoder(decoder, rewritten, inputs)
    except Exception as exc:  # noqa: BLE001 - any ORT failure on the rewrite: keep the stock graph
        log.warning("decoder kept in its stock layout: the NCHWc rewrite does not run: %s: %s",
                    type(exc).__name__, exc)
        return None
    if not error <= TOLERANCE:
        log.warning("decoder kept in its stock layout: the NCHWc rewrite's audio differs by %.3g",
                    error)
        return None
    return rewritten
