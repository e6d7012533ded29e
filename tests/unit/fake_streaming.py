"""A fake three-stage streaming family: front end -> autoregressive decoder -> bucketed vocoder.

Family "fake3" (see `register_streaming_family`), the shape of CosyVoice3 and MagpieTTS without
their models, so the engine's contract for them runs on CPU in tests:

- frontend: each run's text split at "|" (the fake family's front end);
- decoder (`AutoregressiveStage`): one token per step, the code point of the segment's next
  character; every `hop` tokens (and at the end) it emits the tokens since the last emit as a
  part; a segment holding "!" fails in `begin`; it stops after the last character, so a
  segment of n characters takes n steps and emits ceil(n / hop) parts. Each step sleeps
  `step_sleep_s` and is logged in `StreamingFamily.events` as ("step", request id, segment,
  step number, batch size);
- vocoder (`BucketedStage`, ``in_order``): a part of k tokens becomes ``k * SAMPLES_PER_TOKEN``
  samples, token t giving ``t / 1000`` plus the part's index within its request (its state:
  parts seen so far) / 10; padded to buckets (2, 4, 8) tokens and rows (1, 2, 4); padding is
  zeros that the per-row, per-position arithmetic never mixes into real rows. Logged as
  ("vocode", request id, segment, part).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np
from fakes import FakeFrontend
from pydantic import BaseModel, ConfigDict, Field

from voxflow.models.base import ModelFamily, Voice
from voxflow.stages.autoregressive import AutoregressiveStage, Step
from voxflow.stages.bucketed import BucketedStage
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio
from voxflow.stages.stage import Stage
from voxflow.stages.state import HoldsRequestStates, RequestStates

ENTRY = ("fake_streaming:StreamingFamily", "fake_streaming:StreamingSettings")
SAMPLES_PER_TOKEN = 4
RATE = 8000


def register_streaming_family(monkeypatch) -> None:
    """Make family "fake3" known to `voxflow.models.registry` for one test."""
    from voxflow.models import registry

    monkeypatch.setitem(registry._FAMILIES, "fake3", ENTRY)


class StreamingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hop: int = Field(3, ge=1)
    max_running: int = Field(4, ge=1)
    step_sleep_s: float = 0.0
    capture_graphs: bool = True


def expected_audio(text: str, hop: int, first_part: int = 0) -> list[np.ndarray]:
    """The vocoder's parts for one segment `text` whose first part is the request's
    `first_part`-th (what the family must produce, computed without it)."""
    tokens = [ord(c) for c in text]
    parts = [tokens[i : i + hop] for i in range(0, len(tokens), hop)]
    return [
        np.repeat(np.asarray(p, np.float32) / 1000 + (first_part + k) / 10, SAMPLES_PER_TOKEN)
        for k, p in enumerate(parts)
    ]


@dataclass
class _Decode:
    text: str
    position: int = 0
    pending: list[int] = field(default_factory=list)


class FakeDecoder(AutoregressiveStage[_Decode]):
    name = "decoder"

    def __init__(self, family: StreamingFamily):
        super().__init__(max_batch_size=family.settings.max_running)
        self._family = family

    def begin(self, item: StageItem) -> _Decode:
        if "!" in item.payload:
            raise ValueError(f"cannot decode {item.payload!r}")
        return _Decode(item.payload)

    def step(self, batch: StageBatch, states) -> list[Step]:
        family = self._family
        time.sleep(family.settings.step_sleep_s)
        out = []
        for item, number, state in zip(batch, batch.step, states, strict=True):
            family.log(("step", item.request.request_id, item.segment, number, len(batch)))
            state.pending.append(ord(state.text[state.position]))
            state.position += 1
            done = state.position == len(state.text)
            if done or len(state.pending) == family.settings.hop:
                out.append(Step(emit=np.asarray(state.pending, np.int64), done=done))
                state.pending = []
            else:
                out.append(Step())
        return out


class FakeVocoder(HoldsRequestStates, BucketedStage):
    name = "vocoder"
    in_order = True

    def __init__(self, family: StreamingFamily):
        super().__init__((2, 4, 8), (1, 2, 4), capture_graphs=family.settings.capture_graphs)
        self._family = family
        self.states: RequestStates[list[int]] = RequestStates(lambda rid: [0])

    def size(self, item: StageItem) -> int:
        return int(item.payload.size)

    def pack(self, batch: StageBatch, rows: int, bucket: int) -> dict:
        tokens = np.zeros((rows, bucket), np.float32)
        offsets = np.zeros((rows, 1), np.float32)
        for i, item in enumerate(batch):
            tokens[i, : item.payload.size] = item.payload
            parts_seen = self.states.get_or_create(item.request.request_id)
            offsets[i, 0] = parts_seen[0] / 10
        return {"tokens": tokens, "offsets": offsets}

    def forward(self, inputs: dict) -> np.ndarray:
        return np.repeat(inputs["tokens"] / 1000 + inputs["offsets"], SAMPLES_PER_TOKEN, axis=1)

    def unpack(self, outputs: np.ndarray, batch: StageBatch) -> list:
        out = []
        for i, item in enumerate(batch):
            self.states.get_or_create(item.request.request_id)[0] += 1
            self._family.log(("vocode", item.request.request_id, item.segment, item.part))
            out.append(Audio(outputs[i, : item.payload.size * SAMPLES_PER_TOKEN].copy()))
        return out


class StreamingFamily(ModelFamily):
    family = "fake3"
    warmup_text = "hi"
    settings: StreamingSettings

    def __init__(self, name: str, settings: StreamingSettings):
        super().__init__(name, settings)
        self.set_voices({"alice": Voice("alice", "en-US", RATE, "fake3")}, "alice")
        self.events: list[tuple] = []
        self._lock = threading.Lock()
        self.decoder = FakeDecoder(self)
        self.vocoder = FakeVocoder(self)

    def log(self, event: tuple) -> None:
        with self._lock:
            self.events.append(event)

    def stages(self) -> list[Stage]:
        return [FakeFrontend(), self.decoder, self.vocoder]
