"""Cut a rewritten Piper graph at the latent: encoder (ids -> latent), decoder (latent -> wave).

VITS inference is text encoder -> duration predictor -> length regulation -> flow (all cheap,
whole-segment) and then the HiFi-GAN decoder (`/dec/*` in piper's export, most of the compute
and, at 22,050 Hz, most of the memory: its activations grow with the segment's samples). The
decoder is convolutional over latent frames, so it can run on windows of frames (`synth.py`).

The cut is found from the graph, not from names of tensors: the decoder is every node named
``/dec/...``; its inputs from outside (the masked latent ``z * y_mask``, (B, C, F) float32, and
a multi-speaker voice's speaker embedding) become the encoder's extra outputs and the decoder's
inputs, with ONNX's own `onnx.utils.Extractor`. Composing the two halves gives the original
graph's output bit for bit (voice joe, tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper, shape_inference
from onnx.utils import Extractor

DECODER_PREFIX = "/dec/"
"""Node-name prefix of the HiFi-GAN decoder in piper's `export_onnx` graphs."""
OUTPUT = "output"
"""The waveform output of piper's graphs, (B, 1, N) float32 (N = frames * hop)."""


@dataclass(frozen=True)
class SplitGraph:
    """The two halves: `encoder` outputs `decoder_inputs` (the latent first) and the durations;
    `decoder` takes `decoder_inputs` and outputs `OUTPUT`."""

    encoder: onnx.ModelProto
    decoder: onnx.ModelProto
    decoder_inputs: tuple[str, ...]


def decoder_inputs(graph: onnx.GraphProto) -> list[str]:
    """Tensors the decoder's nodes read from outside it (not weights), latent first.

    Raises:
        ValueError: no decoder nodes, or its first node does not read a tensor from outside.
    """
    nodes = [n for n in graph.node if n.name.startswith(DECODER_PREFIX)]
    if not nodes:
        raise ValueError(f"graph has no decoder nodes (names starting '{DECODER_PREFIX}')")
    inside = {out for n in nodes for out in n.output}
    weights = {init.name for init in graph.initializer}
    outside: list[str] = []
    for node in nodes:
        for name in node.input:
            if name and name not in inside and name not in weights and name not in outside:
                outside.append(name)
    # the decoder's first node (conv_pre in piper's export) reads the masked latent; anything
    # else from outside is per row (a multi-speaker voice's speaker embedding to its cond conv)
    latent = nodes[0].input[0]
    if latent not in outside:
        raise ValueError(f"the decoder's first node reads '{latent}', not a tensor from the flow")
    return [latent] + [name for name in outside if name != latent]


def split_at_decoder(model: onnx.ModelProto, durations_output: str) -> SplitGraph:
    """Cut `model` (already rewritten by `loader.rewrite_graph`) into encoder and decoder.

    Args:
        durations_output: the durations tensor the rewrite exposed; stays an encoder output.
    Raises:
        ValueError: the graph has no `/dec/` decoder or its cut is not a single latent.
    """
    names = decoder_inputs(model.graph)
    # Extractor needs a value_info per cut tensor; shape inference does not always reach one
    # (dynamic shapes through Range), so a cut tensor it missed is declared float of any shape.
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    known = {vi.name for vi in (*g.value_info, *g.input, *g.output)}
    g.value_info.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                        for name in names if name not in known)
    extractor = Extractor(inferred)
    graph_inputs = [i.name for i in model.graph.input]
    encoder = extractor.extract_model(graph_inputs, [*names, durations_output])
    decoder = extractor.extract_model(names, [OUTPUT])
    return SplitGraph(encoder, decoder, tuple(names))
