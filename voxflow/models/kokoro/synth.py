"""One run of the Kokoro graph for one segment, and the trimming of its padding silence.

Kokoro surrounds the speech of every segment with silence (about 0.3 s before and 0.6 s after
a sentence, at speed 1); played back to back, segments would be a second apart. The silence is
cut to 50 ms before the first and `pause_s` after the last 10 ms frame (both divided by the
speed) whose RMS is within 60 dB of the segment's loudest frame (the padding is far below
that, around -110 dB, while breath and decay stay above it). Nothing inside the speech is
touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from voxflow.models.kokoro.voices import style_for

HEAD_S = 0.05
FRAME_S = 0.01
SILENCE_DB = -60.0


@dataclass(frozen=True)
class Rendered:
    """One run of the graph.

    Attributes:
        audio: (N,) float32 at 24 kHz, as the graph made it (untrimmed).
        durations: (T + 2,) float64 frames per token (`loader.HOP_SAMPLES` samples each), the
            two pads included; they sum to N / HOP_SAMPLES.
    """

    audio: np.ndarray
    durations: np.ndarray


def run_graph(
    session: ort.InferenceSession, token_ids: np.ndarray, table: np.ndarray, speed: float
) -> Rendered:
    """Synthesize one segment.

    Args:
        token_ids: (T,) int64 vocabulary ids, 1 <= T <= 510, without pads.
        table: the voice's (510, 256) style table; row T - 1 is used.
        speed: speaking rate factor (the graph divides predicted durations by it).
    Returns:
        The audio and the per-token durations it was rendered with.
    """
    tokens = np.zeros((1, token_ids.size + 2), np.int64)  # (1, T + 2): a 0 pad at each end
    tokens[0, 1:-1] = token_ids
    feed = {
        "tokens": tokens,
        "style": style_for(table, int(token_ids.size)),
        "speed": np.asarray([speed], np.float32),
    }
    audio, durations = session.run(["audio", "durations"], feed)
    return Rendered(np.asarray(audio, np.float32).reshape(-1),
                    np.asarray(durations, np.float64).reshape(-1))


def speech_bounds(
    audio: np.ndarray, sample_rate: int, pause_s: float, speed: float = 1.0
) -> tuple[int, int]:
    """Where a segment's speech starts and ends, padding silence cut (see the module docstring).

    Args:
        audio: (N,) float32.
        pause_s: seconds of silence kept after the last sounding frame, at speed 1.
        speed: rate factor the kept silence follows: ``HEAD_S / speed`` before and
            ``pause_s / speed`` after the speech (pass the speed `audio` was rendered at;
            a later time stretch then scales the pauses with the speech).
    Returns:
        (start, end) sample indices, 0 <= start < end <= N; (0, N) when `audio` has no
        sounding frame or is shorter than one frame.
    """
    frame = max(1, int(sample_rate * FRAME_S))
    n = audio.size // frame
    if n == 0:
        return 0, audio.size
    rms = np.sqrt(np.mean(np.square(audio[: n * frame].reshape(n, frame)), axis=1))  # (n,)
    peak = float(rms.max())
    if peak == 0.0:
        return 0, audio.size
    loud = np.flatnonzero(rms >= peak * 10 ** (SILENCE_DB / 20))
    start = max(0, int(loud[0]) * frame - int(HEAD_S / speed * sample_rate))
    end = min(audio.size, (int(loud[-1]) + 1) * frame + int(pause_s / speed * sample_rate))
    return start, end


def trim_silence(
    audio: np.ndarray, sample_rate: int, pause_s: float, speed: float = 1.0
) -> np.ndarray:
    """`audio` cut to its `speech_bounds` (same arguments), clipped to [-1, 1].

    Returns:
        (M,) float32, M <= N; `audio` whole (clipped) when it has no sounding frame or is
        shorter than one frame.
    """
    start, end = speech_bounds(audio, sample_rate, pause_s, speed)
    return np.clip(audio[start:end], -1.0, 1.0)
