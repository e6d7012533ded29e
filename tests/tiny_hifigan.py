"""A tiny random HiFi-GAN decoder graph in the shape of piper's `/dec/` export (tests only).

`build_tiny_hifigan` writes, with `onnx.helper`, what piper's export of a VITS generator with
ResBlock2 looks like after `split.split_graph` (node names ``/dec/...``, the first LeakyReLU of
each MRF shared by its branches, the branch sum as an Add chain divided by a constant, an
`Unsqueeze` to (B, 1, 1, N) at the end), but with other numbers than joe's so nothing can
be hard-coded: latent 6 channels, conv_pre k 5, two upsamplings (k 8 s 4, k 4 s 2: hop 8),
MRFs of two branches (k 3 dilations 1, 2 and k 5 dilations 1, 3, 5: three steps), conv_post
k 7 without bias, and optionally a multi-speaker voice's cond conv (1x1 on a (B, 3, 1)
speaker embedding) added to conv_pre's output.

Lag table (`stream_decoder.HifiGan.lags`): conv_pre 2; ups.0 2*4 + 2 = 10; MRF +18 (the
k 5 branch: 2 + 6 + 10) = 28; ups.1 28*2 + 1 = 57; MRF +18 = 75; conv_post +3 = 78 samples.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LATENT = "/Mul_7_output_0"
SPEAKER = "g"
CHANNELS = 6
SPEAKER_CHANNELS = 3
HOP = 8
LOOKAHEAD = 78
BRANCHES = ((3, (1, 2)), (5, (1, 3, 5)))
"""(kernel, dilations) of each MRF branch."""
UPS = ((8, 4, 16), (4, 2, 8))
"""(kernel, stride, output channels) of each upsampling; conv_pre makes 16 channels."""


class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int) -> str:
        array = (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv(self, x: str, name: str, c_in: int, c_out: int, k: int, d: int = 1,
             bias: bool = True) -> str:
        w = self.weight(f"{name}.weight", (c_out, c_in, k), c_in * k)
        inputs = [x, w] + ([self.weight(f"{name}.bias", (c_out,), 4)] if bias else [])
        p = (k - 1) * d // 2
        return self.node("Conv", inputs, f"/dec/{name}/Conv", kernel_shape=[k],
                         dilations=[d], pads=[p, p], strides=[1], group=1)


def _mrf(g: _Graph, u: str, index: int, channels: int) -> str:
    """Two ResBlock2 branches on `u` (their first LeakyReLU shared), summed, halved."""
    shared = g.node("LeakyRelu", [u], f"/dec/resblocks.{index}/LeakyRelu", alpha=0.1)
    ends = []
    for b, (k, dilations) in enumerate(BRANCHES):
        block, h, act = f"resblocks.{index + b}", u, shared
        for j, d in enumerate(dilations):
            if j:
                act = g.node("LeakyRelu", [h], f"/dec/{block}/LeakyRelu_{j}", alpha=0.1)
            conv = g.conv(act, f"{block}/convs.{j}", channels, channels, k, d)
            h = g.node("Add", [conv, h], f"/dec/{block}/Add_{j}")
        ends.append(h)
    total = g.node("Add", ends, f"/dec/Add_{index}")
    two = g.weight(f"/dec/two_{index}", (), 1)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array(2.0, np.float32), two))
    return g.node("Div", [total, two], f"/dec/Div_{index}")


def build_tiny_hifigan(speaker: bool = False, seed: int = 0) -> onnx.ModelProto:
    """The decoder graph; inputs `LATENT` (B, CHANNELS, F) [and `SPEAKER` (B, 3, 1)],
    output ``output`` (B, 1, 1, F * HOP) float32."""
    g = _Graph(seed)
    x = g.conv(LATENT, "conv_pre", CHANNELS, 16, 5)
    if speaker:
        cond = g.conv(SPEAKER, "cond", SPEAKER_CHANNELS, 16, 1)
        x = g.node("Add", [x, cond], "/dec/Add")
    c_in = 16
    for i, (k, s, c_out) in enumerate(UPS):
        act = g.node("LeakyRelu", [x], f"/dec/LeakyRelu_{i}", alpha=0.1)
        w = g.weight(f"/dec/ups.{i}.weight", (c_in, c_out, k), c_in)
        b = g.weight(f"/dec/ups.{i}.bias", (c_out,), 4)
        u = g.node("ConvTranspose", [act, w, b], f"/dec/ups.{i}/ConvTranspose",
                   kernel_shape=[k], strides=[s], pads=[(k - s) // 2] * 2, dilations=[1])
        x = _mrf(g, u, i * len(BRANCHES), c_out)
        c_in = c_out
    act = g.node("LeakyRelu", [x], "/dec/LeakyRelu_post", alpha=0.01)
    post = g.conv(act, "conv_post", c_in, 1, 7, bias=False)
    tanh = g.node("Tanh", [post], "/dec/Tanh")
    g.inits.append(helper.make_tensor("axes1", TensorProto.INT64, [1], [1]))
    g.nodes.append(helper.make_node("Unsqueeze", [tanh, "axes1"], ["output"],
                                    name="/Unsqueeze_11"))
    inputs = [helper.make_tensor_value_info(LATENT, TensorProto.FLOAT, ["B", CHANNELS, "F"])]
    if speaker:
        inputs.append(helper.make_tensor_value_info(SPEAKER, TensorProto.FLOAT,
                                                    ["B", SPEAKER_CHANNELS, 1]))
    graph = helper.make_graph(
        g.nodes, "tiny_hifigan", inputs,
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", 1, 1, "N"])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
