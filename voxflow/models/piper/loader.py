"""Load a Piper voice and rewrite its ONNX graph for serving.

Piper's VITS export draws noise with two `RandomNormalLike` ops inside the graph (the stochastic
duration predictor's, `/dp/RandomNormalLike`, shape (B, 2, T_phonemes); and the prior's,
`/RandomNormalLike`, shape (B, C, T_frames)), so its audio cannot be reproduced from a seed, and
it returns every row padded to the longest. At load we:
1. replace the duration noise with a graph input `noise_dp` (B, 2, T_phonemes), float32;
2. replace the prior noise with ``Slice(noise_z, 0, Shape(prior))``, where `noise_z` is a graph
   input (B, C, F_cap) that the caller makes at least as long as the output frames; it is filled
   time-major from the seed, so a row's noise does not depend on F_cap or its batch-mates;
3. expose the `Ceil` output (per-phoneme durations in frames, (B, 1, T_phonemes)) so each row's
   exact length, ``max(sum(durations), 1) * hop_length`` samples, is known;
4. cut the graph in three (`split.py`): the encoder, and the flow and HiFi-GAN decoder that run
   on windows of latent frames (`decode.py`), so a segment streams out window by window and the
   decoder's memory no longer grows with the segment;
5. by default, rewrite the decoder to run in ONNX Runtime's blocked NCHWc layout on this
   machine (`nchwc.py`: 18% less decoder time on joe, audio within 2.4e-7), where it can.
Node names are those of piper's `export_onnx` (torch.onnx export of piper's VITS); a voice whose
graph lacks them fails to load with a message saying which is missing.

Memory (`voxflow.models.onnx_memory`): the weights are split out of the graph and fed as inputs,
so every session of one voice file (the fixed-thread and the solo session) uses one copy of
them, kept while any of them lives; sessions use the shared CPU arena and shrink it after a
run when the process is over its memory budget; the parse-and-rewrite garbage of a load is
handed back to the system.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import langcodes
import onnx
from onnx import TensorProto, helper, shape_inference
from piper.config import PiperConfig

from voxflow.malloc import trim_heap, tune_malloc
from voxflow.models.files import reading
from voxflow.models.onnx_memory import ArenaSession, SharedWeights, open_session
from voxflow.models.piper.nchwc import nchwc_decoder
from voxflow.models.piper.split import split_graph
from voxflow.models.piper.stream_flow import (
    Coupling,
    StreamingFlow,
    read_couplings,
    stream_flow_graph,
)

log = logging.getLogger(__name__)

DP_NOISE_NODE = "/dp/RandomNormalLike"
PRIOR_NOISE_NODE = "/RandomNormalLike"
NOISE_DP_INPUT = "noise_dp"
NOISE_Z_INPUT = "noise_z"


@dataclass(frozen=True, eq=False)
class PreparedPart:
    """One part of a split voice graph ready to open: its bytes without the weights, and them."""

    model_bytes: bytes
    weights: SharedWeights


@dataclass(frozen=True, eq=False)
class PreparedGraph:
    """A rewritten voice graph cut in three (`split.SplitGraph`), each part ready to open."""

    encoder: PreparedPart
    flow: PreparedPart
    decoder: PreparedPart
    noise_channels: int
    durations_output: str
    flow_inputs: tuple[str, ...]
    decoder_inputs: tuple[str, ...]
    nchwc: bool = False
    # the decoder in its stock layout where `decoder` is the NCHWc one (None: `decoder` is)
    stock_decoder: PreparedPart | None = None
    # the flow as a stream (`stream_flow.py`; None where the voice's flow is not supported)
    stream_flow: PreparedPart | None = None
    couplings: tuple[Coupling, ...] = ()

    def parts(self, stock_decoder: bool = False) -> tuple[PreparedPart, PreparedPart,
                                                          PreparedPart]:
        """Encoder, flow and decoder; the stock-layout decoder with `stock_decoder`."""
        decoder = self.stock_decoder if stock_decoder and self.stock_decoder else self.decoder
        return (self.encoder, self.flow, decoder)


@dataclass(frozen=True)
class FrameModels:
    """A voice's flow and decoder sessions, both run on windows of latent frames.

    Attributes:
        flow: `flow_inputs` (z_p (B, C, F), y_mask (B, 1, F), per-row extras) -> the masked
            latent (B, C, F) float32.
        decoder: `decoder_inputs` (the latent, per-row extras) -> waveform (B, 1, F * hop).
    """

    flow: ArenaSession
    decoder: ArenaSession
    flow_inputs: tuple[str, ...]
    decoder_inputs: tuple[str, ...]
    stream_flow: StreamingFlow | None = None


@dataclass(frozen=True)
class RewrittenGraph:
    """A voice's serving graph.

    Attributes:
        session: the encoder (ids, noise -> `frames.flow_inputs` and durations); or, with
            `frames` None, the whole uncut graph (ids, noise -> ``output`` and durations).
        noise_channels: C of the prior noise input.
        durations_output: name of the durations output, (B, 1, T_phonemes) float32 frames.
        frames: the flow and decoder sessions (None for an uncut graph).
        source: the prepared graph whose weights the voice's sessions share; lives as long as
            a session made from it.
    """

    session: ArenaSession
    noise_channels: int
    durations_output: str
    frames: FrameModels | None = None
    source: PreparedGraph | None = None


def read_voice_config(path: Path) -> tuple[PiperConfig, str]:
    """Read a Piper `.onnx.json` with piper-tts's own `PiperConfig`, and the voice's language.

    Returns:
        (config, language): the config (sample rate, hop length, inference scales, phoneme
        map; piper-tts's defaults where the file leaves a field out) and the language as a
        BCP 47 tag ("en-US"), from the file's ``language.code`` ("en_US") or else its espeak
        voice ("en-us").
    Raises:
        ValueError: an unreadable file or missing or malformed fields (names the file).
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        config = PiperConfig.from_dict(raw)
        code = (raw.get("language") or {}).get("code") or config.espeak_voice
    except (OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"voice config {path} is invalid: {type(exc).__name__}: {exc}") from exc
    return config, langcodes.standardize_tag(str(code).replace("_", "-"))


def _find(graph: onnx.GraphProto, name: str, op_type: str) -> onnx.NodeProto:
    for node in graph.node:
        if node.name == name and node.op_type == op_type:
            return node
    raise ValueError(f"graph has no {op_type} node named '{name}'")


def _channels_of(model: onnx.ModelProto, tensor: str) -> int:
    inferred = shape_inference.infer_shapes(model)
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        if info.name == tensor:
            dims = info.type.tensor_type.shape.dim
            if len(dims) == 3 and dims[1].HasField("dim_value"):
                return int(dims[1].dim_value)
    raise ValueError(f"cannot infer the channel count of the prior tensor '{tensor}'")


def rewrite_graph(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int, str]:
    """Apply the three rewrites above in place.

    Returns:
        (model, prior noise channels C, name of the durations output).
    Raises:
        ValueError: an expected node is missing (not a Piper VITS export).
    """
    g = model.graph
    dp = _find(g, DP_NOISE_NODE, "RandomNormalLike")
    prior = _find(g, PRIOR_NOISE_NODE, "RandomNormalLike")
    ceils = [n for n in g.node if n.op_type == "Ceil"]
    if len(ceils) != 1:
        raise ValueError(f"expected one Ceil node (durations), found {len(ceils)}")
    durations = ceils[0].output[0]
    channels = _channels_of(model, prior.input[0])

    nodes = list(g.node)
    i_dp, i_prior = nodes.index(dp), nodes.index(prior)
    nodes[i_dp] = helper.make_node("Identity", [NOISE_DP_INPUT], [dp.output[0]], name="vf/noise_dp")
    nodes[i_prior : i_prior + 1] = [
        helper.make_node("Shape", [prior.input[0]], ["vf/prior_shape"], name="vf/prior_shape"),
        helper.make_node(
            "Slice", [NOISE_Z_INPUT, "vf/zeros3", "vf/prior_shape"], [prior.output[0]],
            name="vf/noise_z",
        ),
    ]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.append(helper.make_tensor("vf/zeros3", TensorProto.INT64, [3], [0, 0, 0]))
    g.input.extend([
        helper.make_tensor_value_info(NOISE_DP_INPUT, TensorProto.FLOAT, ["batch", 2, "phonemes"]),
        helper.make_tensor_value_info(NOISE_Z_INPUT, TensorProto.FLOAT, ["batch", channels, "f"]),
    ])
    g.output.append(
        helper.make_tensor_value_info(durations, TensorProto.FLOAT, ["batch", 1, "phonemes"])
    )
    onnx.checker.check_model(model)
    return model, channels, durations


_prepared_lock = threading.Lock()
_prepared: dict[tuple[str, int, int, bool], weakref.ref[PreparedGraph]] = {}
"""(resolved path, size, mtime_ns, nchwc asked) -> the prepared graph of that file, while a
session uses it."""


def _prepare_part(model: onnx.ModelProto) -> PreparedPart:
    weights = SharedWeights(model)  # takes the weights out of `model`: serialize after
    return PreparedPart(model.SerializeToString(), weights)


def _stream_flow(flow: onnx.ModelProto, inputs: tuple[str, ...]
                 ) -> tuple[onnx.ModelProto, list[Coupling]] | None:
    """The flow as a stream (`stream_flow.stream_flow_graph`), its weights still inside, and
    its couplings; None where the voice's flow is not one it handles (logged)."""
    if len(inputs) != 2:  # z_p and y_mask only: no speaker embedding
        log.info("flow not streamed: per-row inputs %s", inputs[2:])
        return None
    try:
        couplings = read_couplings(flow)
        channels = 2 * couplings[0].half
        return stream_flow_graph(flow, couplings, channels), couplings
    except ValueError as exc:
        log.info("flow not streamed: %s", exc)
        return None


def prepare_graph(onnx_path: Path, nchwc: bool = True) -> PreparedGraph:
    """The rewritten graph of `onnx_path`, cut in three, each part with its weights split out
    (`SharedWeights`); the same object for every call while a session made from it lives, so a
    voice's sessions share it.

    Args:
        nchwc: run the decoder in the NCHWc layout (`nchwc.nchwc_decoder`) where it can be;
            `PreparedGraph.nchwc` says whether it is.
    Raises:
        ValueError: not a Piper VITS graph. onnx errors: unreadable file.
    """
    stat = onnx_path.stat()
    key = (str(onnx_path.resolve()), stat.st_size, stat.st_mtime_ns, nchwc)
    with _prepared_lock:
        held = _prepared.get(key)
        prepared = held() if held is not None else None
        if prepared is None:
            with reading(onnx_path, "Piper voice model"):
                model, channels, durations = rewrite_graph(onnx.load(str(onnx_path)))
            split = split_graph(model, durations)
            del model
            blocked = nchwc_decoder(split.decoder, split.decoder_inputs) if nchwc else None
            streamed = _stream_flow(split.flow, split.flow_inputs)
            encoder, flow, decoder = (_prepare_part(part) for part in (
                split.encoder, split.flow, blocked if blocked is not None else split.decoder))
            stream_part = None
            if streamed is not None:  # its weights are the flow's arrays
                weights = SharedWeights(streamed[0], share=(flow.weights,))  # moves them out
                stream_part = PreparedPart(streamed[0].SerializeToString(), weights)
            # kept for sessions on several threads, where the stock layout is the faster one
            stock = _prepare_part(split.decoder) if blocked is not None else None
            prepared = PreparedGraph(encoder, flow, decoder, channels, durations,
                                     split.flow_inputs, split.decoder_inputs, blocked is not None,
                                     stock, stream_part,
                                     tuple(streamed[1]) if streamed is not None else ())
            del split
            trim_heap()
            _prepared[key] = weakref.ref(prepared)
        return prepared


def load_graph(
    onnx_path: Path, intra_op_threads: int, inter_op_threads: int, spin: bool = True,
    nchwc: bool = True, stock_decoder: bool = False,
) -> RewrittenGraph:
    """Load, rewrite and cut a voice's graph, and open its three parts with ONNX Runtime on the
    CPU.

    A second session of the same file (while the first lives) reuses the first one's prepared
    graph and weights (`prepare_graph`).

    Args:
        spin: let idle pool threads spin (ORT's default); off for a session that may run beside
            another one, where spinning threads would steal its cores.
        nchwc: the decoder in the NCHWc layout where it can be (`prepare_graph`).
        stock_decoder: open the decoder in its stock layout even where the prepared graph
            has an NCHWc one (the solo session: `PiperSettings.solo_decoder_nchwc`).
    Raises:
        ValueError: not a Piper VITS graph. onnx/onnxruntime errors: unreadable file.
    """
    tune_malloc()  # before the parse: the rewrite's garbage is returned with the session's
    prepared = prepare_graph(Path(onnx_path), nchwc)
    encoder, flow, decoder = (
        open_session(part.model_bytes, intra_op_threads, inter_op_threads, spin, part.weights)
        for part in prepared.parts(stock_decoder)
    )
    stream = None
    if prepared.stream_flow is not None:
        part = prepared.stream_flow
        stream = StreamingFlow(open_session(part.model_bytes, intra_op_threads, inter_op_threads,
                                            spin, part.weights), prepared.couplings)
    frames = FrameModels(flow, decoder, prepared.flow_inputs, prepared.decoder_inputs, stream)
    return RewrittenGraph(encoder, prepared.noise_channels, prepared.durations_output, frames,
                          prepared)
