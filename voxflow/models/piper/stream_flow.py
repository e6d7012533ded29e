"""A Piper voice's flow as a stream: blocks of latent frames in, each frame computed once.

The flow (`split.py`, VITS's ResidualCouplingBlock run in reverse) is four mean-only coupling
layers, each behind a channel flip: ``x0, x1 = split(flip(x))``, ``h = pre(x0)`` (1x1 conv),
a WaveNet of `n` layers (conv k, dilation d, "same" zero padding p = d(k-1)/2; gated
tanh * sigmoid; a 1x1 conv giving the residual added to h and the skip summed over layers),
``m = post(sum of skips)`` (1x1), and ``x = cat(x0, x1 - m)``. Only the WaveNet's convs look
across frames, each p frames each side, so a coupling's output at frame t depends on its input
within t +- n * p (joe: 4 x 2 = 8), and the flow's within +- 32 frames: the receptive field
the windowed decode (`decode.py`) pays for at every seam by running the flow over 32 frames of
context on each side again.

Here every conv runs "valid" on its cached last 2p input frames followed by the new ones, so
each block's frames run once (`docs/notes/piper-streaming-decoder.md`, section 2, for the
decoder's form of the same idea). Caches start as the whole conv's left zero padding (p zero
frames); a conv then emits p frames fewer than it was given on a segment's first block, the
same number on later blocks, and p more on the last, whose input is followed by the right zero
padding (`last`), so over the segment each frame comes out once and equal to the whole run's up
to float rounding. The frames a layer is ahead of the last layer of its coupling (the skips of
earlier layers, and x0 and x1 before the WaveNet) wait in first-in-first-out carries. All
carries are per row, with the batch first, so rows of several segments at the same point of
their streams (equal block and carry widths) run together.

A block of n frames comes out as n frames on later blocks, n - L on the first (L = 32 for joe,
`lookahead`, so a first block must be longer than L) and n + L on the last; all blocks of a
segment together give its F frames. The frame mask (`y_mask`) is taken as all ones, as it is
for the frames of one segment; voices with a speaker-conditioned flow (``cond_layer``) are not
handled (`read_couplings` raises).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_CONV = re.compile(
    r"^/flow/flows\.(\d+)/(pre|post|enc/in_layers\.(\d+)|enc/res_skip_layers\.(\d+))/Conv$")
_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Conv:
    """A Conv1d's weight and bias initializer names, kernel size and dilation."""

    weight: str
    bias: str
    kernel: int = 1
    dilation: int = 1

    @property
    def pad(self) -> int:
        """Zero frames the whole conv pads on each side: d(k - 1) / 2."""
        return self.dilation * (self.kernel - 1) // 2


@dataclass(frozen=True)
class Coupling:
    """One mean-only coupling layer: `pre`, the WaveNet's `in_layers` and `res_skip`, `post`;
    `hidden` channels in the WaveNet, `half` channels in x0 and x1."""

    pre: Conv
    in_layers: tuple[Conv, ...]
    res_skip: tuple[Conv, ...]
    post: Conv
    hidden: int
    half: int

    @property
    def lag(self) -> int:
        """Frames its output trails its input by: the WaveNet convs' pads summed."""
        return sum(c.pad for c in self.in_layers)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _convs(graph: onnx.GraphProto) -> tuple[list[int], dict[int, dict[str, Conv]]]:
    """The coupling convs by coupling index (in run order) and role (``pre``, ``post``,
    ``enc/in_layers.J``, ``enc/res_skip_layers.J``)."""
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    found: dict[int, dict[str, Conv]] = {}
    for node in graph.node:
        match = _CONV.match(node.name)
        if node.op_type != "Conv" or not match:
            continue
        attrs = _attrs(node)
        if len(node.input) != 3 or attrs.get("group", 1) != 1 or attrs.get("strides", [1]) != [1]:
            raise ValueError(f"{node.name}: expected a plain Conv with bias")
        if node.input[1] not in shapes:
            raise ValueError(f"{node.name}: weight {node.input[1]} is not an initializer")
        conv = Conv(node.input[1], node.input[2], shapes[node.input[1]][2],
                    attrs.get("dilations", [1])[0])
        if (conv.kernel - 1) * conv.dilation % 2 or list(attrs.get("pads", [0, 0])) != [
                conv.pad] * 2:
            raise ValueError(f"{node.name}: expected symmetric 'same' padding")
        found.setdefault(int(match.group(1)), {})[match.group(2)] = conv
    return list(found), found


def _coupling(index: int, convs: dict[str, Conv], shapes: dict[str, tuple[int, ...]]
              ) -> Coupling:
    """Coupling `index` from its convs (`_convs`)."""
    n_layers = sum(1 for k in convs if k.startswith("enc/in_layers"))
    try:
        in_layers = tuple(convs[f"enc/in_layers.{j}"] for j in range(n_layers))
        res_skip = tuple(convs[f"enc/res_skip_layers.{j}"] for j in range(n_layers))
        pre, post = convs["pre"], convs["post"]
    except KeyError as exc:
        raise ValueError(f"coupling flows.{index} lacks conv {exc}") from None
    hidden, half = shapes[pre.weight][0], shapes[pre.weight][1]
    if shapes[post.weight][0] != half:
        raise ValueError(f"coupling flows.{index} is not mean-only (post gives "
                         f"{shapes[post.weight][0]} channels, not {half})")
    if any(c.kernel != 1 for c in (pre, post, *res_skip)):
        raise ValueError(f"coupling flows.{index}: pre, post and res_skip must be 1x1")
    return Coupling(pre, in_layers, res_skip, post, hidden, half)


def read_couplings(flow: onnx.ModelProto) -> list[Coupling]:
    """The coupling layers of a split flow graph (`split.SplitGraph.flow`), in run order.

    Raises:
        ValueError: not piper's VITS flow of mean-only couplings behind channel flips without
            speaker conditioning (the message says what differs).
    """
    graph = flow.graph
    if any("cond_layer" in n.name for n in graph.node):
        raise ValueError("the flow is speaker-conditioned (cond_layer): not streamed")
    order, found = _convs(graph)
    if not order:
        raise ValueError("no /flow/flows.N/ coupling convs in the graph")
    flips = {n.name for n in graph.node if n.op_type == "Slice"}
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    couplings = []
    for index in order:
        if f"/flow/flows.{index + 1}/Slice" not in flips:
            raise ValueError(f"coupling flows.{index} has no channel flip before it")
        couplings.append(_coupling(index, found[index], shapes))
    return couplings


class _Builder:
    """Collects nodes, initializers, carried-state inputs and outputs of the stream graph."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.consts: list[onnx.TensorProto] = []
        self.state_in: list[onnx.ValueInfoProto] = []
        self.state_out: list[onnx.ValueInfoProto] = []
        self._n = 0

    def name(self, stem: str) -> str:
        self._n += 1
        return f"vfs/{stem}_{self._n}"

    def op(self, op_type: str, inputs: Sequence[str], stem: str, **attrs) -> str:
        out = self.name(stem)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def ints(self, values: Sequence[int], stem: str = "i") -> str:
        name = self.name(stem)
        self.consts.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def time_slice(self, x: str, start: str, end: str) -> str:
        """x[:, :, start:end] with start and end (1,) int64 tensors."""
        return self.op("Slice", [x, start, end, self.ints([2])], "slice")

    def carry(self, channels: int, stem: str) -> tuple[str, str]:
        """A carried state (B, channels, w) float32: its input name and its output name."""
        name_in, name_out = f"{stem}_in", f"{stem}_out"
        self.state_in.append(helper.make_tensor_value_info(
            name_in, TensorProto.FLOAT, ["batch", channels, f"{stem}_w"]))
        self.state_out.append(helper.make_tensor_value_info(
            name_out, TensorProto.FLOAT, ["batch", channels, f"{stem}_w2"]))
        return name_in, name_out


class _Stream:
    """Builds one call's graph: `x` (B, C, n) -> the frames complete so far."""

    def __init__(self, b: _Builder, right_pad_frames: str):
        self.b = b
        self.right = right_pad_frames  # (1,) int64: 1 on a segment's last block, else 0
        self.zero = b.ints([0], "zero")
        self.max = b.ints([_INT64_MAX], "max")

    def conv_valid(self, conv: Conv, x: str, channels: int, stem: str) -> tuple[str, str]:
        """`conv` over its cache then `x` (then its right pad on the last block), no padding:
        (output, x as the whole conv sees it, delayed to line up with the output)."""
        b = self.b
        cache_in, cache_out = b.carry(channels, stem)
        if conv.pad == 0:
            raise AssertionError("1x1 convs need no cache")
        # zeros (B, channels, pad * last): the whole conv's right padding
        shape = b.op("Concat", [b.op("Slice", [b.op("Shape", [x], "shape"), self.zero,
                                              b.ints([1])], "batch"),
                                b.ints([channels]),
                                b.op("Mul", [self.right, b.ints([conv.pad])], "padw")],
                     "zshape", axis=0)
        zeros = b.op("ConstantOfShape", [shape], "zeros",
                     value=numpy_helper.from_array(np.zeros(1, np.float32)))
        buf = b.op("Concat", [cache_in, x, zeros], "buf", axis=2)
        b.nodes.append(helper.make_node("Identity", [b.time_slice(
            buf, b.ints([-2 * conv.pad]), self.max)], [cache_out], name=b.name("cache")))
        out = b.op("Conv", [buf, conv.weight, conv.bias], "conv", dilations=[conv.dilation],
                   kernel_shape=[conv.kernel], pads=[0, 0], strides=[1])
        centre = b.time_slice(buf, b.ints([conv.pad]), b.ints([-conv.pad]))
        return out, centre

    def conv1x1(self, conv: Conv, x: str) -> str:
        return self.b.op("Conv", [x, conv.weight, conv.bias], "conv1", kernel_shape=[1])

    def fifo(self, x: str, channels: int, width: str, stem: str) -> str:
        """The first `width` frames of (carry, x); the rest is carried."""
        b = self.b
        carry_in, carry_out = b.carry(channels, stem)
        full = b.op("Concat", [carry_in, x], "fifo", axis=2)
        b.nodes.append(helper.make_node("Identity", [b.time_slice(full, width, self.max)],
                                        [carry_out], name=b.name("carry")))
        return b.time_slice(full, self.zero, width)

    def coupling(self, c: Coupling, x: str, index: int) -> str:
        b = self.b
        flipped = b.op("Slice", [x, b.ints([-1]), b.ints([-_INT64_MAX]), b.ints([1]),
                                 b.ints([-1])], "flip")
        x0 = b.op("Slice", [flipped, self.zero, b.ints([c.half]), b.ints([1])], "x0")
        h = self.conv1x1(c.pre, x0)
        skips = []
        for j, (conv, res_skip) in enumerate(zip(c.in_layers, c.res_skip, strict=True)):
            act, h_seen = self.conv_valid(conv, h, c.hidden, f"f{index}_conv{j}")
            tanh = b.op("Tanh", [b.op("Slice", [act, self.zero, b.ints([c.hidden]),
                                                b.ints([1])], "ta")], "tanh")
            sig = b.op("Sigmoid", [b.op("Slice", [act, b.ints([c.hidden]), self.max,
                                                  b.ints([1])], "sa")], "sigmoid")
            rs = self.conv1x1(res_skip, b.op("Mul", [tanh, sig], "gate"))
            if j < len(c.in_layers) - 1:
                res = b.op("Slice", [rs, self.zero, b.ints([c.hidden]), b.ints([1])], "res")
                h = b.op("Add", [h_seen, res], "h")
                skips.append(b.op("Slice", [rs, b.ints([c.hidden]), self.max, b.ints([1])],
                                  "skip"))
            else:
                skips.append(rs)
        width = b.op("Slice", [b.op("Shape", [skips[-1]], "shape"), b.ints([2]), b.ints([3])],
                     "width")
        total = skips[-1]
        for j, skip in enumerate(skips[:-1]):
            total = b.op("Add", [total, self.fifo(skip, c.hidden, width, f"f{index}_skip{j}")],
                         "skips")
        mean = self.conv1x1(c.post, total)
        x_late = self.fifo(flipped, 2 * c.half, width, f"f{index}_x")
        x0_late = b.op("Slice", [x_late, self.zero, b.ints([c.half]), b.ints([1])], "x0l")
        x1_late = b.op("Slice", [x_late, b.ints([c.half]), self.max, b.ints([1])], "x1l")
        return b.op("Concat", [x0_late, b.op("Sub", [x1_late, mean], "x1")], "x", axis=1)


def stream_flow_graph(flow: onnx.ModelProto, couplings: Sequence[Coupling],
                      channels: int) -> onnx.ModelProto:
    """The streaming flow graph (module docstring), its weights those of `flow` by name.

    Inputs: ``z_p`` (B, channels, n) float32, ``last`` (1,) int64 (1 on a segment's last
    block), then every carry's ``*_in`` (B, c, w) float32 (`StreamingFlow.start` makes the
    first ones). Outputs: ``z`` (B, channels, m) float32 (the masked latent the decoder
    takes, as far as it is complete), then every carry's ``*_out``, in the inputs' order.
    """
    b = _Builder()
    stream = _Stream(b, "last")
    x = "z_p"
    for index, coupling in enumerate(couplings):
        x = stream.coupling(coupling, x, index)
    b.nodes.append(helper.make_node("Identity", [x], ["z"], name="vfs/out"))
    used = {i for n in b.nodes for i in n.input}
    weights = [init for init in flow.graph.initializer if init.name in used]
    graph = helper.make_graph(
        b.nodes, "piper_stream_flow",
        [helper.make_tensor_value_info("z_p", TensorProto.FLOAT, ["batch", channels, "n"]),
         helper.make_tensor_value_info("last", TensorProto.INT64, [1]), *b.state_in],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", channels, "m"]),
         *b.state_out],
        [*weights, *b.consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = flow.ir_version
    onnx.checker.check_model(model)
    return model


@dataclass
class FlowState:
    """A batch of segments' carried flow state: (B, c, w) float32 arrays by input name, and
    whether the next block is their first."""

    carries: dict[str, np.ndarray]
    first: bool = True

    @property
    def rows(self) -> int:
        return next(iter(self.carries.values())).shape[0]

    @staticmethod
    def stack(states: Sequence[FlowState]) -> FlowState:
        """One state of the rows of `states` in order (equal widths: same point of stream).

        Raises:
            ValueError: states at different points of their streams.
        """
        if len({(s.first, tuple(a.shape[2] for a in s.carries.values())) for s in states}) != 1:
            raise ValueError("only flow states at the same point of their streams stack")
        names = states[0].carries
        return FlowState({k: np.concatenate([s.carries[k] for s in states]) for k in names},
                         states[0].first)

    def split(self) -> list[FlowState]:
        """One state per row."""
        return [FlowState({k: a[i:i + 1] for k, a in self.carries.items()}, self.first)
                for i in range(self.rows)]


class StreamingFlow:
    """Runs `stream_flow_graph` on an ONNX Runtime session.

    Args:
        session: a session of the stream graph (weights fed by it, `onnx_memory.open_session`).
        couplings: the graph's coupling layers (`read_couplings`).
    """

    def __init__(self, session, couplings: Sequence[Coupling]):
        self.session = session
        self.couplings = list(couplings)
        self.lag = sum(c.lag for c in self.couplings)
        self._widths: dict[str, tuple[int, int]] = {}  # carry -> (channels, first width)
        for index, c in enumerate(self.couplings):
            for j, conv in enumerate(c.in_layers):
                self._widths[f"f{index}_conv{j}_in"] = (c.hidden, conv.pad)
            for j in range(len(c.in_layers) - 1):
                self._widths[f"f{index}_skip{j}_in"] = (c.hidden, 0)
            self._widths[f"f{index}_x_in"] = (2 * c.half, 0)
        self._outputs = ["z", *(name[:-3] + "_out" for name in self._widths)]

    @property
    def lookahead(self) -> int:
        """Frames a block's output trails its input by (a first block must be longer)."""
        return self.lag

    def start(self, rows: int = 1) -> FlowState:
        """The state of `rows` segments before their first block: each conv's cache its left
        zero padding, every carry empty."""
        return FlowState({name: np.zeros((rows, ch, width), np.float32)
                          for name, (ch, width) in self._widths.items()})

    def step(self, z_p: np.ndarray, state: FlowState, last: bool = False
             ) -> tuple[np.ndarray, FlowState]:
        """Run one block: z_p (B, C, n) float32 -> (z (B, C, m), the state after it), where
        m = n on a later block, n - `lookahead` on the first, and n + `lookahead` more on
        the last (`last`).

        Raises:
            ValueError: a first block (not also the last) of `lookahead` frames or fewer, or a
                batch size other than the state's.
        """
        n = z_p.shape[-1]
        if z_p.shape[0] != state.rows:
            raise ValueError(f"{z_p.shape[0]} rows for a state of {state.rows}")
        if state.first and not last and n <= self.lag:
            raise ValueError(f"a first block needs more than {self.lag} frames, got {n}")
        feed = {"z_p": np.ascontiguousarray(z_p, np.float32),
                "last": np.asarray([1 if last else 0], np.int64), **state.carries}
        z, *carries = self.session.run(self._outputs, feed)
        names = list(self._widths)
        return z, FlowState(dict(zip(names, carries, strict=True)), first=False)
