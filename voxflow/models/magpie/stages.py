"""The `magpie` family's stages (spec §8.2 on the engine contract of `voxflow.stages`).

    frontend (TextFrontendStage)   text -> sentences -> `TextSegment`s of stand-in text ids
    acoustic (AutoregressiveStage) per segment a MagpieTTS `DecodeSession` (text memory, cross
                                   and self K/V, code history, prior state, its generator);
                                   one decoder step (S codec frames) per engine step; hands
                                   the kept frames on in parts of `codec_chunk_frames`
    codec (MagpieCodecStage)       `NanoCodecStage`: streams each part's chunks through its
                                   causal state slot; a segment at a speed other than 1
                                   arrives whole and is time-stretched (pitch kept)

So audio leaves while the segment is still being generated: the codec decodes a chunk as soon
as the acoustic stage has produced `codec_chunk_frames` frames. The codec's chunking depends
only on the codes (`voxflow.models.nanocodec.stage`), and the codes only on text, voice, seed
and settings: the HTTP `stream` flag changes nothing. MagpieTTS has no duration control, so a
segment whose speed is not 1 is handed on as one final part and its audio is stretched by
`voxflow.audio.stretch.time_stretch` (offline Rubber Band, the same bytes for the same input).

Randomness (spec §8.3): with `greedy` every choice is an argmax; otherwise a segment samples
from its own `torch.Generator` seeded from (request seed, segment index), never shared across
segments or batch slots. Each segment steps alone (no batched decoder step yet), so its bytes
never depend on its neighbours.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from voxflow.models.base import TextFrontendStage
from voxflow.models.magpie.generate import DecodeOptions, DecodeSession
from voxflow.models.magpie.sampling import end_frame
from voxflow.models.nanocodec.config import SAMPLE_RATE
from voxflow.models.nanocodec.stage import NanoCodecStage
from voxflow.stages.autoregressive import AutoregressiveStage, Step
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, StageOutput
from voxflow.text.document import SpeechDocument, TextRun
from voxflow.text.segment import segment_text

if TYPE_CHECKING:
    from voxflow.models.magpie.family import MagpieFamily



def segment_seed(seed: int, segment: int) -> int:
    """The sampling generator's seed for one segment of a request seeded `seed`
    (0 <= result < 2**63; the derivation CosyVoice3's LM uses, kept here so serving magpie
    imports no other family)."""
    state = np.random.SeedSequence([seed, segment]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


@dataclass(frozen=True)
class TextSegment:
    """One decode: the segment's text and its stand-in text ids, int64 [n + 1] ending with the
    text EOS (`weights.StandInTokenizer`)."""

    text: str
    ids: np.ndarray


class MagpieFrontendStage(TextFrontendStage):
    """Text -> `TextSegment`s: sentences (`text/segment.py`, at most `max_segment_chars`, the
    first at most `first_segment_chars`), each turned into ids by the stand-in tokenizer. Logs
    a WARNING per request: the weights are random (spec §8.3)."""

    def __init__(self, family: MagpieFamily):
        super().__init__()
        self._family = family

    def run(self, batch: StageBatch) -> list:
        self._family.warn_random_weights(batch)
        return super().run(batch)

    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list[TextSegment]:
        s = self._family.settings
        document: SpeechDocument = item.payload
        language = document.language or item.request.language or "en"
        cap = s.first_segment_chars if first else None
        return [TextSegment(piece, self._family.tokenizer.encode(piece))
                for piece in segment_text(run.text, s.max_segment_chars, cap,
                                          lang=language.split("-")[0])
                if piece.strip()]


@dataclass
class AcousticSegment:
    """One segment's decode state.

    Attributes:
        session: the MagpieTTS decode of this one text (batch 1; CFG rows inside).
        frames: codec frames kept so far (before any EOS frame).
        pending: kept frames not handed on yet, each (8, k) int64 ids 0..2015 on the host.
        whole: hand every frame on with the last step (a speed other than 1: the codec stage
            stretches the whole segment).
    """

    session: DecodeSession
    whole: bool = False
    frames: int = 0
    pending: list[np.ndarray] = field(default_factory=list)

    def take(self) -> np.ndarray:
        """The pending frames as one (8, n) int64 array (n ≥ 0), now handed on."""
        if not self.pending:
            channels = self.session.model.config.num_codebooks
            return np.zeros((channels, 0), np.int64)
        out = np.concatenate(self.pending, axis=1)
        self.pending = []
        return out

    def pending_frames(self) -> int:
        return sum(p.shape[1] for p in self.pending)


def _tensor_bytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, Tensor) else 0


class MagpieAcousticStage(AutoregressiveStage[AcousticSegment]):
    """MagpieTTS generation, one decoder step per engine step (see the module docstring).

    Payload in: `TextSegment`. Parts out: (8, k) int64 codec ids 0..2015 (k ≥ 0), handed on
    whenever at least `codec_chunk_frames` frames are pending, the rest with the segment's
    last step (EOS, or `max_frames` reached: counted in `events`, on ``/metrics`` and
    ``/health``). Errors fail the
    segment's request alone: `ValueError` for ids or a speaker out of range, or positions past
    the decoder's.
    """

    name = "acoustic"

    def __init__(self, family: MagpieFamily):
        super().__init__(max_batch_size=family.settings.acoustic_max_batch_size)
        self._family = family
        self._lock = threading.Lock()
        self.truncations = 0
        self.segments = 0

    def begin(self, item: StageItem) -> AcousticSegment:
        family, s = self._family, self._family.settings
        model = family.acoustic
        text: TextSegment = item.payload
        device = model.device
        ids = torch.from_numpy(text.ids).to(device)[None]
        speaker = torch.tensor([family.speaker_index(item.request.voice)], device=device)
        opts = DecodeOptions(greedy=s.greedy, kv_cache=s.kv_cache,
                             seed=segment_seed(item.request.seed, item.segment))
        with torch.inference_mode():
            session = DecodeSession(model, ids, torch.tensor([ids.shape[1]], device=device),
                                    speaker, opts)
        return AcousticSegment(session, whole=item.speed != 1.0)

    def step(self, batch: StageBatch,
             states: Sequence[AcousticSegment]) -> list[Step | BaseException]:
        out: list[Step | BaseException] = []
        for i, state in enumerate(states):
            try:
                out.append(self._advance(state, batch.step[i]))
            except Exception as exc:  # noqa: BLE001 (that segment's request fails alone)
                out.append(exc)
        return out

    @torch.inference_mode()
    def _advance(self, state: AcousticSegment, step: int) -> Step:
        """Run decoder step ``step`` of one segment and decide what it hands on."""
        session = state.session
        cfg, params = session.model.config, session.params
        record = session.step(step)
        codes = record.lt_codes[0]  # (C, S)
        end = end_frame(codes, record.argmax_codes[0], cfg.audio_eos, params.eos_detection_method)
        kept = codes if end is None else codes[:, :end]
        if kept.shape[1]:
            state.pending.append(kept.to(device="cpu", dtype=torch.int64).numpy())
            state.frames += kept.shape[1]
        if end is not None or step + 1 >= params.max_decoder_steps // cfg.frame_stacking:
            with self._lock:
                self.segments += 1
                if end is None:
                    self.truncations += 1
            return Step(emit=state.take(), done=True)
        if not state.whole and \
                state.pending_frames() >= self._family.settings.codec_chunk_frames:
            return Step(emit=state.take())
        return Step()

    def nbytes(self, state: AcousticSegment) -> int:
        """The segment's decoder KV caches (self and cross K/V), text memory and code history."""
        session = state.session
        total = _tensor_bytes(session.memory) + _tensor_bytes(session.history)
        total += sum(p.nbytes for p in list(state.pending))
        cache = session.cache
        if cache is not None:
            for layer in list(cache.layers):
                total += sum(_tensor_bytes(t) for t in (layer.self_k, layer.self_v,
                                                        layer.cross_k, layer.cross_v))
        return total

    def events(self) -> dict[str, int]:
        """Segments finished, and those cut at ``max_frames`` without EOS (spec §9)."""
        with self._lock:
            return {"segments": self.segments, "truncated_at_max_frames": self.truncations}

    def health(self) -> dict[str, Any]:
        return dict(self.events())


class MagpieCodecStage(NanoCodecStage):
    """`NanoCodecStage` plus speed: the final part of a segment whose speed is not 1 (which
    holds the whole segment, `AcousticSegment.whole`) comes out time-stretched by that speed
    (``round(N / speed)`` samples, pitch kept). Other items are exactly `NanoCodecStage`'s."""

    def run(self, batch: StageBatch) -> list[StageOutput]:
        outputs = super().run(batch)
        for i, (item, out) in enumerate(zip(batch, outputs, strict=True)):
            if item.speed != 1.0 and item.final and isinstance(out, Audio) and out.samples.size:
                try:
                    # pedalboard: only for speeds other than 1 (absent on a bare GPU machine)
                    from voxflow.audio.stretch import time_stretch

                    outputs[i] = Audio(time_stretch(out.samples, SAMPLE_RATE, item.speed))
                except Exception as exc:  # noqa: BLE001 (that item's request fails alone)
                    outputs[i] = exc
        return outputs
