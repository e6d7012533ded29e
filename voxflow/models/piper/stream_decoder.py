"""A state-carrying streaming form of a Piper voice's HiFi-GAN decoder (issue 42).

Not on the serving path: measured, it is slower than the windows it would replace. In ONNX
Runtime every Concat of a cache and every residual crop is a copy of a whole activation, and
at the high-rate layers those copies cost more than the context frames they save (joe, the 30
lines of sentences.txt, decoder only, 32/80/200/rest blocks, `benchmarks/piper_stream_decoder.py`,
idle 2-core Intel Xeon: +12.9% over one whole decode on one thread and +40.8% on two, against
+3.6% and +14.2% for today's windows of the same sizes). The server removes the seams' flow
recompute with `stream_flow.py` and decodes a lone segment's rest side by side
(`decode.SideBySide`) instead; this module stays as the exact oracle of the lag arithmetic
(docs/notes/piper-streaming-decoder.md, section 5) and the starting point of a form with fewer
copies (the note's "two-piece" convs).

`decode.py` decodes windows of latent frames with recomputed context pads (11-12 frames each
side). This module instead generates, from the voice's own decoder graph (`split.py`'s `/dec/`
part, stock 1-D layout), a new ONNX graph that decodes a *block* of latent frames given carried
state and returns the new state, so that consecutive blocks of any sizes decode each frame once
and their concatenated output equals the whole-segment decode within float rounding. Design:
`docs/notes/piper-streaming-decoder.md`, section 2 (layer table, lags, state sizes) and
section 3 option (b).

Structure read from the graph (`parse_hifigan`; anything else raises ValueError):
conv_pre (Conv) [+ cond(g), a multi-speaker voice's speaker-embedding conv] ->
N x [LeakyReLU -> ups.i (ConvTranspose) -> MRF] -> LeakyReLU -> conv_post (Conv) -> Tanh,
where an MRF is a sum of branches (any Add tree) divided by a constant, and a branch is
ResBlock2-style steps ``h = h + conv(leaky_relu(h))``. Kernels, strides, dilations, pads,
LeakyReLU slopes and weights all come from the graph's nodes and initializers.

Streaming form (`build_stream_graph`). Every tensor of the decoder is a *stream* of columns at
its rate r (columns per latent frame: 1 before ups.0, 8, 64, 256 for joe). A call fed latent
frames [p, p + n) produces stream columns [p r, (p + n) r) of every tensor, and stream column
m holds the whole decode's column m - lag, where lag is the tensor's delay in its own columns:
- a Conv (stride 1, pads pl + pr = (k - 1) d) runs "valid" (pads 0) on cat(cache, x), the
  cache being its last (k - 1) d input columns: lag_out = lag_in + pr;
- a ConvTranspose (stride s, s < k <= 2 s, pads pl + pr = k - s) runs with pads 0 on
  cat(last input column, x) and keeps the s n columns [s, (n + 1) s) that are complete:
  lag_out = lag_in s + pl (its first-edge crop);
- in an MRF each branch lags by the sum of its convs' pr (joe: 3, 16, 45 columns); the
  shorter branches read their input from one shared input cache delayed by the difference,
  so all branches come out at the MRF's largest branch lag and add up aligned. A residual
  skip is the conv's own cached input, cropped. Caches hold pre-activation columns and the
  LeakyReLU is applied to cat(cache, x) (pointwise, so equal), which un-shares the export's
  shared first LeakyReLU of each MRF.
The output's lag is the decoder's lookahead (`HifiGan.lookahead`, samples): joe's is
3*256 + 4*32 + 45*32 + 4*4 + 45*4 + 2 + 45 + 3 = 2,582 samples = 10.09 frames, the note's
per-layer sum. So after latent frames [0, e) the first e hop - lookahead samples are final.

Segment edges. The whole decode zero-pads every conv's input on both sides. The initial state
is all zeros, and in a call where some column of a conv's input lies outside the segment
(stream column m - lag < 0, or >= the segment's columns) that input is multiplied by a 0/1 mask
(the "edge" graph, `masked=True`; `start` and `frames` inputs say where each row is), which
makes the columns before the start and after the end exactly the zero padding. `finish` feeds
ceil(lookahead / hop) zero frames through the edge graph to emit the last samples. Calls whose
rows are all past the first `HifiGan.steady_from` frames run the "steady" graph, without
masks. The driver (`StreamingDecoder`) drops the stream's first `lookahead` samples and stops
at frames * hop, so a segment's outputs add up to exactly frames * hop samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from voxflow.models.onnx_memory import ArenaSession, SharedWeights, open_session

STREAM_OUTPUT = "samples"
"""The stream graph's waveform output: (B, 1, n * hop) float32 stream columns."""
START_INPUT = "start"
"""Edge graph input: (B,) int64, latent frames of each row fed before this call."""
FRAMES_INPUT = "frames"
"""Edge graph input: (B,) int64, the row's true latent frames fed so far, this call's included
(at `StreamingDecoder.finish`, the segment's frames: the zero frames fed are padding)."""
_PREFIX = "vf_stream/"


# ----------------------------------------------------------------------------------------------
# The layer table, read from the graph


@dataclass(frozen=True)
class ConvSpec:
    """A 1-D Conv with stride 1 (or a ConvTranspose, see `UpSpec`), as read from its node.

    Attributes:
        name: the node's name; weight, bias: initializer names (bias None when absent).
        kernel, dilation: k and d; pads: (left, right) zero padding, left + right = (k-1) d.
        c_in, c_out: channels.
    """

    name: str
    weight: str
    bias: str | None
    kernel: int
    dilation: int
    pads: tuple[int, int]
    c_in: int
    c_out: int

    @property
    def history(self) -> int:
        """Input columns the conv carries between calls: (k - 1) d."""
        return (self.kernel - 1) * self.dilation

    @property
    def lag(self) -> int:
        """Output columns the streamed conv lags its input by: its right pad."""
        return self.pads[1]


@dataclass(frozen=True)
class UpSpec:
    """A 1-D ConvTranspose (upsampling by `stride`), s < k <= 2 s, pads left + right = k - s
    (so T input columns make T s output columns)."""

    name: str
    weight: str
    bias: str | None
    kernel: int
    stride: int
    pads: tuple[int, int]
    c_in: int
    c_out: int


@dataclass(frozen=True)
class ResStep:
    """``h = h + conv(leaky_relu(h, alpha))`` (one step of a ResBlock2)."""

    alpha: float
    conv: ConvSpec


@dataclass(frozen=True)
class Mrf:
    """A multi-receptive-field fusion: branches of `ResStep`s on one input, summed as `tree`
    (nested pairs of branch indices, the export's Add order), divided by `divisor`."""

    branches: tuple[tuple[ResStep, ...], ...]
    tree: int | tuple
    divisor: float

    def branch_lag(self, b: int) -> int:
        """Columns branch b lags its input by: the sum of its convs' right pads."""
        return sum(step.conv.lag for step in self.branches[b])

    @property
    def lag(self) -> int:
        """Columns the MRF lags its input by: its slowest branch's lag (joe: 45)."""
        return max(self.branch_lag(b) for b in range(len(self.branches)))

    def delay(self, b: int) -> int:
        """Extra input delay of branch b, so that it comes out aligned with the slowest."""
        return self.lag - self.branch_lag(b)

    @property
    def input_history(self) -> int:
        """Columns of the MRF's shared input cache: max over branches of its first conv's
        history plus its delay (joe: max(2 + 42, 8 + 29, 18 + 0) = 44)."""
        return max(steps[0].conv.history + self.delay(b) for b, steps in enumerate(self.branches))


@dataclass(frozen=True)
class Stage:
    """``leaky_relu(x, alpha) -> up -> mrf``."""

    alpha: float
    up: UpSpec
    mrf: Mrf


@dataclass(frozen=True)
class HifiGan:
    """A HiFi-GAN generator's layer table (`parse_hifigan`).

    Attributes:
        latent: the input latent's name, (B, C, F) float32.
        conv_pre, stages, post_alpha, conv_post: the layers; the output is tanh(conv_post(
            leaky_relu(x, post_alpha))).
        cond: the speaker-embedding conv of a multi-speaker voice (its output, (B, C, 1), is
            added to conv_pre's), and `speaker` the input it reads, (B, gin, 1) float32.
        constants: the float initializers the layers use (weights, biases), by name.
    """

    latent: str
    conv_pre: ConvSpec
    stages: tuple[Stage, ...]
    post_alpha: float
    conv_post: ConvSpec
    cond: ConvSpec | None = None
    speaker: str | None = None
    constants: dict[str, onnx.TensorProto] = field(default_factory=dict, compare=False)

    @property
    def hop(self) -> int:
        """Samples per latent frame: the product of the ConvTranspose strides."""
        return math.prod(stage.up.stride for stage in self.stages)

    def rates(self) -> list[int]:
        """Columns per latent frame after each stage's ConvTranspose (joe: 8, 64, 256)."""
        return list(np.cumprod([stage.up.stride for stage in self.stages]))

    def lags(self) -> list[tuple[str, int, int]]:
        """(layer, rate, lag of its output in its own columns), in order: the note's table,
        cumulated. Conv: + pr; ConvTranspose: lag * s + pl; MRF: + its slowest branch."""
        out = [("conv_pre", 1, self.conv_pre.lag)]
        lag = self.conv_pre.lag
        for i, (stage, rate) in enumerate(zip(self.stages, self.rates(), strict=True)):
            lag = lag * stage.up.stride + stage.up.pads[0]
            out.append((stage.up.name or f"ups.{i}", int(rate), lag))
            lag += stage.mrf.lag
            out.append((f"mrf.{i}", int(rate), lag))
        out.append(("conv_post", self.hop, lag + self.conv_post.lag))
        return out

    @property
    def lookahead(self) -> int:
        """Samples the stream lags the whole decode by (joe: 2,582 = 10.09 frames)."""
        return self.lags()[-1][2]

    @property
    def flush_frames(self) -> int:
        """Zero latent frames `StreamingDecoder.finish` feeds: ceil(lookahead / hop)."""
        return -(-self.lookahead // self.hop)

    @property
    def steady_from(self) -> int:
        """Frames fed after which no conv input of a call reaches before the segment's start
        (ceil of the largest lag / rate of a layer's output, which bounds every masked
        tensor's; joe: 11): from there the steady graph runs."""
        return math.ceil(max(lag / rate for _, rate, lag in self.lags()))


# ----------------------------------------------------------------------------------------------
# Parsing


class _Nodes:
    """Producer and consumer maps of a graph, with checks that raise a clear ValueError."""

    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.graph = g
        self.producer = {out: node for node in g.node for out in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in g.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.inits = {init.name: init for init in g.initializer}
        for node in g.node:
            if node.op_type == "Constant":
                self.inits[node.output[0]] = helper.get_attribute_value(node.attribute[0])

    def users(self, tensor: str) -> list[onnx.NodeProto]:
        return self.consumers.get(tensor, [])

    def single(self, tensor: str, *op_types: str) -> onnx.NodeProto:
        """The one node reading `tensor`, of one of `op_types`."""
        users = self.users(tensor)
        if len(users) != 1 or users[0].op_type not in op_types:
            found = [f"{n.op_type} {n.name}" for n in users] or "nothing"
            raise ValueError(f"not a HiFi-GAN decoder: '{tensor}' should be read by one "
                             f"{'/'.join(op_types)}, is read by {found}")
        return users[0]

    def scalar(self, name: str) -> float:
        if name not in self.inits:
            raise ValueError(f"not a HiFi-GAN decoder: '{name}' is not a constant")
        array = numpy_helper.to_array(self.inits[name])
        if array.size != 1:
            raise ValueError(f"not a HiFi-GAN decoder: '{name}' is not a scalar")
        return float(array.reshape(()))

    def weight(self, name: str) -> np.ndarray:
        if name not in self.inits:
            raise ValueError(f"not a HiFi-GAN decoder: weight '{name}' is not an initializer")
        return numpy_helper.to_array(self.inits[name])


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _alpha(node: onnx.NodeProto) -> float:
    if node.op_type != "LeakyRelu":
        raise ValueError(f"not a HiFi-GAN decoder: expected LeakyRelu, found {node.op_type} "
                         f"{node.name}")
    return float(_attrs(node).get("alpha", 0.01))


def _conv_common(node: onnx.NodeProto, nodes: _Nodes) -> tuple[dict, np.ndarray, str | None]:
    attrs = _attrs(node)
    if len(attrs.get("kernel_shape", [0])) != 1 or attrs.get("auto_pad", b"NOTSET") != b"NOTSET":
        raise ValueError(f"not a HiFi-GAN decoder: {node.name} is not a 1-D conv with pads")
    if attrs.get("group", 1) != 1 or "output_padding" in attrs or "output_shape" in attrs:
        raise ValueError(f"not a HiFi-GAN decoder: {node.name} has groups or output padding")
    weight = nodes.weight(node.input[1])
    if weight.ndim != 3 or list(attrs.get("kernel_shape", weight.shape[2:])) != [weight.shape[2]]:
        raise ValueError(f"not a HiFi-GAN decoder: {node.name}'s kernel_shape is not its "
                         "weight's")
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None:
        nodes.weight(bias)
    return attrs, weight, bias


def _conv(node: onnx.NodeProto, nodes: _Nodes) -> ConvSpec:
    """The `ConvSpec` of a Conv node; ValueError unless stride 1 and 'same' pads."""
    if node.op_type != "Conv":
        raise ValueError(f"not a HiFi-GAN decoder: expected Conv, found {node.op_type} "
                         f"{node.name}")
    attrs, weight, bias = _conv_common(node, nodes)
    k, d = int(weight.shape[2]), int(attrs.get("dilations", [1])[0])
    pads = tuple(int(p) for p in attrs.get("pads", [0, 0]))
    if attrs.get("strides", [1])[0] != 1 or sum(pads) != (k - 1) * d or min(pads) < 0:
        raise ValueError(f"not a HiFi-GAN decoder: {node.name} is not a stride-1 conv whose "
                         f"pads {pads} keep the length (k {k}, dilation {d})")
    return ConvSpec(node.name, node.input[1], bias, k, d, (pads[0], pads[1]),
                    int(weight.shape[1]), int(weight.shape[0]))


def _up(node: onnx.NodeProto, nodes: _Nodes) -> UpSpec:
    """The `UpSpec` of a ConvTranspose node; ValueError unless s < k <= 2 s, pads k - s."""
    attrs, weight, bias = _conv_common(node, nodes)
    k, s = int(weight.shape[2]), int(attrs.get("strides", [1])[0])
    pads = tuple(int(p) for p in attrs.get("pads", [0, 0]))
    if attrs.get("dilations", [1])[0] != 1 or not s < k <= 2 * s or sum(pads) != k - s \
            or min(pads) < 0:
        raise ValueError(f"not a HiFi-GAN decoder: {node.name} (k {k}, stride {s}, pads {pads})"
                         " is not an upsampling by its stride with s < k <= 2 s")
    return UpSpec(node.name, node.input[1], bias, k, s, (pads[0], pads[1]),
                  int(weight.shape[0]), int(weight.shape[1]))


def _other(add: onnx.NodeProto, name: str) -> str:
    """The operand of a two-input Add that is not `name`."""
    if add.op_type != "Add" or len(add.input) != 2 or name not in add.input:
        raise ValueError(f"not a HiFi-GAN decoder: {add.name} is not an Add reading '{name}'")
    return add.input[1] if add.input[0] == name else add.input[0]


def _branch(conv_node: onnx.NodeProto, alpha: float, u: str,
            nodes: _Nodes) -> tuple[tuple[ResStep, ...], str]:
    """The steps of the branch whose first conv is `conv_node` (reading leaky_relu(u)); and
    the tensor it ends with."""
    steps: list[ResStep] = []
    h = u
    while True:
        spec = _conv(conv_node, nodes)
        add = nodes.single(conv_node.output[0], "Add")
        if _other(add, conv_node.output[0]) != h:
            raise ValueError(f"not a HiFi-GAN decoder: {add.name} is not the residual add "
                             f"of {conv_node.name}")
        steps.append(ResStep(alpha, spec))
        h = add.output[0]
        relus = [n for n in nodes.users(h) if n.op_type == "LeakyRelu"]
        if not relus:
            return tuple(steps), h
        if len(relus) != 1 or len(nodes.users(h)) != 2:
            raise ValueError(f"not a HiFi-GAN decoder: '{h}' is not one residual step's input")
        alpha = _alpha(relus[0])
        conv_node = nodes.single(relus[0].output[0], "Conv")


def _sum_tree(tensor: str, ends: dict[str, int], nodes: _Nodes) -> int | tuple:
    """The Add tree making `tensor` out of branch ends (nested pairs of branch indices)."""
    if tensor in ends:
        return ends[tensor]
    node = nodes.producer.get(tensor)
    if node is None or node.op_type != "Add":
        raise ValueError(f"not a HiFi-GAN decoder: '{tensor}' is not a sum of MRF branches")
    return (_sum_tree(node.input[0], ends, nodes), _sum_tree(node.input[1], ends, nodes))


def _leaves(tree: int | tuple) -> list[int]:
    return [tree] if isinstance(tree, int) else [i for t in tree for i in _leaves(t)]


def _mrf(u: str, nodes: _Nodes) -> tuple[Mrf, str]:
    """The MRF reading `u` (a ConvTranspose's output) and the tensor it ends with (the Div)."""
    branches: list[tuple[ResStep, ...]] = []
    ends: dict[str, int] = {}
    for relu in (n for n in nodes.users(u) if n.op_type == "LeakyRelu"):
        alpha = _alpha(relu)
        for conv_node in nodes.users(relu.output[0]):
            steps, end = _branch(conv_node, alpha, u, nodes)
            ends[end] = len(branches)
            branches.append(steps)
    if not branches:
        raise ValueError(f"not a HiFi-GAN decoder: no resblock reads '{u}'")
    last = nodes.users(next(iter(ends)))
    while last and last[0].op_type == "Add":  # up the Add tree to the Div
        last = nodes.users(last[0].output[0])
    if len(last) != 1 or last[0].op_type != "Div":
        raise ValueError(f"not a HiFi-GAN decoder: the branches reading '{u}' are not summed "
                         "and divided")
    div = last[0]
    tree = _sum_tree(div.input[0], ends, nodes)
    if sorted(_leaves(tree)) != list(range(len(branches))):
        raise ValueError(f"not a HiFi-GAN decoder: {div.name} does not sum each branch once")
    return Mrf(tuple(branches), tree, nodes.scalar(div.input[1])), div.output[0]


def _conv_pre(latent: str, extras: Sequence[str],
              nodes: _Nodes) -> tuple[ConvSpec, ConvSpec | None, str]:
    """conv_pre, the cond conv (multi-speaker) and the tensor after them."""
    pre_node = nodes.single(latent, "Conv")
    pre, x = _conv(pre_node, nodes), pre_node.output[0]
    if not extras:
        return pre, None, x
    if len(extras) != 1:
        raise ValueError(f"not a HiFi-GAN decoder: per-row inputs {list(extras)}, expected at "
                         "most a speaker embedding")
    cond_node = nodes.single(extras[0], "Conv")
    cond = _conv(cond_node, nodes)
    add = nodes.single(x, "Add")
    if _other(add, x) != cond_node.output[0] or cond.kernel != 1:
        raise ValueError(f"not a HiFi-GAN decoder: '{extras[0]}' is not a 1x1 cond conv added "
                         "to conv_pre's output")
    return pre, cond, add.output[0]


def parse_hifigan(model: onnx.ModelProto, inputs: Sequence[str]) -> HifiGan:
    """Read the HiFi-GAN layer table of a decoder graph (`split.SplitGraph.decoder`, stock
    1-D layout, weights as initializers).

    Args:
        inputs: the decoder's inputs (`split.SplitGraph.decoder_inputs`): the latent
            (B, C, F) float32, then at most a speaker embedding (B, gin, 1).
    Raises:
        ValueError: the graph is not conv_pre [+ cond] -> [LeakyReLU -> ConvTranspose -> MRF
            of ResBlock2 branches / constant] x N -> LeakyReLU -> conv_post -> Tanh (the
            message says where it differs).
    """
    nodes = _Nodes(model)
    latent = inputs[0]
    conv_pre, cond, x = _conv_pre(latent, inputs[1:], nodes)
    stages: list[Stage] = []
    while True:
        relu = nodes.single(x, "LeakyRelu")
        alpha = _alpha(relu)
        nxt = nodes.single(relu.output[0], "ConvTranspose", "Conv")
        if nxt.op_type == "Conv":
            break
        up = _up(nxt, nodes)
        mrf, x = _mrf(nxt.output[0], nodes)
        stages.append(Stage(alpha, up, mrf))
    if not stages:
        raise ValueError("not a HiFi-GAN decoder: no ConvTranspose upsampling after conv_pre")
    conv_post = _conv(nxt, nodes)
    tanh = nodes.single(nxt.output[0], "Tanh")
    outputs = {o.name for o in model.graph.output}
    tail = nodes.users(tanh.output[0])
    if tanh.output[0] not in outputs and not (len(tail) == 1 and tail[0].output[0] in outputs
                                              and tail[0].op_type in ("Unsqueeze", "Identity")):
        raise ValueError("not a HiFi-GAN decoder: its Tanh does not make the graph's output")
    names = {conv_pre.weight, conv_pre.bias, conv_post.weight, conv_post.bias}
    if cond is not None:
        names |= {cond.weight, cond.bias}
    for stage in stages:
        names |= {stage.up.weight, stage.up.bias}
        names |= {s.conv.weight for steps in stage.mrf.branches for s in steps}
        names |= {s.conv.bias for steps in stage.mrf.branches for s in steps}
    constants = {name: nodes.inits[name] for name in names if name}
    return HifiGan(latent, conv_pre, tuple(stages), alpha, conv_post, cond,
                   inputs[1] if cond is not None else None, constants)


# ----------------------------------------------------------------------------------------------
# Building the stream graph


@dataclass(frozen=True)
class StateSpec:
    """One carried state tensor: graph input `name`, output `name`.out, (B, channels, cols)."""

    name: str
    channels: int
    cols: int


@dataclass(frozen=True)
class _Stream:
    """A stream tensor of the graph being built: its name, rate (columns per latent frame) and
    lag (columns behind the whole decode)."""

    name: str
    rate: int
    lag: int


class _Builder:
    """Collects the stream graph's nodes, constants and state tensors."""

    def __init__(self, net: HifiGan, masked: bool):
        self.net = net
        self.masked = masked
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.states: list[StateSpec] = []
        self._count = 0
        self._consts: dict[tuple, str] = {}
        self._masks: dict[tuple[int, int], str] = {}

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{_PREFIX}{hint}_{self._count}"

    def node(self, op: str, inputs: Sequence[str], hint: str, **attrs) -> str:
        out = self.fresh(hint)
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def ints(self, values: Sequence[int]) -> str:
        key = ("i64", tuple(values))
        if key not in self._consts:
            name = f"{_PREFIX}const_{len(self._consts)}"
            self.inits.append(helper.make_tensor(name, TensorProto.INT64, [len(values)],
                                                 list(values)))
            self._consts[key] = name
        return self._consts[key]

    def scalar(self, value: float | int, dtype: int = TensorProto.FLOAT) -> str:
        key = (dtype, value)
        if key not in self._consts:
            name = f"{_PREFIX}const_{len(self._consts)}"
            self.inits.append(helper.make_tensor(name, dtype, [], [value]))
            self._consts[key] = name
        return self._consts[key]

    def cols(self, x: str, start: int, from_end: int) -> str:
        """Columns [start, len - from_end) of (B, C, len) `x` (a copy, or `x` when all)."""
        if start == 0 and from_end == 0:
            return x
        end = -from_end if from_end else np.iinfo(np.int64).max
        return self.node("Slice", [x, self.ints([start]), self.ints([end]), self.ints([2])],
                         "cols")

    def carry(self, x: str, channels: int, cols: int, hint: str) -> str:
        """cat(state, x) along time, the state being the last `cols` columns of the stream
        before `x`; the new state is the last `cols` columns of the cat."""
        if cols == 0:
            return x
        state = f"state.{len(self.states)}.{hint}"
        self.states.append(StateSpec(state, channels, cols))
        cat = self.node("Concat", [state, x], "cat", axis=2)
        self.nodes.append(helper.make_node(
            "Slice", [cat, self.ints([-cols]), self.ints([np.iinfo(np.int64).max]),
                      self.ints([2])], [f"{state}.out"], name=f"{_PREFIX}{state}.out"))
        return cat

    def mask(self, x: _Stream) -> _Stream:
        """`x` with its columns outside the segment zeroed (edge graph only)."""
        if not self.masked:
            return x
        key = (x.rate, x.lag)
        if key not in self._masks:
            self._masks[key] = self._make_mask(x.rate, x.lag)
        return _Stream(self.node("Mul", [x.name, self._masks[key]], "masked"), x.rate, x.lag)

    def _make_mask(self, rate: int, lag: int) -> str:
        """(B, 1, n rate) float 0/1: stream column j of the call is whole-decode column
        start rate + j - lag, kept if in [0, frames rate)."""
        i64 = TensorProto.INT64
        n = self.node("Gather", [self.node("Shape", [self.net.latent], "shape"),
                                 self.scalar(2, i64)], "n")
        cols = self.node("Mul", [n, self.scalar(rate, i64)], "ncols")
        index = self.node("Range", [self.scalar(0, i64), cols, self.scalar(1, i64)], "index")
        start = self.node("Unsqueeze", [START_INPUT, self.ints([1])], "start")
        first = self.node("Sub", [self.node("Mul", [start, self.scalar(rate, i64)], "s"),
                                  self.scalar(lag, i64)], "first")
        column = self.node("Add", [first, index], "column")  # (B, n rate)
        frames = self.node("Unsqueeze", [FRAMES_INPUT, self.ints([1])], "frames")
        end = self.node("Mul", [frames, self.scalar(rate, i64)], "end")
        inside = self.node("And", [
            self.node("GreaterOrEqual", [column, self.scalar(0, i64)], "ge"),
            self.node("Less", [column, end], "lt")], "inside")
        as_float = self.node("Cast", [inside], "mask", to=TensorProto.FLOAT)
        return self.node("Unsqueeze", [as_float, self.ints([1])], "mask")


def _conv_node(b: _Builder, x: str, spec: ConvSpec, hint: str) -> str:
    inputs = [x, spec.weight] + ([spec.bias] if spec.bias else [])
    return b.node("Conv", inputs, hint, kernel_shape=[spec.kernel], dilations=[spec.dilation],
                  pads=[0, 0], strides=[1])


def _stream_conv(b: _Builder, x: _Stream, spec: ConvSpec, hint: str) -> _Stream:
    """Conv "valid" on cat(cache, masked x): lag + pr."""
    x = b.mask(x)
    cat = b.carry(x.name, spec.c_in, spec.history, hint)
    return _Stream(_conv_node(b, cat, spec, hint), x.rate, x.lag + spec.lag)


def _stream_up(b: _Builder, x: _Stream, alpha: float, spec: UpSpec, hint: str) -> _Stream:
    """leaky_relu then ConvTranspose on cat(last column, masked x), keeping the s n complete
    columns [s, (n + 1) s): lag s + pl."""
    x = b.mask(x)
    cat = b.carry(x.name, spec.c_in, 1, hint)
    act = b.node("LeakyRelu", [cat], "lrelu", alpha=alpha)
    inputs = [act, spec.weight] + ([spec.bias] if spec.bias else [])
    full = b.node("ConvTranspose", inputs, hint, kernel_shape=[spec.kernel],
                  strides=[spec.stride], pads=[0, 0])
    out = b.cols(full, spec.stride, spec.kernel - spec.stride)
    return _Stream(out, x.rate * spec.stride, x.lag * spec.stride + spec.pads[0])


def _res_step(b: _Builder, cat: str, step: ResStep, start: int, from_end: int,
              hint: str) -> str:
    """x + conv(leaky_relu(x)) for the new columns, from the window [start, len - from_end)
    of `cat` (its history, then the new columns): the skip is the window cropped by the pads."""
    window = b.cols(cat, start, from_end)
    conv = _conv_node(b, b.node("LeakyRelu", [window], "lrelu", alpha=step.alpha), step.conv,
                      hint)
    skip = b.cols(cat, start + step.conv.pads[0], from_end + step.conv.pads[1])
    return b.node("Add", [conv, skip], "res")


def _stream_mrf(b: _Builder, u: _Stream, mrf: Mrf, hint: str) -> _Stream:
    """The MRF on stream `u`: one shared input cache, each branch reading it delayed so that
    all come out at lag + `mrf.lag`; then the export's Add tree and the Div."""
    u = b.mask(u)
    channels = mrf.branches[0][0].conv.c_in
    cat = b.carry(u.name, channels, mrf.input_history, f"{hint}.in")
    ends: list[str] = []
    for i, steps in enumerate(mrf.branches):
        delay = mrf.delay(i)
        start = mrf.input_history - steps[0].conv.history - delay
        h = _Stream(_res_step(b, cat, steps[0], start, delay, f"{hint}.b{i}.s0"), u.rate,
                    u.lag + delay + steps[0].conv.lag)
        for j, step in enumerate(steps[1:], 1):
            h = b.mask(h)
            step_cat = b.carry(h.name, step.conv.c_in, step.conv.history, f"{hint}.b{i}.s{j}")
            h = _Stream(_res_step(b, step_cat, step, 0, 0, f"{hint}.b{i}.s{j}"), h.rate,
                        h.lag + step.conv.lag)
        ends.append(h.name)

    def add(tree: int | tuple) -> str:
        if isinstance(tree, int):
            return ends[tree]
        return b.node("Add", [add(tree[0]), add(tree[1])], f"{hint}.sum")

    out = b.node("Div", [add(mrf.tree), b.scalar(mrf.divisor)], f"{hint}.div")
    return _Stream(out, u.rate, u.lag + mrf.lag)


def _stream_pre(b: _Builder, net: HifiGan) -> _Stream:
    """conv_pre (its input, the latent, needs no mask: zeros are fed past the end) + cond."""
    cat = b.carry(net.latent, net.conv_pre.c_in, net.conv_pre.history, "conv_pre")
    x = _conv_node(b, cat, net.conv_pre, "conv_pre")
    if net.cond is not None and net.speaker is not None:
        x = b.node("Add", [x, _conv_node(b, net.speaker, net.cond, "cond")], "cond_add")
    return _Stream(x, 1, net.conv_pre.lag)


def build_stream_graph(net: HifiGan, masked: bool) -> tuple[onnx.ModelProto, list[StateSpec]]:
    """The streaming decoder graph of `net` (see the module docstring).

    Inputs: the latent block (B, C, n) float32, n >= 1 frames; the speaker embedding
    (B, gin, 1) float32 for a multi-speaker voice; each `StateSpec` (B, channels, cols)
    float32; with `masked` (the edge graph) `START_INPUT` and `FRAMES_INPUT`, (B,) int64.
    Then the weights (the original graph's initializer names).
    Outputs: `STREAM_OUTPUT` (B, 1, n hop) float32, stream samples [p hop, (p + n) hop) =
    whole-decode samples shifted by `net.lookahead`; then each state's ``<name>.out``.
    """
    b = _Builder(net, masked)
    x = _stream_pre(b, net)
    for i, stage in enumerate(net.stages):
        x = _stream_up(b, x, stage.alpha, stage.up, f"ups.{i}")
        x = _stream_mrf(b, x, stage.mrf, f"mrf.{i}")
    b.nodes.append(helper.make_node("LeakyRelu", [x.name], [f"{_PREFIX}post_act"],
                                    alpha=net.post_alpha))
    x = _Stream(f"{_PREFIX}post_act", x.rate, x.lag)
    x = _stream_conv(b, x, net.conv_post, "conv_post")
    b.nodes.append(helper.make_node("Tanh", [x.name], [STREAM_OUTPUT], name=f"{_PREFIX}tanh"))
    assert x.lag == net.lookahead and x.rate == net.hop  # the lag table and the graph agree
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info(net.latent, f32, ["batch", net.conv_pre.c_in, "n"])]
    if net.speaker is not None and net.cond is not None:
        inputs.append(helper.make_tensor_value_info(net.speaker, f32,
                                                    ["batch", net.cond.c_in, 1]))
    inputs += [helper.make_tensor_value_info(s.name, f32, ["batch", s.channels, s.cols])
               for s in b.states]
    if masked:
        inputs += [helper.make_tensor_value_info(name, i64, ["batch"])
                   for name in (START_INPUT, FRAMES_INPUT)]
    outputs = [helper.make_tensor_value_info(STREAM_OUTPUT, f32, ["batch", 1, "samples"])]
    outputs += [helper.make_tensor_value_info(f"{s.name}.out", f32,
                                              ["batch", s.channels, s.cols]) for s in b.states]
    weights = [net.constants[name] for name in sorted(net.constants)]
    graph = helper.make_graph(b.nodes, "piper_stream_decoder", inputs, outputs,
                              initializer=[*weights, *b.inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)],
                              producer_name="voxflow-stream-decoder")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, b.states


# ----------------------------------------------------------------------------------------------
# The driver


@dataclass(frozen=True)
class DecoderState:
    """The carried state of B segments decoded together, batch dimension first.

    Rows of several requests stack (`stack`) into one batched run when their blocks have the
    same frames; each row then gets what it gets alone.

    Attributes:
        caches: one float32 array per `StateSpec` of the decoder, (B, channels, cols):
            the last input columns of each streamed layer (zeros at a segment's start).
        frames: (B,) int64 latent frames fed so far per row.
        speaker: (B, gin, 1) float32 speaker embeddings of a multi-speaker voice, else None.
    """

    caches: tuple[np.ndarray, ...]
    frames: np.ndarray
    speaker: np.ndarray | None = None

    @property
    def batch(self) -> int:
        return int(self.frames.shape[0])

    @staticmethod
    def stack(states: Sequence[DecoderState]) -> DecoderState:
        """The rows of `states` as one state (in order)."""
        speakers = [s.speaker for s in states if s.speaker is not None]
        return DecoderState(
            tuple(np.concatenate(arrays) for arrays in zip(*(s.caches for s in states),
                                                           strict=True)),
            np.concatenate([s.frames for s in states]),
            np.concatenate(speakers) if speakers else None)

    def rows(self, lo: int, hi: int) -> DecoderState:
        """Rows [lo, hi) as a state of their own (copies, so the rows can move on apart)."""
        return DecoderState(tuple(c[lo:hi].copy() for c in self.caches),
                            self.frames[lo:hi].copy(),
                            None if self.speaker is None else self.speaker[lo:hi].copy())


class StreamingDecoder:
    """A voice's HiFi-GAN decoder run block by block with carried state (module docstring).

    ``state = dec.start(B)``, then ``samples, state = dec.step(latent_block, state)`` for each
    block of latent frames (B, C, n) float32, then ``dec.finish(state)``. Each call returns
    one (k,) float32 array of samples per row. A row that was fed frames [0, e) has got
    max(0, e hop - lookahead) samples; `finish` returns the rest, so a segment's outputs
    concatenate to exactly F hop samples: the whole decode's, within float rounding.

    Two ONNX Runtime sessions share one copy of the weights (`SharedWeights`): the edge graph
    (with masks) for calls that start within the first `HifiGan.steady_from` frames of a row,
    and for `finish`; the steady graph (no masks) for the others.
    """

    def __init__(self, decoder: onnx.ModelProto, inputs: Sequence[str], intra_op_threads: int = 1,
                 inter_op_threads: int = 1, spin: bool = True):
        """Args:
            decoder, inputs: the voice's split decoder and its inputs (`split.split_graph`'s
                `decoder` and `decoder_inputs`), stock 1-D layout (not NCHWc).
            intra_op_threads, inter_op_threads, spin: as `onnx_memory.open_session`.
        Raises:
            ValueError: not a HiFi-GAN decoder (`parse_hifigan`).
        """
        self.net = parse_hifigan(decoder, inputs)
        edge, self.states = build_stream_graph(self.net, masked=True)
        steady, steady_states = build_stream_graph(self.net, masked=False)
        assert steady_states == self.states
        self.weights = SharedWeights(edge)
        steady_weights = SharedWeights(steady, share=[self.weights])
        threads = (intra_op_threads, inter_op_threads, spin)
        self.edge: ArenaSession = open_session(edge.SerializeToString(), *threads, self.weights)
        self.steady: ArenaSession = open_session(steady.SerializeToString(), *threads,
                                                 steady_weights)

    @classmethod
    def from_voice(cls, onnx_path: Path | str, intra_op_threads: int = 1,
                   inter_op_threads: int = 1) -> StreamingDecoder:
        """The streaming decoder of a Piper voice file (rewritten and split as `loader` does)."""
        from voxflow.models.piper.loader import rewrite_graph
        from voxflow.models.piper.split import split_graph

        model, _, durations = rewrite_graph(onnx.load(str(onnx_path)))
        split = split_graph(model, durations)
        return cls(split.decoder, split.decoder_inputs, intra_op_threads, inter_op_threads)

    @property
    def hop(self) -> int:
        """Samples per latent frame."""
        return self.net.hop

    @property
    def lookahead(self) -> int:
        """Samples the stream lags the whole decode by (`HifiGan.lookahead`)."""
        return self.net.lookahead

    def emitted(self, frames: int) -> int:
        """Samples a row has got once fed `frames` latent frames (before `finish`)."""
        return max(0, frames * self.hop - self.lookahead)

    def start(self, batch: int = 1, speaker: np.ndarray | None = None) -> DecoderState:
        """The state of `batch` new segments: zero caches, no frames fed.

        Args:
            speaker: (batch, gin, 1) float32 speaker embeddings; required exactly when the
                voice has a cond conv (multi-speaker).
        Raises:
            ValueError: a speaker given to a one-speaker voice, or missing.
        """
        if (speaker is None) != (self.net.cond is None):
            raise ValueError("a speaker embedding is needed exactly for a multi-speaker voice")
        caches = tuple(np.zeros((batch, s.channels, s.cols), np.float32) for s in self.states)
        return DecoderState(caches, np.zeros(batch, np.int64), speaker)

    def step(self, latent: np.ndarray,
             state: DecoderState) -> tuple[list[np.ndarray], DecoderState]:
        """Decode one block of latent frames per row.

        Args:
            latent: (B, C, n) float32, n >= 1 frames, the rows' next frames.
        Returns:
            (samples, state): per row, its samples that are final now, (k,) float32 with
            k = emitted(p + n) - emitted(p) for a row fed p frames before; the new state.
        Raises:
            ValueError: a latent of another batch or channel count, or no frames.
        """
        batch, channels, n = latent.shape
        if batch != state.batch or channels != self.net.conv_pre.c_in or n < 1:
            raise ValueError(f"latent {latent.shape} does not fit a state of {state.batch} rows"
                             f" and {self.net.conv_pre.c_in} channels, or is empty")
        start = state.frames
        edge = int(start.min()) < self.net.steady_from
        stream, caches = self._run(latent, state, start + n if edge else None)
        skip = np.maximum(0, self.lookahead - start * self.hop)
        samples = [stream[b, skip[b]:] for b in range(batch)]
        return samples, DecoderState(caches, start + n, state.speaker)

    def finish(self, state: DecoderState) -> list[np.ndarray]:
        """The rest of each row's samples: its last `lookahead` (or all if fewer), (k,)
        float32 per row, from `HifiGan.flush_frames` zero frames fed past the end."""
        zeros = np.zeros((state.batch, self.net.conv_pre.c_in, self.net.flush_frames),
                         np.float32)
        stream, _ = self._run(zeros, state, state.frames)
        skip = np.maximum(0, self.lookahead - state.frames * self.hop)
        return [stream[b, skip[b]:self.lookahead] for b in range(state.batch)]

    def _run(self, latent: np.ndarray, state: DecoderState,
             frames: np.ndarray | None) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """One run: (B, n hop) stream samples and the new caches; the edge graph when
        `frames` (the rows' true frames after this call) is given, else the steady one."""
        feed: dict[str, np.ndarray] = {self.net.latent: np.ascontiguousarray(latent)}
        if self.net.speaker is not None and state.speaker is not None:
            feed[self.net.speaker] = state.speaker
        feed.update({s.name: c for s, c in zip(self.states, state.caches, strict=True)})
        session = self.steady
        if frames is not None:
            feed[START_INPUT], feed[FRAMES_INPUT] = state.frames, frames.astype(np.int64)
            session = self.edge
        names = [STREAM_OUTPUT, *(f"{s.name}.out" for s in self.states)]
        stream, *caches = session.run(names, feed)
        return stream.reshape(latent.shape[0], -1), tuple(caches)
