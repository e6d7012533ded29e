"""Run a Piper voice's HiFi-GAN decoder on windows of latent frames.

The decoder (`split.py`) is a stack of convolutions over the latent's frames, so the samples of
frames [s, e) depend only on the frames within its receptive field around them. A window
decodes frames [s - pad, e + pad) (clipped to the segment) and keeps the samples of [s, e).
With `pad_frames` at least the decoder's receptive field the kept samples equal a whole-segment
decode up to float rounding (joe, 6 sentences x 6 window sizes: 11 or more frames of pad differ
from the whole decode by at most 3e-6, a tenth of a 16-bit step; 8 frames by 3e-3;
`tests/unit/test_piper_decode.py`), and the decoder's memory is that of one window, not of the
segment (`docs/architecture.md`, Memory). At a segment's true ends the window ends there too,
as the whole decode's does. The windows depend only on the frame count, so a seeded request's
bytes do not change run to run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from voxflow.models.onnx_memory import ArenaSession
from voxflow.models.piper.split import OUTPUT


@dataclass(frozen=True)
class DecodePlan:
    """How a segment's latent is decoded.

    Attributes:
        chunk_frames: most frames kept per decoder run (None: the whole segment in one run).
        pad_frames: context frames decoded on each side of a window and dropped.
    """

    chunk_frames: int | None = None
    pad_frames: int = 12

    def windows(self, frames: int) -> Iterator[tuple[int, int, int, int]]:
        """(lo, s, e, hi) per run: decode frames [lo, hi), keep [s, e); covers [0, frames).

        The fewest windows of at most `chunk_frames`, of equal size (the last may be shorter).
        """
        count = -(-frames // self.chunk_frames) if self.chunk_frames else 1
        step = max(1, -(-frames // max(count, 1)))
        for s in range(0, frames, step):
            e = min(frames, s + step)
            yield max(0, s - self.pad_frames), s, e, min(frames, e + self.pad_frames)


def decode_row(
    decoder: ArenaSession,
    inputs: tuple[str, ...],
    values: list[np.ndarray],
    frames: int,
    hop: int,
    plan: DecodePlan,
) -> Iterator[np.ndarray]:
    """Decode one row's latent window by window, yielding each window's kept samples.

    Args:
        decoder: the decoder session (`loader.RewrittenGraph.decoder`).
        inputs: its input names, the latent first (`RewrittenGraph.decoder_inputs`).
        values: the encoder's values of `inputs` for this row: the latent (1, C, F >= frames)
            float32, then any speaker embedding (1, ...) used whole.
        frames: the row's own latent frames (its padding in the batch is not decoded).
        hop: samples per frame (the voice's ``hop_length``).
    Yields:
        (n,) float32 samples, n = (e - s) * hop per window, in order; together frames * hop.
    """
    latent, rest = values[0], values[1:]
    for lo, s, e, hi in plan.windows(frames):
        feed = {inputs[0]: np.ascontiguousarray(latent[:, :, lo:hi])}
        feed.update(zip(inputs[1:], rest, strict=True))
        (wave,) = decoder.run([OUTPUT], feed)
        yield wave.reshape(-1)[(s - lo) * hop:(e - lo) * hop]
