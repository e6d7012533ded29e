"""Cut a rewritten Piper graph in three: encoder, flow and HiFi-GAN decoder.

VITS inference is text encoder -> duration predictor -> length regulation -> prior sample z_p
(the encoder here: whole-segment, the durations need every phoneme), then the flow (residual
coupling layers, `/flow/*` in piper's export) and the HiFi-GAN decoder (`/dec/*`, most of the
compute and, at 22,050 Hz, most of the memory: its activations grow with the segment's
samples). Flow and decoder are convolutional over latent frames, so they run on windows of
frames (`decode.py`): the flow's receptive field is 32 frames each side (joe: 32 frames of
context give its output exactly, 28 within 2e-6, 16 within 4e-2), the decoder's 11.

The cuts are found from the graph, not from tensor names: the decoder is every node named
``/dec/...`` and its inputs from outside (the masked latent ``z * y_mask``, (B, C, F) float32,
and a multi-speaker voice's speaker embedding); the flow starts at what its first ``/flow/``
node reads (z_p) and ends at the Mul by the frame mask that makes the latent. The three parts
are extracted with ONNX's own `onnx.utils.Extractor`; composed they give the original graph's
output bit for bit (voice joe, tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper, shape_inference
from onnx.utils import Extractor

DECODER_PREFIX = "/dec/"
"""Node-name prefix of the HiFi-GAN decoder in piper's `export_onnx` graphs."""
FLOW_PREFIX = "/flow/"
"""Node-name prefix of the flow (residual coupling layers) in piper's `export_onnx` graphs."""
OUTPUT = "output"
"""The waveform output of piper's graphs, (B, 1, N) float32 (N = frames * hop)."""


@dataclass(frozen=True)
class SplitGraph:
    """The three parts of a voice graph.

    Attributes:
        encoder: graph inputs -> `flow_inputs` and the durations.
        flow: `flow_inputs` -> the masked latent (``decoder_inputs[0]``).
        decoder: `decoder_inputs` -> `OUTPUT`.
        flow_inputs: the prior sample z_p (B, C, F) and the frame mask y_mask (B, 1, F), both
            float32, then any per-row input (a speaker embedding).
        decoder_inputs: the masked latent z * y_mask (B, C, F) float32, then any per-row input.
    """

    encoder: onnx.ModelProto
    flow: onnx.ModelProto
    decoder: onnx.ModelProto
    flow_inputs: tuple[str, ...]
    decoder_inputs: tuple[str, ...]


def _outside_inputs(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> list[str]:
    """Tensors `nodes` read that no node of theirs makes and that are not weights, in order."""
    inside = {out for n in nodes for out in n.output}
    weights = {init.name for init in graph.initializer}
    outside: list[str] = []
    for node in nodes:
        for name in node.input:
            if name and name not in inside and name not in weights and name not in outside:
                outside.append(name)
    return outside


def decoder_inputs(graph: onnx.GraphProto) -> list[str]:
    """Tensors the decoder's nodes read from outside it (not weights), latent first.

    Raises:
        ValueError: no decoder nodes, or its first node does not read a tensor from outside.
    """
    nodes = [n for n in graph.node if n.name.startswith(DECODER_PREFIX)]
    if not nodes:
        raise ValueError(f"graph has no decoder nodes (names starting '{DECODER_PREFIX}')")
    outside = _outside_inputs(graph, nodes)
    # the decoder's first node (conv_pre in piper's export) reads the masked latent; anything
    # else from outside is per row (a multi-speaker voice's speaker embedding to its cond conv)
    latent = nodes[0].input[0]
    if latent not in outside:
        raise ValueError(f"the decoder's first node reads '{latent}', not a tensor from the flow")
    return [latent] + [name for name in outside if name != latent]


def flow_inputs(graph: onnx.GraphProto, latent: str) -> list[str]:
    """The flow's inputs: z_p (what its first node reads) and y_mask (the mask the flow's output
    is multiplied by to make `latent`).

    Raises:
        ValueError: no flow nodes, or `latent` is not ``Mul(flow output, mask)``.
    """
    nodes = [n for n in graph.node if n.name.startswith(FLOW_PREFIX)]
    if not nodes:
        raise ValueError(f"graph has no flow nodes (names starting '{FLOW_PREFIX}')")
    made_by_flow = {out for n in nodes for out in n.output}
    mul = next((n for n in graph.node if latent in n.output), None)
    if mul is None or mul.op_type != "Mul" or len(mul.input) != 2:
        raise ValueError(f"the latent '{latent}' is not made by a Mul of the flow's output")
    masks = [name for name in mul.input if name not in made_by_flow]
    if len(masks) != 1:
        raise ValueError(f"the latent '{latent}' is not the flow's output times a mask")
    return [nodes[0].input[0], masks[0]]


def _declare(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """`model` with shapes inferred and a value_info for each of `names`: Extractor needs one
    per cut tensor, and shape inference does not always reach one (dynamic shapes through
    Range), so a cut tensor it missed is declared float of any shape."""
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    known = {vi.name for vi in (*g.value_info, *g.input, *g.output)}
    g.value_info.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                        for name in names if name not in known)
    return inferred


def split_graph(model: onnx.ModelProto, durations_output: str) -> SplitGraph:
    """Cut `model` (already rewritten by `loader.rewrite_graph`) into encoder, flow and decoder.

    Args:
        durations_output: the durations tensor the rewrite exposed; stays an encoder output.
    Raises:
        ValueError: the graph has no `/flow/` flow or `/dec/` decoder, or they do not meet at a
            masked latent.
    """
    dec_names = decoder_inputs(model.graph)
    latent, extras = dec_names[0], dec_names[1:]
    flow_names = [*flow_inputs(model.graph, latent), *extras]
    extractor = Extractor(_declare(model, [*flow_names, *dec_names]))
    graph_inputs = [i.name for i in model.graph.input]
    encoder = extractor.extract_model(graph_inputs, [*flow_names, durations_output])
    flow = extractor.extract_model(flow_names, [latent])
    decoder = extractor.extract_model(dec_names, [OUTPUT])
    return SplitGraph(encoder, flow, decoder, tuple(flow_names), tuple(dec_names))
