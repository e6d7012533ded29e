"""Fake stages and a fake model family for engine and scheduler tests (no model, no ONNX).

They are real implementations of the `Stage` and `ModelFamily` contracts, so the engine, the
queues and the workers run exactly as with a real family.

`FakeFamily` (family name "fake" once registered, see `register_fake_family`):
- frontend: splits each run's text at "|" into segments (blank pieces dropped); no segments ->
  `InvalidRequestError(param="input")`.
- acoustic: one waveform per segment, ``SAMPLES_PER_CHAR * len(segment)`` float32 samples drawn
  from ``default_rng([seed, segment_index])``, first sample = ``segment_index / 100`` (so a test
  can tell which segment a chunk carries). It sleeps `delays[segment]` (else `item_sleep_s`) per
  batch, raises `RuntimeError` on a segment containing `fail_on`, and records each finished
  (request id, segment index) in `FakeFamily.completed`, in completion order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from voxflow.engine.request import Deadlines, RequestState, SpeechRequest
from voxflow.engine.scheduler import Job
from voxflow.errors import InvalidRequestError
from voxflow.models.base import ModelFamily, TextFrontendStage, Voice
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, Next, Parts, Segments
from voxflow.stages.stage import Stage
from voxflow.text.document import TextRun

FAKE_FAMILY_ENTRY = ("fakes:FakeFamily", "fakes:FakeSettings")
SAMPLES_PER_CHAR = 10


def register_fake_family(monkeypatch) -> None:
    """Make family "fake" known to `voxflow.models.registry` for one test."""
    from voxflow.models import registry

    monkeypatch.setitem(registry._FAMILIES, "fake", FAKE_FAMILY_ENTRY)


class FakeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    voices: tuple[str, ...] = ("alice", "bob")
    sample_rate: int = Field(8000, ge=1)
    acoustic_workers: int = Field(1, ge=1)
    max_batch_size: int = Field(1, ge=1)
    max_batch_cost: int | None = None
    delays: dict[int, float] = {}
    item_sleep_s: float = 0.0
    fail_on: str | None = None
    fail_load: bool = False
    # a third stage, "vocoder", with no workers of its own: the acoustic stage passes it its
    # payloads and, with `serve_vocoder`, lends it its workers (scheduler rule 8)
    vocoder: bool = False
    serve_vocoder: bool = True


def fake_audio(seed: int, segment_index: int, text: str) -> np.ndarray:
    rng = np.random.default_rng([seed, segment_index])
    audio = rng.uniform(-0.5, 0.5, SAMPLES_PER_CHAR * len(text)).astype(np.float32)
    audio[0] = segment_index / 100
    return audio


REFUSED = "#refuse"
"""Text the fake front end refuses (a 400 from the front end, as a real one's G2P error)."""


class FakeFrontend(TextFrontendStage):
    """Segments are the "|"-separated parts of each run's text; a run holding `REFUSED` is a
    400 (code ``refused_by_frontend``)."""

    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list:
        if REFUSED in run.text:
            raise InvalidRequestError("the fake front end refuses this text.", param="input",
                                      code="refused_by_frontend")
        return [p.strip() for p in run.text.split("|") if p.strip()]


class FakeAcoustic(Stage):
    name = "acoustic"

    def __init__(self, family: FakeFamily):
        s = family.settings
        super().__init__(s.max_batch_size, s.max_batch_cost, s.acoustic_workers)
        self.serves_next = s.vocoder and s.serve_vocoder
        self._family = family

    def batch_key(self, item: StageItem) -> Hashable:
        return (item.request.voice, item.request.speed)

    def cost(self, item: StageItem) -> int:
        return len(item.payload)

    def run(self, batch: StageBatch) -> list:
        s = self._family.settings
        time.sleep(max(s.delays.get(item.segment, s.item_sleep_s) for item in batch))
        out = []
        for item in batch:
            if s.fail_on is not None and s.fail_on in item.payload:
                raise RuntimeError(f"cannot say {item.payload!r}")
            if s.vocoder:
                out.append(Next(item.payload))
                continue
            out.append(Audio(fake_audio(item.request.seed, item.segment, item.payload)))
        with self._family.lock:
            self._family.completed.extend((i.request.request_id, i.segment) for i in batch)
            self._family.batches.append(len(batch))
        return out


class FakeFamily(ModelFamily):
    family = "fake"
    warmup_text = "warm|up"
    settings: FakeSettings

    def __init__(self, name: str, settings: FakeSettings):
        super().__init__(name, settings)
        if settings.fail_load:
            raise RuntimeError("bad weights")
        self.set_voices(
            {v: Voice(v, "en-US", settings.sample_rate, "fake") for v in settings.voices},
            settings.voices[0],
        )
        self.lock = threading.Lock()
        self.completed: list[tuple[str, int]] = []
        self.batches: list[int] = []
        self.vocoder_threads: set[str] = set()

    def stages(self) -> list[Stage]:
        if self.settings.vocoder:
            return [FakeFrontend(), FakeAcoustic(self), FakeVocoder(self)]
        return [FakeFrontend(), FakeAcoustic(self)]


class FakeVocoder(Stage):
    """A payload -> its `fake_audio`; no workers of its own (the acoustic stage's run it, rule
    8); records the threads that ran it."""

    name = "vocoder"

    def __init__(self, family: FakeFamily):
        super().__init__(workers=0)
        self._family = family

    def run(self, batch: StageBatch) -> list:
        with self._family.lock:
            self._family.vocoder_threads.add(threading.current_thread().name)
        return [Audio(fake_audio(item.request.seed, item.segment, item.payload))
                for item in batch]


# ---- for scheduler and worker tests, without an engine -------------------------------------


class Recorder:
    """A `RequestState` sink that keeps every chunk and error it is handed."""

    def __init__(self) -> None:
        self.chunks: list = []
        self.errors: list[BaseException] = []

    def __call__(self, chunk, error) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.chunks.append(chunk)


def make_state(
    voice: str = "alice", seed: int | None = None, speed: float = 1.0, text: str = "x",
    streamed: bool = True, deadlines: Deadlines | None = None,
) -> tuple[RequestState, Recorder]:
    """A fresh request state (arrival order = creation order) and its recording sink;
    `streamed` False: a whole-file response; `deadlines` None: the defaults."""
    request = SpeechRequest("fake", text, voice, speed=speed, seed=seed, streamed=streamed)
    sink = Recorder()
    return RequestState(request, seed if seed is not None else 0, 8000, sink, deadlines), sink


def job(state: RequestState, segment: int, payload, part: int = 0, final: bool = True) -> Job:
    """The engine's job for `state`'s item at `segment` (and `part`) carrying `payload`."""
    item = StageItem(state.info, segment, payload, speed=state.request.speed, part=part,
                     final=final)
    return Job(state, item)


def stage_item(state: RequestState, segment: int, payload) -> StageItem:
    """The item a stage sees for `state` at `segment` carrying `payload`."""
    return job(state, segment, payload).item


def run_stage(stage: Stage, items: list[StageItem]) -> list:
    """`stage.run` of `items` as one batch, each output unwrapped: `Segments` -> its payload
    list, `Parts` -> its payload list, `Audio` -> its samples, `Next` -> its payload, an
    exception as it is."""
    unwrapped = []
    for out in stage.run(StageBatch.of(items, key=stage.batch_key(items[0]))):
        if isinstance(out, (Segments, Parts)):
            out = out.payloads
        elif isinstance(out, Audio):
            out = out.samples
        elif isinstance(out, Next):
            out = out.payload
        unwrapped.append(out)
    return unwrapped


class KeyedStage(Stage):
    """Batches by voice; cost = len(payload); output = the payloads it ran, as audio lengths."""

    name = "keyed"

    def batch_key(self, item: StageItem) -> Hashable:
        return item.request.voice

    def cost(self, item: StageItem) -> int:
        return len(item.payload)

    def run(self, batch: StageBatch) -> list:
        return [Audio(np.full(len(item.payload), 0.1, np.float32)) for item in batch]


class PickyStage(Stage):
    """Raises on the whole batch if any payload is "bad"; a payload that is an exception instance
    is returned as that item's output (a per-item failure without raising)."""

    name = "picky"

    def __init__(self, raise_error: BaseException | None = None, **kwargs):
        super().__init__(**kwargs)
        self.calls: list[list] = []
        self.raise_error = raise_error or ValueError("bad input")

    def run(self, batch: StageBatch) -> list:
        self.calls.append([item.payload for item in batch])
        if any(item.payload == "bad" for item in batch):
            raise self.raise_error
        return [
            item.payload
            if isinstance(item.payload, Exception)
            else Audio(np.full(len(item.payload), 0.25, np.float32))
            for item in batch
        ]
