"""One request as the client saw it, and the per-request metrics computed from it.

A `Timeline` holds the time the request was sent and, for every piece of audio received, its
arrival time and how many samples it carried (headers, SSE framing and empty reads are never
recorded). Everything below is plain arithmetic on that record, so it is tested on synthetic
timelines without a server.

Streaming viability: playback starts when the first audio arrives and plays in real time. A piece
that arrives after the audio before it has finished playing makes the listener wait: a **stall**
of ``arrival - playback_end`` seconds, after which playback resumes from the new piece. A piece
that arrives exactly when the previous audio ends is on time (no stall).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Arrival:
    """Audio received at `t` seconds (client clock, same origin as `Timeline.sent`)."""

    t: float
    samples: int


@dataclass(frozen=True)
class Stalls:
    """How often and how long a listener starting at the first audio would have waited."""

    count: int
    seconds: float


@dataclass
class Timeline:
    """The client's record of one request.

    Attributes:
        text_index: which input text (index into the case's texts).
        sent: perf_counter seconds just before the request was sent.
        sample_rate: Hz of the decoded audio (0 until known).
        arrivals: audio pieces in arrival order, each with >= 1 sample.
        done: perf_counter seconds when the request ended, with or without an error (None while
            running).
        error: the error kind ("http_429", "timeout", ...) when the request failed, else None.
    """

    text_index: int
    sent: float
    sample_rate: int = 0
    arrivals: list[Arrival] = field(default_factory=list)
    done: float | None = None
    error: str | None = None

    def add(self, t: float, samples: int) -> None:
        """Record `samples` new audio samples received at `t`; zero samples are ignored."""
        if samples > 0:
            self.arrivals.append(Arrival(t, samples))

    @property
    def ok(self) -> bool:
        """Finished without error and with audio."""
        return self.error is None and self.done is not None and bool(self.arrivals)

    @property
    def ttfa(self) -> float:
        """Seconds from sending to the first audio sample."""
        return self.arrivals[0].t - self.sent

    @property
    def latency(self) -> float:
        """Seconds from sending to the end of the body."""
        assert self.done is not None
        return self.done - self.sent

    @property
    def samples(self) -> int:
        return sum(a.samples for a in self.arrivals)

    @property
    def audio_s(self) -> float:
        """Seconds of audio received (decoded samples / sample rate)."""
        return self.samples / self.sample_rate

    @property
    def rtf(self) -> float:
        """Real-time factor: end-to-end latency per second of audio (lower is faster)."""
        return self.latency / self.audio_s

    def gaps(self) -> list[float]:
        """Seconds between consecutive audio arrivals (empty for a single piece)."""
        times = [a.t for a in self.arrivals]
        return [b - a for a, b in zip(times, times[1:], strict=False)]

    def stalls(self) -> Stalls:
        """Stalls of a listener who starts playing at the first arrival (see module docstring)."""
        count, waited = 0, 0.0
        playback_end = None
        for piece in self.arrivals:
            duration = piece.samples / self.sample_rate
            if playback_end is None:
                playback_end = piece.t + duration
            elif piece.t > playback_end:
                count += 1
                waited += piece.t - playback_end
                playback_end = piece.t + duration
            else:
                playback_end += duration
        return Stalls(count, waited)


@dataclass
class Result:
    """One finished request: its timeline and, when kept, its decoded audio (float32, mono,
    at `Timeline.sample_rate`)."""

    timeline: Timeline
    audio: np.ndarray | None = None


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by numpy's default linear interpolation; NaN when empty."""
    return float(np.percentile(values, q)) if values else float("nan")
