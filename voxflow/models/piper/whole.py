"""The voice's packaged graph in one session, for a segment that runs alone and needs no audio
before its end (`PiperAcousticStage`, `whole_alone`).

Voxflow's serving graph is cut in three (`loader.py`, `split.py`: encoder, then flow and
HiFi-GAN decoder on windows) so a segment can stream window by window and batch under load.
A lone run on two threads pays for the cut: three sessions run in turn with Python between
them, and their thread pools could not spin (a spinning pool took the next session's cores;
since issue 42 they spin within a run only, `shared_session_options`), so every parallel op
woke its threads again. On the 2-core AMD EPYC host, one process with
two threads, `voxflow bench ceiling --processes 1 --threads 2 --batch 1`: the packaged graph
(ORT's defaults, spinning) 21.15 audio-s/s, the split graph 15.68 (docs/benchmarks.md,
2026-12-04). A whole (non-streamed) response needs none of the cut's windows, so its lone
segments run here.

The graph is piper's export unchanged but for one more output, the durations (the one `Ceil`
node's output, (B, 1, T_phonemes) frames per phoneme), so a row's exact length,
``max(sum(durations), 1) * hop_length`` samples, is known. Its noise is drawn inside the graph
(`RandomNormalLike`), so it serves unseeded requests only: a seeded request's bytes come from
the split graph's seeded noise, whatever the load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from piper.config import PiperConfig

from voxflow.models.files import reading
from voxflow.models.onnx_memory import ArenaSession, SharedWeights, open_session
from voxflow.models.piper.synth import phoneme_feed


def whole_piper_graph(onnx_path: Path) -> onnx.ModelProto:
    """The voice's graph with its durations (the one `Ceil` output) also a graph output.

    Raises:
        ValueError: the graph has no single `Ceil` node (not a Piper VITS export).
    """
    with reading(onnx_path, "Piper voice model"):
        model = onnx.load(str(onnx_path))
    ceils = [n for n in model.graph.node if n.op_type == "Ceil"]
    if len(ceils) != 1:
        raise ValueError(f"{onnx_path}: expected one Ceil node (durations), found {len(ceils)}")
    model.graph.output.append(helper.make_tensor_value_info(
        ceils[0].output[0], TensorProto.FLOAT, ["batch", 1, "phonemes"]))
    return model


@dataclass
class WholeGraph:
    """One session of a voice's packaged graph (`whole_piper_graph`) on `threads` intra-op
    threads whose idle threads spin (ORT's default: nothing else runs while a run is alone)."""

    session: ArenaSession
    config: PiperConfig
    runs: int = 0  # segments synthesized here (`PiperAcousticStage.events`)

    @classmethod
    def load(cls, onnx_path: Path, config: PiperConfig, threads: int,
             share: Sequence[SharedWeights] = ()) -> WholeGraph:
        """Open the session (its weights fed as inputs, `SharedWeights`).

        Args:
            share: the split graph's weights of the same file: the ones with equal values
                are used, not copied (on joe all but the NCHWc decoder's re-laid-out ones).
        Raises:
            ValueError: not a Piper VITS export (`whole_piper_graph`); onnxruntime errors.
        """
        model = whole_piper_graph(onnx_path)
        weights = SharedWeights(model, share=share)
        session = open_session(model.SerializeToString(), threads, 1, True, weights)
        return cls(session, config)

    def synthesize(self, phoneme_ids: np.ndarray, length_scale: float) -> tuple[np.ndarray,
                                                                               np.ndarray]:
        """One segment's audio and durations, unseeded.

        Args:
            phoneme_ids: (T,) int64 phoneme ids of one segment.
            length_scale: the voice's length scale over the speed rendered.
        Returns:
            (samples,) float32 audio at the voice's sample rate, ``max(sum(durations), 1) *
            hop_length`` samples; (T,) float32 frames per phoneme.
        """
        config = self.config
        audio, durations = self.session.run(None, phoneme_feed(config, [phoneme_ids],
                                                               length_scale))
        frames = max(int(durations[0, 0].sum()), 1)
        self.runs += 1
        return (np.asarray(audio, np.float32).reshape(-1)[: frames * config.hop_length],
                durations[0, 0].astype(np.float32))
