"""How fast the decoder runs now, and whether a segment should stream its first window early.

Under load a Piper segment is decoded in line, all its windows in one run, and its audio leaves
at the end: the cheapest way (no seam, no queue hop). A listener waiting for it hears nothing
until then. When that end would come after the item's playback deadline (its `slack_s`, from
the scheduler), but a small first window would be ready before it, the segment is cut into
windows that the same worker still decodes in line but passes on one by one, so its first audio
leaves after the encoder and that window, and each later window follows without a queue. The
seam's extra decoding (2 x `pad_frames`) is spent only where it turns a late first audio into
one on time. Already late either way: decoded in line (the request has missed its deadline;
the cheaper path serves the others sooner).

The decoder's speed is measured, not assumed: an exponentially weighted mean of seconds per
decoded frame over recent runs (flow and HiFi-GAN, context frames included), so it follows the
load (two workers on two cores decode slower than one alone).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

DEFAULT_SECONDS_PER_FRAME = 0.0012
"""Start value before any run is timed: joe (medium) on one core of this 2-core machine decodes
about 850 frames a second in line (`benchmarks/first_audio_floor.py`: RTF 0.05 alone on two
threads, about twice that on one)."""


class DecodePace:
    """Exponentially weighted mean of decoder seconds per frame (thread-safe).

    Args:
        weight: weight of each new observation (0 < weight <= 1).
        start: seconds per frame before the first observation.
    """

    def __init__(self, weight: float = 0.2, start: float = DEFAULT_SECONDS_PER_FRAME) -> None:
        if not 0 < weight <= 1:
            raise ValueError(f"weight must be in (0, 1], got {weight}")
        self._weight = weight
        self._per_frame = start
        self._lock = threading.Lock()
        self.early_windows = 0
        """Segments that streamed their first window ahead under load (`note_early`)."""

    @property
    def seconds_per_frame(self) -> float:
        return self._per_frame

    def observe(self, frames: int, seconds: float) -> None:
        """Record a run that decoded `frames` frames (context included) in `seconds`."""
        if frames <= 0 or seconds < 0:
            return
        with self._lock:
            self._per_frame += self._weight * (seconds / frames - self._per_frame)

    def note_early(self) -> None:
        """Count one segment that streamed its first window ahead (`EarlyWindow`)."""
        with self._lock:
            self.early_windows += 1

    def seconds(self, frames: int) -> float:
        """Predicted seconds to decode `frames` frames now."""
        return frames * self._per_frame


@dataclass(frozen=True)
class EarlyWindow:
    """When a segment decoded under load streams its first window ahead (module docstring).

    Attributes:
        first_frames: frames of the first window (kept samples).
        pad_frames: decoder context frames on each side of a window.
        safety: the whole in-line decode is taken to last this many times its prediction
            from the mean pace: a run's time varies with what shares its core (decoder windows
            of one size took 0.19 and 0.34 s at concurrency 16), and a segment decoded whole
            that ends late is a gap its listener hears, where a needless early window only
            costs its seam's compute.
    """

    first_frames: int
    pad_frames: int
    safety: float = 1.0

    def worth_it(self, slack_s: float, frames: int, pace: DecodePace) -> bool:
        """True when decoding all `frames` in line (`safety` x the predicted time) would end
        after the deadline `slack_s` seconds away, and the first window alone would end
        before it."""
        if self.first_frames <= 0 or frames <= self.first_frames:
            return False
        whole = pace.seconds(frames) * self.safety
        first = pace.seconds(self.first_frames + self.pad_frames)
        return first <= slack_s < whole


def urgent_in(slack_s: float, audio_flowing: bool, frames: int, pace: DecodePace,
              margin_s: float) -> float:
    """Seconds until a Piper item turns urgent (scheduler rule 7; <= 0: it is), the rule both
    stages share. Before its request's first audio: urgent while that audio can be on time
    (`slack_s` > 0), else never (late either way, under overload it waits for the bulk lane
    behind streams already playing). Once audio flows: when `slack_s` less the predicted
    decode of `frames` frames (`pace`) falls below `margin_s` seconds."""
    if not audio_flowing:
        return 0.0 if slack_s > 0 else float("inf")
    return slack_s - pace.seconds(frames) - margin_s
