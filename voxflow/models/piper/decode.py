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

from dataclasses import dataclass

import numpy as np

from voxflow.models.onnx_memory import ArenaSession
from voxflow.models.piper.split import OUTPUT


@dataclass(frozen=True)
class DecodePlan:
    """How a segment's latent is cut into decoder windows.

    Attributes:
        chunk_frames: most frames kept per decoder run (None: the whole segment in one run).
        pad_frames: context frames decoded on each side of a window and dropped.
        first_frames: frames of a small first window, so that audio starts after decoding
            only those (time to first audio); None or at least the segment: no such window.
    """

    chunk_frames: int | None = None
    pad_frames: int = 12
    first_frames: int | None = None

    def windows(self, frames: int, first: bool = False) -> list[tuple[int, int, int, int]]:
        """(lo, s, e, hi) per decoder run: decode frames [lo, hi), keep [s, e).

        The windows cover [0, frames) in order, without gaps or overlap: with `first` (and
        `first_frames` shorter than the segment) a first window of `first_frames`, then the
        fewest windows of at most `chunk_frames` for the rest, of equal size (the last may be
        shorter).
        """
        head = self.first_frames if first and self.first_frames else 0
        head = head if head < frames else 0
        rest = frames - head
        count = -(-rest // self.chunk_frames) if self.chunk_frames else 1
        step = max(1, -(-rest // max(count, 1)))
        bounds = ([0] if head else []) + list(range(head, frames, step))
        out = []
        for s, e in zip(bounds, [*bounds[1:], frames], strict=True):
            out.append((max(0, s - self.pad_frames), s, e, min(frames, e + self.pad_frames)))
        return out


@dataclass(frozen=True)
class DecodeWindow:
    """One decoder run's inputs: frames [lo, hi) of a row's latent and the part of it kept.

    Attributes:
        values: the decoder's inputs: the latent window (1, C, hi - lo) float32 first, then any
            per-row input (a speaker embedding) whole.
        keep: (s - lo, e - lo), the frames of the window whose samples are kept.
    """

    values: list[np.ndarray]
    keep: tuple[int, int]

    @property
    def frames(self) -> int:
        """Frames decoded (the window with its context)."""
        return int(self.values[0].shape[-1])


def cut_window(values: list[np.ndarray], window: tuple[int, int, int, int]) -> DecodeWindow:
    """The `DecodeWindow` of `window` = (lo, s, e, hi) from a row's decoder inputs (1, ...)."""
    lo, s, e, hi = window
    latent = np.ascontiguousarray(values[0][:, :, lo:hi])  # (1, C, hi - lo), own memory
    return DecodeWindow([latent, *values[1:]], (s - lo, e - lo))


def decode_window(decoder: ArenaSession, inputs: tuple[str, ...], window: DecodeWindow,
                  hop: int) -> np.ndarray:
    """Run the decoder on one window; returns the kept samples, ((e - s) * hop,) float32.

    Args:
        decoder: the decoder session (`loader.RewrittenGraph.decoder`).
        inputs: its input names, the latent first (`RewrittenGraph.decoder_inputs`).
        hop: samples per frame (the voice's ``hop_length``).
    """
    (wave,) = decoder.run([OUTPUT], dict(zip(inputs, window.values, strict=True)))
    a, b = window.keep
    return wave.reshape(-1)[a * hop : b * hop]


def decode_windows(decoder: ArenaSession, inputs: tuple[str, ...], windows: list[DecodeWindow],
                   hop: int) -> list[np.ndarray]:
    """Decode windows of equal `frames` in one batched run; the kept samples of each.

    Raises:
        ValueError: windows of different lengths, or per-row inputs of different shapes.
    """
    if len({w.frames for w in windows}) != 1:
        raise ValueError("only windows of one length decode together")
    feed = {name: np.concatenate([w.values[i] for w in windows])
            for i, name in enumerate(inputs)}
    (wave,) = decoder.run([OUTPUT], feed)
    flat = wave.reshape(len(windows), -1)
    return [flat[b, w.keep[0] * hop : w.keep[1] * hop] for b, w in enumerate(windows)]
