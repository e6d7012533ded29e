"""What a stage returns: one typed output per item, or an exception for that item alone.

- `Segments`: the front end's plan for a whole request (fans out into segment items).
- `Next`: the payload for the next stage; the new item keeps the input's segment, part and
  `final` flag.
- `Parts`: a whole segment continues as several parts for the next stage (a vocoder's windows
  of frames): part i carries payload i, the last is final. The parts may run in parallel
  (unless the next stage is `in_order`); the request plays them in order.
- `StreamedParts`: like `Parts`, but the payloads are made one by one after the run, by the
  same worker, each passed on as soon as it exists (a segment decoded in line whose first
  window should not wait for the rest).
- `Audio`: (N,) float32 samples in [-1, 1] at the voice's rate, from the last stage: one chunk of
  the segment at the input's part; the chunk with ``final`` closes the segment. A stage that
  needs more input before it can emit (a vocoder's lookahead) returns an empty `Audio`.
- `Continued`: from the last stage, an `Audio` of the input's part (never final) and the rest
  of its segment, which goes back to the same stage's queue as the segment's next part (a
  segment cut at schedule time so its head meets its listener's deadline).
- an `Exception` instance: that item's request fails with it; its batch-mates go on.

`Next`, `Parts`, `StreamedParts` and `Audio` may carry a segment's word timings (`words`,
`WordTiming`, only when the request asked for timestamps): they ride with the segment's first
part from stage to stage and reach the request with that part's audio.

An autoregressive stage returns one `Step` per item and step instead (see
`voxflow.stages.autoregressive`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np


@dataclass(frozen=True)
class WordTiming:
    """When one word of the input is spoken in its segment's audio.

    Attributes:
        start_s, end_s: seconds from the segment's first sample (as the last stage outputs
            it: speed applied, no pauses), start_s <= end_s.
        text_start, text_end: code point offsets of the word in the request's `input`.
    """

    start_s: float
    end_s: float
    text_start: int
    text_end: int


Words = tuple[WordTiming, ...] | None
"""A segment's word timings, in order; None when the request did not ask for them."""


@dataclass(frozen=True)
class Segments:
    """A request's segments, from the front end (the stage with ``fans_out``).

    Attributes:
        payloads: the next stage's payload per segment, in reading order; none when the input
            has nothing speakable: the request's audio is then `lead_silence_s` of silence.
        speeds: segment index -> speaking-rate factor, for segments whose factor is not the
            request's `speed` (SSML ``<prosody rate>``).
        pauses_after: segment index -> seconds of silence after that segment's audio.
        lead_silence_s: seconds of silence before segment 0's audio.
    """

    payloads: list[Any]
    speeds: dict[int, float] = field(default_factory=dict)
    pauses_after: dict[int, float] = field(default_factory=dict)
    lead_silence_s: float = 0.0


@dataclass(frozen=True)
class Next:
    """The payload the next stage consumes for this item."""

    payload: Any
    words: Words = None


@dataclass(frozen=True)
class Parts:
    """The next stage's payloads for the parts of this item's segment, in playback order.

    Only for an item that is a whole segment (part 0, final); at least one payload.
    """

    payloads: list[Any]
    words: Words = None


@dataclass(frozen=True)
class StreamedParts:
    """`Parts` whose payloads are made one by one after the run, in playback order.

    The worker that ran the stage calls `produce()` and passes each payload to the next stage
    the moment it is yielded, still inside the run's memory reservation; `count` (at least 1)
    says how many it yields, so the last is marked final. An exception while producing fails
    the item's request (parts already passed on are dropped with it). Only for an item that is
    a whole segment (part 0, final).
    """

    count: int
    produce: Callable[[], Iterator[Any]]
    words: Words = None


@dataclass(frozen=True)
class Audio:
    """Audio of the item's segment part: (N,) float32 in [-1, 1] at the voice's sample rate.

    Empty when the stage holds its output back (lookahead); the item's `final` flag still ends
    the segment.
    """

    samples: np.ndarray
    words: Words = None

    @classmethod
    def empty(cls) -> Audio:
        return cls(np.zeros(0, np.float32))


@dataclass(frozen=True)
class Continued:
    """The last stage's audio of the item's part, and the rest of the segment after it.

    `audio` goes to the request as the item's part, not final (its words, seconds from the
    segment's first sample, with it); `rest` is queued back into the same stage as part
    ``item.part + 1`` with the item's `final` flag, and scheduled like any continuation (due
    when the audio sent so far runs out).
    """

    audio: Audio
    rest: Any


StageOutput = Union[Segments, Next, Parts, StreamedParts, Audio, Continued, BaseException]  # noqa: UP007 (runtime alias)
"""One item's result of `Stage.run`."""


def check_outputs(stage_name: str, outputs: list, n_items: int) -> list:
    """`outputs` unchanged if it is one `StageOutput` per item.

    Raises:
        TypeError: the count differs from `n_items`, or an output is not a `StageOutput` (a
            stage bug: the engine then retries the items one by one).
    """
    kinds = (Segments, Next, Parts, StreamedParts, Audio, Continued, BaseException)
    if len(outputs) != n_items:
        raise TypeError(f"stage {stage_name} returned {len(outputs)} outputs for {n_items} items")
    for out in outputs:
        if not isinstance(out, kinds):
            raise TypeError(
                f"stage {stage_name} returned {type(out).__name__}; expected Segments, Next, "
                "Parts, StreamedParts, Audio, Continued or an exception"
            )
    return outputs
