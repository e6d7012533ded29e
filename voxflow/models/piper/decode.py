"""Run a Piper voice's flow and HiFi-GAN decoder on windows of latent frames.

Flow and decoder (`split.py`) are convolutions over the latent's frames, so the samples of
frames [s, e) depend only on the frames within their receptive fields around them. A decoder
window decodes frames [lo, hi) = [s - pad, e + pad) (clipped to the segment) and keeps the
samples of [s, e); the flow before it runs on [lo - flow_pad, hi + flow_pad) and hands the
decoder its frames [lo, hi). With `pad_frames` and `flow_pad_frames` at least the receptive
fields (11 and 32 frames for joe) the kept samples equal a whole-segment run up to float
rounding (joe, 6 sentences x 6 window sizes: at most 3e-6, a tenth of a 16-bit step; 8 frames
of decoder pad: 3e-3; `tests/unit/test_piper_decode.py`), and the memory is that of one window,
not of the segment (`docs/architecture.md`, Memory). At a segment's true ends the windows end
there too, as the whole run's do. The windows depend only on the frame count, so a seeded
request's bytes do not change run to run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import cast

import numpy as np

from voxflow.models.onnx_memory import ArenaSession
from voxflow.models.piper.loader import FrameModels
from voxflow.models.piper.split import OUTPUT
from voxflow.models.piper.stream_flow import FlowState, StreamingFlow


@dataclass(frozen=True)
class DecodePlan:
    """How a segment's latent is cut into windows.

    Attributes:
        chunk_frames: most frames kept per window (None: the whole segment in one window).
        pad_frames: decoder context frames on each side of a window, decoded and dropped.
        first_frames: frames of a small first window, so that audio starts after running only
            those (time to first audio); None or at least the segment: no such window.
        flow_pad_frames: flow context frames on each side of the decoder's frames.
        growth: each window after the first holds at most this many times the frames of the
            one before it (up to `chunk_frames`), so that while a window plays the next one,
            `growth` times longer, can be decoded: with the decoder at least `growth` times
            faster than real time, no window arrives after its predecessor has played out
            (joe decodes about 10x real time on one core of this machine). 1 or less: only
            the first window is small.
    """

    chunk_frames: int | None = None
    pad_frames: int = 12
    first_frames: int | None = None
    flow_pad_frames: int = 32
    growth: float = 2.5

    def _heads(self, frames: int) -> list[int]:
        """The small windows a segment starts with, growing by `growth` until the rest fits in
        one window of at most 1.5 x `growth` times the last (rather than leaving a tail window
        of a few frames), or the next would reach `chunk_frames`; none when the segment is not
        longer than the first window."""
        first = self.first_frames or 0
        if not 0 < first < frames:
            return []
        heads = [first]
        cap = self.chunk_frames or frames
        while self.growth > 1:
            nxt = min(cap, int(heads[-1] * self.growth))
            rest = frames - sum(heads)
            if rest <= min(cap, nxt * 3 // 2) or nxt >= cap:  # no tail window of a few frames
                break
            heads.append(nxt)
        return heads

    def windows(self, frames: int, first: bool = False,
                heads_within: int | None = None) -> list[tuple[int, int, int, int]]:
        """(lo, s, e, hi) per decoder run: decode frames [lo, hi), keep [s, e).

        The windows cover [0, frames) in order, without gaps or overlap: with `first` (and
        `first_frames` shorter than the segment) a first window of `first_frames` and windows
        growing from it (`_heads`), only those ending within the first `heads_within` frames
        when given (the first always); then the fewest windows of at most `chunk_frames` for
        the rest, of equal size (the last may be shorter).
        """
        heads = self._heads(frames) if first else []
        if heads_within is not None:
            ends = list(itertools.accumulate(heads))
            heads = heads[:1] + [h for h, end in zip(heads[1:], ends[1:], strict=True)
                                 if end <= heads_within]
        head = sum(heads)
        rest = frames - head
        count = -(-rest // self.chunk_frames) if self.chunk_frames else 1
        step = max(1, -(-rest // max(count, 1)))
        bounds = [sum(heads[:i]) for i in range(len(heads))] + list(range(head, frames, step))
        out = []
        for s, e in zip(bounds, [*bounds[1:], frames], strict=True):
            out.append((max(0, s - self.pad_frames), s, e, min(frames, e + self.pad_frames)))
        return out


@dataclass(frozen=True)
class DecodeWindow:
    """One window's inputs: the flow's inputs over its frames with context, and what is kept.

    Attributes:
        values: the flow's inputs over frames [a, b): z_p (1, C, b - a) and y_mask (1, 1, b - a)
            float32, then any per-row input (a speaker embedding) whole.
        span: the decoder's frames [lo, hi) within [a, b), as (lo - a, hi - a).
        keep: the kept frames [s, e) within [lo, hi), as (s - lo, e - lo).
    """

    values: list[np.ndarray]
    span: tuple[int, int]
    keep: tuple[int, int]

    @property
    def frames(self) -> int:
        """Flow frames of the window (with all its context)."""
        return int(self.values[0].shape[-1])

    @property
    def batch_shape(self) -> tuple:
        """Windows of equal batch shape (and voice) run together (`decode_windows`)."""
        return (self.frames, self.span)


@dataclass(eq=False)
class SegmentStream:
    """One segment's flow run as a stream across its windows (`stream_flow.py`): each frame
    of the prior sample goes through the flow once, where windows with context run the flow
    over `flow_pad_frames` more on each side at every seam.

    Attributes:
        z_p: the segment's prior sample, (1, C, F) float32.
        state: the flow's carried state after the blocks fed so far (None before the first).
        latent: the flow's output frames [latent_from, latent_from + width) kept for the
            decoder's windows, (1, C, width) float32.
    """

    z_p: np.ndarray
    state: FlowState | None = None
    latent: np.ndarray | None = None
    latent_from: int = 0

    @property
    def frames(self) -> int:
        return int(self.z_p.shape[-1])

    def take(self, latent: np.ndarray, keep_from: int) -> None:
        """Append the flow's new frames (1, C, m) and drop those before frame `keep_from`."""
        joined = latent if self.latent is None else np.concatenate([self.latent, latent], 2)
        drop = max(0, keep_from - self.latent_from)
        self.latent, self.latent_from = joined[:, :, drop:], self.latent_from + drop

    def latent_of(self, lo: int, hi: int) -> np.ndarray:
        """The kept latent frames [lo, hi), (1, C, hi - lo) float32 (a view)."""
        start = lo - self.latent_from
        assert self.latent is not None and start >= 0 and hi - self.latent_from <= (
            self.latent.shape[-1])
        return self.latent[:, :, start:start + hi - lo]


@dataclass(frozen=True, eq=False)
class FlowBlock:
    """A decoder-stage part that first feeds its `SegmentStream`'s flow the prior frames
    `feed` = [a, b) (the stream's last block when b is the segment's end, none when a == b),
    then decodes from the stream's latent from frame `first_lo` on."""

    stream: SegmentStream
    feed: tuple[int, int]

    @property
    def frames(self) -> int:
        """Prior frames fed to the flow."""
        return self.feed[1] - self.feed[0]

    @property
    def last(self) -> bool:
        return self.feed[1] == self.stream.frames

    @property
    def first_lo(self) -> int:
        """The first latent frame it decodes: the stream keeps no earlier one after it."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False, kw_only=True)
class StreamWindow(FlowBlock):
    """One window of a `SegmentStream` (a `FlowBlock`): feed the flow its prior frames, then
    decode latent frames [lo, hi) and keep [s, e).

    Windows of one stream must run in order, once each (the decoder stage's `in_order`, or
    one after another in line).
    """

    window: tuple[int, int, int, int]

    @property
    def first_lo(self) -> int:
        return self.window[0]

    @property
    def span(self) -> tuple[int, int]:
        """The decoder's frames, relative: (0, hi - lo)."""
        return (0, self.window[3] - self.window[0])

    @property
    def keep(self) -> tuple[int, int]:
        lo, s, e, _ = self.window
        return (s - lo, e - lo)

    @property
    def batch_shape(self) -> tuple:
        first = self.feed[0] == 0
        return ("stream", self.frames, first, self.last, self.span, self.keep)


@dataclass(frozen=True, eq=False, kw_only=True)
class SideBySide(FlowBlock):
    """The frames of a lone segment after its first window (or all of them), decoded as
    `windows` side by side, one per core, each on a one-thread session.

    On two cores a HiFi-GAN decode on one thread in the NCHWc layout (`nchwc.py`) runs at
    about 0.45 ms a frame against 0.38 ms for the stock layout on two threads, which split
    its small convolutions poorly: joe's 53 segments of sentences.txt, each cut in two halves
    with their 12 context frames decoded side by side, took 3.62 s against 4.78 s one after
    another on two threads (2-core Intel Xeon). The flow's rest runs first, once, on the
    stream (`SegmentStream`), so the halves only decode.

    Attributes:
        stream: the segment's flow stream (its first window, if any, already ran).
        feed: the prior frames [a, F) still to feed the flow (its last block; empty when an
            earlier window's block was already the last).
        windows: (lo, s, e, hi) decoder windows covering the frames left, in order.
    """

    windows: tuple[tuple[int, int, int, int], ...]

    @property
    def first_lo(self) -> int:
        return self.windows[0][0]

    @property
    def span(self) -> tuple[int, int]:
        """(0, the decoder's frames over all windows, context included)."""
        return (0, sum(hi - lo for lo, _, _, hi in self.windows))

    @property
    def batch_shape(self) -> tuple:
        return ("side by side", id(self))  # runs alone: its windows are its batch

    @property
    def peak_frames(self) -> int:
        """The decoder's frames in flight at once: its two largest windows."""
        spans = sorted((hi - lo for lo, _, _, hi in self.windows), reverse=True)
        return sum(spans[:2])


def side_by_side(values: list[np.ndarray], first: tuple[int, int, int, int] | None,
                 frames: int, pad: int, lookahead: int, chunk: int | None,
                 min_frames: int = 96, lead_pair_frames: int | None = None,
                 growth: float = 2.5) -> list[StreamWindow | SideBySide | DecodeWindow]:
    """A lone segment's windows: `first` (a small first window, or None), then the rest of
    its `frames` as one `SideBySide` of two windows (more, in pairs, where a half would
    exceed `chunk`), each with `pad` context frames; a rest under `min_frames` is one
    window (its seam would cost more than the second core gains).

    With a first window and `lead_pair_frames`, the frames after it go as several
    `SideBySide` parts, each a pair of equal windows: the lead pair of two windows of
    `lead_pair_frames` (where at least `min_frames` would be left after it), then pairs
    growing by `growth` (up to `chunk`), then the rest in equal pairs of at most `chunk`:
    `DecodePlan.windows` at twice the size, pad 0. A part is sent only when all its
    windows are decoded; the rest of a long segment as one part could end after the first
    window had played out: in open loop at 1.26 and 1.68 requests/s (2-core AMD EPYC, joe)
    that stalled 3-4% of requests, against none without side by side, and with the lead
    pair alone still 1 of 84 at 2.1 and 1 of 101 at 2.52 (docs/benchmarks.md). Growing
    parts keep the decode plan's promise (`DecodePlan.growth`): while a part plays, the
    next, at most `growth` times longer, is decoded, even on one thread when another run
    took the second core. Each part boundary costs one seam (2 x `pad` decoder frames).

    Args:
        values: the flow's inputs for the row, z_p (1, C, F) first.
        lookahead: the streamed flow's lag (`StreamingFlow.lookahead`).
        lead_pair_frames: the frames of each window of the lead pair (the decode plan's
            second window); None: the rest as one part.
        growth: each part's windows at most this many times the part before's
            (`DecodePlan.growth`).
    """
    start = first[2] if first is not None else 0
    stream = SegmentStream(values[0])
    out: list[StreamWindow | SideBySide | DecodeWindow] = []
    fed = 0
    if first is not None:
        fed = min(frames, first[3] + lookahead)
        out.append(StreamWindow(stream, (0, fed), window=first))
    spans = [(start, frames)]
    if (first is not None and lead_pair_frames
            and frames - start - 2 * lead_pair_frames >= min_frames):
        # the parts are the decode plan's growing windows at twice the size, over the rest:
        # a pair of `lead_pair_frames`, then growing, then equal parts of at most two chunks
        parts = DecodePlan(2 * chunk if chunk else None, 0, 2 * lead_pair_frames,
                           growth=growth)
        spans = [(start + s, start + e)
                 for _, s, e, _ in parts.windows(frames - start, first=True)]
    for lo, hi in spans:
        windows = _pairs(lo, hi, frames, pad, chunk, min_frames)
        feed_to = frames if hi == frames else min(frames, windows[-1][3] + lookahead)
        out.append(SideBySide(stream, (fed, feed_to), windows=windows))
        fed = feed_to
    return out


def _pairs(start: int, end: int, frames: int, pad: int, chunk: int | None,
           min_frames: int) -> tuple[tuple[int, int, int, int], ...]:
    """Frames [start, end) of a segment of `frames` as (lo, s, e, hi) decoder windows with
    `pad` context frames: one under `min_frames`, else pairs of equal windows of at most
    `chunk` frames."""
    rest = end - start
    parts = 1 if rest < min_frames else 2 * max(1, -(-rest // (2 * (chunk or rest))))
    step = -(-rest // parts)
    bounds = list(range(start, end, step)) + [end]
    return tuple((max(0, s - pad), s, e, min(frames, e + pad))
                 for s, e in itertools.pairwise(bounds))


CutWindow = DecodeWindow | StreamWindow
"""A window `decode_windows` runs; `batch_shape` says which run together."""
Window = CutWindow | SideBySide
"""A decoder-stage payload of any kind."""


def stream_windows(values: list[np.ndarray], windows: list[tuple[int, int, int, int]],
                   lookahead: int) -> list[StreamWindow]:
    """`windows` (`DecodePlan.windows`) of one segment as `StreamWindow`s of one stream.

    Args:
        values: the flow's inputs for the row, z_p (1, C, F) first (the frame mask is all
            ones within a segment; per-row extras are not streamed).
        lookahead: the streamed flow's lag in frames (`StreamingFlow.lookahead`): the window
            ending at decoder frame hi feeds the prior up to hi + lookahead.
    """
    stream = SegmentStream(values[0])
    frames = stream.frames
    out, fed = [], 0
    for window in windows:
        end = min(frames, window[3] + lookahead)
        out.append(StreamWindow(stream, (fed, max(fed, end)), window=window))
        fed = max(fed, end)
    return out


def _run_stream_flow(flow: StreamingFlow, windows: Sequence[FlowBlock]) -> None:
    """Feed each window's prior block to its stream's flow, as one batched run."""
    first = windows[0]
    if first.frames == 0:
        return  # the flow's last block ran with an earlier window
    if first.feed[0] == 0:
        state = flow.start(len(windows))
    else:
        state = FlowState.stack([w.stream.state for w in windows])  # type: ignore[misc]
    z_p = np.concatenate([w.stream.z_p[:, :, w.feed[0]:w.feed[1]] for w in windows])
    latent, state = flow.step(z_p, state, last=first.last)
    for b, (w, row) in enumerate(zip(windows, state.split(), strict=True)):
        w.stream.state = row
        w.stream.take(latent[b:b + 1], w.first_lo)


def decode_stream_windows(models: FrameModels, windows: list[StreamWindow],
                          hop: int) -> list[np.ndarray]:
    """`decode_windows` for `StreamWindow`s of one batch shape: the flow on each one's new
    prior frames, then the decoder over its frames with context (from the stream's kept
    latent); the kept samples of each."""
    assert models.stream_flow is not None
    _run_stream_flow(models.stream_flow, windows)
    rows = [w.stream.latent_of(w.window[0], w.window[3]) for w in windows]
    (wave,) = models.decoder.run([OUTPUT], {models.decoder_inputs[0]: np.concatenate(rows)})
    flat = wave.reshape(len(windows), -1)
    return [flat[b, w.keep[0] * hop: w.keep[1] * hop] for b, w in enumerate(windows)]


def cut_window(values: list[np.ndarray], window: tuple[int, int, int, int],
               flow_pad: int) -> DecodeWindow:
    """The `DecodeWindow` of `window` = (lo, s, e, hi) from a row's flow inputs (1, ...).

    Args:
        values: z_p (1, C, F) and y_mask (1, 1, F), then per-row extras (the encoder's).
        flow_pad: flow context frames on each side of [lo, hi) (clipped to [0, F)).
    """
    lo, s, e, hi = window
    frames = values[0].shape[-1]
    a, b = max(0, lo - flow_pad), min(frames, hi + flow_pad)
    cut = [np.ascontiguousarray(v[:, :, a:b]) for v in values[:2]]  # own memory, not views
    return DecodeWindow([*cut, *values[2:]], (lo - a, hi - a), (s - lo, e - lo))


def decode_window(models: FrameModels, window: CutWindow, hop: int) -> np.ndarray:
    """Run flow and decoder on one window; the kept samples, ((e - s) * hop,) float32.

    Args:
        models: the voice's flow and decoder (`loader.RewrittenGraph.frames`).
        hop: samples per frame (the voice's ``hop_length``).
    """
    return decode_windows(models, [window], hop)[0]


def decode_windows(models: FrameModels, windows: Sequence[CutWindow],
                   hop: int) -> list[np.ndarray]:
    """Run flow and decoder on windows of equal shape in one batched run each; the kept
    samples of each window.

    Raises:
        ValueError: windows of different batch shapes (`batch_shape`).
    """
    if len({w.batch_shape for w in windows}) != 1:
        raise ValueError("only windows of one length and span run together")
    if isinstance(windows[0], StreamWindow):
        return decode_stream_windows(models, cast(list[StreamWindow], windows), hop)
    windows = cast(list[DecodeWindow], windows)
    feed = {name: np.concatenate([w.values[i] for w in windows])
            for i, name in enumerate(models.flow_inputs)}
    (latent,) = models.flow.run([models.decoder_inputs[0]], feed)
    lo, hi = windows[0].span
    dec_feed = {models.decoder_inputs[0]: np.ascontiguousarray(latent[:, :, lo:hi])}
    dec_feed.update({name: feed[name] for name in models.decoder_inputs[1:]})  # = flow extras
    (wave,) = models.decoder.run([OUTPUT], dec_feed)
    flat = wave.reshape(len(windows), -1)
    return [flat[b, w.keep[0] * hop : w.keep[1] * hop] for b, w in enumerate(windows)]


def decode_side_by_side(flow: StreamingFlow, decoder: ArenaSession, name: str,
                        item: SideBySide, hop: int,
                        beside: Callable[[Callable[[], list[np.ndarray]]], Future] | None
                        ) -> np.ndarray:
    """A `SideBySide`'s samples, ((F - s0) * hop,) float32: the flow's last block on `flow`,
    then its windows on `decoder` (a one-thread session), half of them on the thread
    `beside` runs a function on (every other window, so each thread has one of each
    pair), the rest here; all here, in order, with `beside` None.

    Args:
        name: the decoder's latent input.
    """
    _run_stream_flow(flow, [item])
    stream = item.stream

    def decode(windows: Sequence[tuple[int, int, int, int]]) -> list[np.ndarray]:
        out = []
        for lo, s, e, hi in windows:
            latent = np.ascontiguousarray(stream.latent_of(lo, hi))
            (wave,) = decoder.run([OUTPUT], {name: latent})
            out.append(wave.reshape(-1)[(s - lo) * hop:(e - lo) * hop])
        return out

    if beside is None or len(item.windows) < 2:
        return np.concatenate(decode(item.windows))
    odd = beside(lambda: decode(item.windows[1::2]))
    even = decode(item.windows[0::2])
    # even windows are 0, 2, ...; odd ones 1, 3, ...: interleave them back in order
    return np.concatenate([part for pair in itertools.zip_longest(even, odd.result())
                           for part in pair if part is not None])
