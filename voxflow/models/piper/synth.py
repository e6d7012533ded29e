"""One batched run of a rewritten Piper graph: padding, seeded noise, exact per-row trimming.

The encoder runs once for the batch (`encode_batch`); each row's latent is then decoded on its
own, cut at the row's own frames, window by window (`decode.DecodePlan`): here in one call
(`synthesize_batch`), or as parts of the segment by the decoder stage (`model.py`).

Noise: row b of segment s of a request with seed S draws its duration noise from
``default_rng([S, s, 0])`` as (T_b, 2) and its prior noise from ``default_rng([S, s, 1])`` as
(F_cap, C), both time-major, then transposed to the graph's (channels, time) layout. Time-major
draws make the first F frames the same whatever F_cap is, so a row's noise depends only on its
seed and segment, never on its batch-mates or the cap.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException
from piper.config import PiperConfig

from voxflow.models.piper.decode import CutWindow, DecodePlan, cut_window, decode_window
from voxflow.models.piper.loader import NOISE_DP_INPUT, NOISE_Z_INPUT, RewrittenGraph
from voxflow.models.piper.split import OUTPUT

log = logging.getLogger(__name__)

_MAX_NOISE_RETRIES = 3


def _noise(seeds: Sequence[tuple[int, int]], lengths: Sequence[int], t_max: int, f_cap: int,
           channels: int) -> tuple[np.ndarray, np.ndarray]:
    batch = len(seeds)
    noise_dp = np.zeros((batch, 2, t_max), np.float32)
    noise_z = np.empty((batch, channels, f_cap), np.float32)
    for b, ((seed, segment), length) in enumerate(zip(seeds, lengths, strict=True)):
        dp_rng = np.random.default_rng([seed, segment, 0])
        noise_dp[b, :, :length] = dp_rng.standard_normal((length, 2), dtype=np.float32).T
        z_rng = np.random.default_rng([seed, segment, 1])
        noise_z[b] = z_rng.standard_normal((f_cap, channels), dtype=np.float32).T
    return noise_dp, noise_z


@dataclass(frozen=True)
class Encoded:
    """The encoder's output for a batch: the decoder's inputs and each row's own frames.

    Attributes:
        values: the graph's `frames.flow_inputs` values, each (B, ...) float32: z_p
            (B, C, F_max), y_mask (B, 1, F_max), extras; for an uncut graph, the waveforms
            (B, 1, F_max * hop).
        frames: (B,) int64 latent frames of each row, max(sum(durations), 1), <= F_max.
        durations: (B, T_max) float32 frames per phoneme id (0 past a row's ids).
    """

    values: list[np.ndarray]
    frames: np.ndarray
    durations: np.ndarray

    def row(self, b: int) -> tuple[list[np.ndarray], int]:
        """Row b's flow inputs, each (1, ...), and its frames."""
        values = [v[b : b + 1] for v in self.values]
        return values, min(int(self.frames[b]), values[0].shape[-1])


def phoneme_feed(config: PiperConfig, rows: Sequence[np.ndarray],
                 length_scale: float) -> dict[str, np.ndarray]:
    """The inputs every Piper VITS graph takes (piper's `export_onnx`): ``input`` (B, T_max)
    int64 ids, each row zero-padded to the longest; ``input_lengths`` (B,) int64; ``scales``
    (3,) float32 noise, length and noise-w scales; ``sid`` (B,) int64 the voice's default
    speaker, for a multi-speaker voice.

    Args:
        rows: B arrays of phoneme ids, (T_b,) int64 (B >= 1).
        length_scale: the length scale to render at (the voice's over the speed).
    """
    lengths = [int(r.size) for r in rows]
    ids = np.zeros((len(rows), max(lengths)), np.int64)
    for b, r in enumerate(rows):
        ids[b, : r.size] = r
    feed: dict[str, np.ndarray] = {
        "input": ids,
        "input_lengths": np.asarray(lengths, np.int64),
        "scales": np.asarray([config.noise_scale, length_scale, config.noise_w_scale], np.float32),
    }
    if config.num_speakers > 1:
        feed["sid"] = np.full((len(rows),), config.default_speaker_id, np.int64)
    return feed


def encode_batch(
    graph: RewrittenGraph,
    config: PiperConfig,
    rows: Sequence[np.ndarray],
    seeds: Sequence[tuple[int, int]],
    speed: float,
    frames_per_phoneme: float,
) -> Encoded:
    """Run the encoder (text encoder, durations, prior sample) for B segments of one voice and
    speed; the flow and decoder run later on windows (`decode_in_line`, or the decoder stage).

    Args:
        rows: B arrays of phoneme ids, (T_b,) int64.
        seeds: B (request seed, segment index) pairs.
        speed: speaking rate factor; length_scale = voice length_scale / speed.
        frames_per_phoneme: first guess of output frames per id (noise size), retried x4 if short.
    Raises:
        onnxruntime errors: the noise was still too short after the retries, or a bad graph.
    """
    length_scale = config.length_scale / speed
    feed = phoneme_feed(config, rows, length_scale)
    lengths = [int(n) for n in feed["input_lengths"]]
    t_max = max(lengths)
    f_cap = math.ceil(t_max * frames_per_phoneme * length_scale) + 16
    names = list(graph.frames.flow_inputs) if graph.frames is not None else [OUTPUT]
    for attempt in range(_MAX_NOISE_RETRIES + 1):
        feed[NOISE_DP_INPUT], feed[NOISE_Z_INPUT] = _noise(
            seeds, lengths, t_max, f_cap, graph.noise_channels
        )
        try:
            *values, durations = graph.session.run([*names, graph.durations_output], feed)
            break
        except (Fail, InvalidArgument, RuntimeException):
            # Prior noise shorter than the output frames: the Slice comes up short.
            if attempt == _MAX_NOISE_RETRIES:
                raise
            log.info("noise of %d frames too short for %d ids; retrying x4", f_cap, t_max)
            f_cap *= 4
    frames = np.maximum(durations[:, 0, :].sum(axis=1), 1).astype(np.int64)
    return Encoded(values, frames, durations[:, 0, :])


def synthesize_batch(
    graph: RewrittenGraph,
    config: PiperConfig,
    rows: Sequence[np.ndarray],
    seeds: Sequence[tuple[int, int]],
    speed: float,
    frames_per_phoneme: float,
    plan: DecodePlan | None = None,
) -> list[np.ndarray]:
    """Synthesize B segments of one voice at one speed: one encoder run, then each row decoded
    (`encode_batch`'s arguments).

    Args:
        plan: how each row's latent is cut into windows (default: whole, in one run); ignored
            by an uncut graph (``graph.frames`` None), which outputs the waveforms itself.
    Returns:
        B waveforms, (N_b,) float32 in [-1, 1], N_b = max(sum(durations_b), 1) * hop_length.
    """
    encoded = encode_batch(graph, config, rows, seeds, speed, frames_per_phoneme)
    plan = plan or DecodePlan()
    out = []
    for b in range(len(rows)):
        values, frames = encoded.row(b)
        windows = [cut_window(values, w, plan.flow_pad_frames) for w in plan.windows(frames)]
        out.append(decode_in_line(graph, values, frames, windows, config.hop_length))
    return out


def decode_in_line(graph: RewrittenGraph, values: list[np.ndarray], frames: int,
                   windows: Sequence[CutWindow], hop: int) -> np.ndarray:
    """One row's waveform, its windows run one after another here; (frames * hop,) float32
    clipped to [-1, 1]. An uncut graph's `values` are the waveform already (windows unused)."""
    if graph.frames is None:
        wave = values[0].reshape(-1)[: frames * hop]
    else:
        wave = np.concatenate([decode_window(graph.frames, w, hop) for w in windows])
    return np.clip(wave, -1.0, 1.0).astype(np.float32)
