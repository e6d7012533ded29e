"""A fake family that feeds the real NanoCodec stage (spec §8.2 "Phase A"): front end -> a
stand-in acoustic stage emitting deterministic codes -> `NanoCodecStage` on the tiny fixture
decoder, so the codec stage runs inside the engine on CPU in tests.

Family "fakecodec" (see `register_codec_family`):
- frontend: each run's text split at "|" (`FakeFrontend`);
- acoustic (`AutoregressiveStage`): one codec frame per step, ``len(segment)`` frames, the
  codes `segment_codes` (ids 0..2015 from ``default_rng([seed, segment])``); it emits the frames
  since its last emit every `hop` steps and at the end, sleeping `step_sleep_s` per step;
- codec: `NanoCodecStage` with `chunk_frames` and `max_streams` slots (96 samples per frame).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from fakes import FakeFrontend
from nanocodec_fixtures import tensors
from pydantic import BaseModel, ConfigDict, Field

from voxflow.models.base import ModelFamily, Voice
from voxflow.models.nanocodec.config import SAMPLE_RATE, DecoderConfig
from voxflow.models.nanocodec.loader import load_decoder
from voxflow.models.nanocodec.stage import NanoCodecStage
from voxflow.models.nanocodec.stream import StatePool
from voxflow.stages.autoregressive import AutoregressiveStage, Step
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.stage import Stage

ENTRY = ("fake_codec:CodecFamily", "fake_codec:CodecSettings")


def register_codec_family(monkeypatch) -> None:
    """Make family "fakecodec" known to `voxflow.models.registry` for one test."""
    from voxflow.models import registry

    monkeypatch.setitem(registry._FAMILIES, "fakecodec", ENTRY)


class CodecSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hop: int = Field(3, ge=1)
    chunk_frames: int = Field(4, ge=1)
    max_streams: int = Field(4, ge=1)
    step_sleep_s: float = 0.0


def segment_codes(seed: int, segment: int, frames: int) -> np.ndarray:
    """The stand-in's codes for one segment: (8, frames) int64 ids in 0..2015."""
    return np.random.default_rng([seed, segment]).integers(0, 2016, (8, frames))


@dataclass
class _Codes:
    codes: np.ndarray
    position: int = 0
    emitted: int = 0
    pending: list[int] = field(default_factory=list)


class StandInAcoustic(AutoregressiveStage[_Codes]):
    name = "acoustic"

    def __init__(self, family: CodecFamily):
        super().__init__(max_batch_size=4)
        self._family = family

    def begin(self, item: StageItem) -> _Codes:
        return _Codes(segment_codes(item.request.seed, item.segment, len(item.payload)))

    def step(self, batch: StageBatch, states) -> list[Step]:
        s = self._family.settings
        time.sleep(s.step_sleep_s)
        out = []
        for state in states:
            state.position += 1
            done = state.position == state.codes.shape[1]
            if done or state.position - state.emitted == s.hop:
                out.append(Step(emit=state.codes[:, state.emitted : state.position], done=done))
                state.emitted = state.position
            else:
                out.append(Step())
        return out


class CodecFamily(ModelFamily):
    family = "fakecodec"
    warmup_text = "hi"
    settings: CodecSettings

    def __init__(self, name: str, settings: CodecSettings):
        super().__init__(name, settings)
        self.set_voices({"random-0": Voice("random-0", "en-US", SAMPLE_RATE, "fakecodec")},
                        "random-0")
        state = tensors("tiny_decoder_state_dict.safetensors")
        self.decoder = load_decoder(state, DecoderConfig.tiny())
        self.acoustic = StandInAcoustic(self)
        self.codec = NanoCodecStage(StatePool(self.decoder, settings.max_streams),
                                    chunk_frames=settings.chunk_frames, max_batch_size=4)

    def stages(self) -> list[Stage]:
        return [FakeFrontend(), self.acoustic, self.codec]
