"""What a stage is given: typed items and the batch that carries them.

A stage never sees the engine's request state. Each item carries `RequestInfo`, the immutable
facts of its request decided at validation (voice, language, the seed in use), and where it sits
in the request (segment, part). A `StageBatch` adds what the scheduler guarantees the items
share, in the manner of vLLM's scheduler output: one object, every field commented, nothing a
stage has to look up elsewhere.

Units: `speed` is a speaking-rate factor (1.0 = the voice's natural rate; 2.0 = twice as
fast); segment and part indices are 0-based.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from voxflow.stages.text_feed import TextFeed

P = TypeVar("P")

WHOLE_REQUEST = -1
"""`StageItem.segment` of a request's item before the front end splits it into segments."""


@dataclass(frozen=True)
class RequestInfo:
    """The facts of one request that a stage may use; fixed from validation on.

    Attributes:
        request_id: the request's id (also the key of per-request stage state).
        model: the served model name.
        voice: a voice id of that model.
        language: the one language the request is read in (decided at validation), or None
            when the family decides (documents built outside the engine).
        seed: the seed in use: the client's, or a fresh random one.
        seeded: True when the client gave the seed: its bytes must not depend on load
            (batch-mates, thread counts).
        speed: the request's `speed` (0.25-4); a segment's own rate is `StageItem.speed`.
        arrival: the engine's admission order (ties in scheduling).
        timestamps: True when the client asked for word timestamps: the family's stages
            attach each segment's `voxflow.stages.outputs.WordTiming`s to its output.
        streamed: False when the response is one whole file (`SpeechRequest.streamed`): no
            audio is needed before the last segment's, so no compute is spent to make the
            first early (Kokoro's deadline cuts and Piper's small and early first windows
            skip it, where the request is unseeded).
        instructions: how to speak (a style prompt), for a family that follows them
            (`voxflow.models.base.ModelFamily.follows_instructions`); None: none given.
        text_feed: the text that arrives after submission, for a request that feeds one
            running generation (`TextFeed`; a family with
            `voxflow.models.base.ModelFamily.streams_text_in`); None: the text is all known.
    """

    request_id: str
    model: str
    voice: str
    language: str | None
    seed: int
    seeded: bool
    speed: float = 1.0
    arrival: int = 0
    timestamps: bool = False
    streamed: bool = True
    instructions: str | None = None
    text_feed: TextFeed | None = field(default=None, compare=False)

    @property
    def hurries(self) -> bool:
        """Whether the request takes the streamed shape, cut and windowed for first audio:
        streamed, or seeded (its bytes equal the streamed ones, streamed or not). False: a
        whole unseeded file, which needs no audio before its last segment's."""
        return self.streamed or self.seeded


@dataclass(frozen=True)
class StageItem(Generic[P]):
    """One unit of work for a stage: a request's whole text, a segment, or a part of one.

    Attributes:
        request: the request's facts.
        segment: 0-based segment index; `WHOLE_REQUEST` (-1) before the front end.
        payload: what this stage consumes (a document, phoneme ids, tokens, mel frames ...).
        speed: this segment's speaking-rate factor: the request's `speed` times its run's SSML
            ``<prosody rate>``.
        part: 0-based part index inside the segment, for stages downstream of one that emits
            a segment in several parts (an autoregressive stage's token hops); 0 otherwise.
        final: True on the segment's last part (always True for a segment in one part).
        words: the segment's word timings (`voxflow.stages.outputs.WordTiming`, in order)
            when an earlier stage made them; carried by the segment's first part only.
    """

    request: RequestInfo
    segment: int
    payload: P
    speed: float = 1.0
    part: int = 0
    final: bool = True
    words: tuple[Any, ...] | None = None

    @property
    def is_first(self) -> bool:
        """True for a request's first segment (or its not yet segmented text)."""
        return self.segment <= 0 and self.part == 0

    def derive(self, payload: Any, *, segment: int | None = None, speed: float | None = None,
               part: int = 0, final: bool = True,
               words: tuple[Any, ...] | None = None) -> StageItem:
        """A copy carrying the next stage's payload (same request), at `segment`/`part`,
        with `words` (none unless given)."""
        return replace(
            self,
            payload=payload,
            segment=self.segment if segment is None else segment,
            speed=self.speed if speed is None else speed,
            part=part,
            final=final,
            words=words,
        )


@dataclass(frozen=True)
class StageBatch(Generic[P]):
    """A batch of items for one `Stage.run` (or one autoregressive step).

    Attributes:
        items: the items, in the scheduler's priority order (earliest playback deadline first).
        key: the `Stage.batch_key` every item shares (e.g. Piper's (voice, native speed)): a
            stage may read shared settings from the first item.
        isolated: True when the batch is one seeded request's item run alone
            (`engine.isolate_seeded`): batch composition cannot change its rounding.
        step: for an autoregressive stage, which step this is for each item: 0 for an item's
            first step (prefill), else its decode step number; empty for other stages.
        bucket: for a bucketed stage, the padded size along its bucketed axis (e.g. frames)
            and the padded row count; None for other stages.
        slack_s: per item, seconds from the batch's formation until its listener would wait
            for it (`voxflow.engine.request.RequestState.slack`): for a first segment, its
            request's arrival plus the TTFA target; for a continuation, when the audio sent so
            far has played out. Negative: already late. A stage may spend
            extra compute to meet a deadline it would otherwise miss (Piper streams a
            segment's first window ahead of the rest). Empty when the batch was built outside
            the engine's scheduler.
        formed_at: `time.perf_counter()` when `slack_s` was taken; `slack` subtracts the
            seconds since, so a stage deciding after its batch waited (memory gate) or ran a
            while (Piper's encoder) sees the slack left then. None: `slack_s` as given.
        waiting: other requests with items in this stage's queue when the batch was formed
            (held or not): streams that will want the cores while this batch runs (Kokoro
            sizes its deadline cuts by it). 0 when built outside the engine's scheduler.
        bulk: True when a bulk worker runs the batch (scheduler rule 7: a thread at a lowered
            priority, so its pace is not the fast lane's; Piper keeps it out of its pace
            estimate). False on the fast lane, on a stage without lanes, and outside the
            engine's scheduler.
    """

    items: tuple[StageItem[P], ...]
    key: Hashable = None
    isolated: bool = False
    step: tuple[int, ...] = field(default_factory=tuple)
    bucket: tuple[int, int] | None = None
    slack_s: tuple[float, ...] = field(default_factory=tuple)
    formed_at: float | None = None
    waiting: int = 0
    bulk: bool = False

    def slack(self, index: int) -> float:
        """Seconds left now until item `index`'s listener would wait: `slack_s[index]` less
        the time since `formed_at` (when set); +inf (no deadline known) when the scheduler
        gave none."""
        if index >= len(self.slack_s):
            return float("inf")
        if self.formed_at is None:
            return self.slack_s[index]
        return self.slack_s[index] - (time.perf_counter() - self.formed_at)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[StageItem[P]]:
        return iter(self.items)

    def __getitem__(self, index: int) -> StageItem[P]:
        return self.items[index]

    @classmethod
    def of(cls, items: Sequence[StageItem[P]], **kwargs: Any) -> StageBatch[P]:
        """A batch of `items` (any sequence) with the given shared fields."""
        return cls(tuple(items), **kwargs)
