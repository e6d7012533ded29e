"""The `magpie` family: MagpieTTS text -> codec frames -> NanoCodec audio, streamed (spec §8).

Stages (`stages.py`): `frontend` (text -> stand-in text ids per sentence), `acoustic`
(autoregressive MagpieTTS generation, frames handed on in parts of `codec_chunk_frames`) and
`codec` (`NanoCodecStage`: exact streaming decode, one state slot per segment, 22,050 Hz; a
segment at a speed other than 1 is decoded whole and time-stretched).

Only random weights exist (spec §0), so everything served is noise and says so (spec §8.3),
as the CosyVoice3 family does: a WARNING at load and per request, voice ids `random-N` (the
baked speakers by index), `random_weights_note` in `/v1/models` and `/health` (``weights``),
the ``X-Voxflow-Weights: random`` response header and the comment of a WAV from ``voxflow
speak``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from voxflow.models.base import ModelFamily, Voice
from voxflow.models.magpie.settings import MagpieSettings
from voxflow.models.magpie.stages import (
    MagpieAcousticStage,
    MagpieCodecStage,
    MagpieFrontendStage,
)
from voxflow.models.magpie.weights import StandInTokenizer, load_acoustic, load_codec
from voxflow.models.nanocodec.config import SAMPLE_RATE
from voxflow.models.nanocodec.stream import StatePool
from voxflow.stages.stage import Stage

log = logging.getLogger(__name__)

VOICE_PREFIX = "random-"
LANGUAGE = "en"  # the stand-in tokenizer reads any text; segmentation follows English rules


class MagpieFamily(ModelFamily):
    """MagpieTTS + NanoCodec with the weights of its settings (see the module docstring).

    Raises (at construction):
        ValueError: a model config check, or `default_voice` not among the voices.
        FileNotFoundError, StateDictError: the codec fixture is missing or does not match.
    """

    family = "magpie"
    warmup_text = "Hello."
    settings: MagpieSettings

    def __init__(self, name: str, settings: MagpieSettings):
        super().__init__(name, settings)
        self.acoustic = load_acoustic(settings)
        self.decoder = load_codec(settings)
        config = self.acoustic.config
        self.tokenizer = StandInTokenizer(config.text_vocab_size)
        self._speakers = {f"{VOICE_PREFIX}{i}": i for i in range(config.baked_speakers)}
        voices = {vid: Voice(vid, LANGUAGE, SAMPLE_RATE, self.family) for vid in self._speakers}
        self.set_voices(voices, settings.default_voice or f"{VOICE_PREFIX}0")
        self.codec = MagpieCodecStage(
            StatePool(self.decoder, settings.codec_max_streams),
            chunk_frames=settings.codec_chunk_frames,
            capture_chunk_frames=settings.codec_capture_chunk_frames,
            max_batch_size=settings.codec_max_batch_size,
            batch_invariant=settings.codec_batch_invariant)
        self.acoustic_stage = MagpieAcousticStage(self)
        self.frontend = MagpieFrontendStage(self)
        log.warning("model %s: weights are %s (voices %s)", name, self.random_weights_note(),
                    ", ".join(voices))

    def speaker_index(self, voice_id: str) -> int:
        """The baked speaker row of a served voice (``random-N`` -> N). Raises KeyError."""
        return self._speakers[voice_id]

    def random_weights_note(self) -> str:
        s = self.settings
        codec = s.codec_weights.name if isinstance(s.codec_weights, Path) else s.codec_weights
        return f"random ({s.acoustic} acoustic, {codec} codec): output is noise, not speech"

    def stages(self) -> list[Stage]:
        return [self.frontend, self.acoustic_stage, self.codec]

    def details(self) -> dict:
        s, config = self.settings, self.acoustic.config
        return {
            "weights": self.random_weights_note(),
            "device": s.device,
            "frame_stacking": config.frame_stacking,
            "samples_per_frame": self.decoder.config.samples_per_frame,
            "codec_chunk_frames": s.codec_chunk_frames,
            "codec_max_streams": s.codec_max_streams,
            "decoding": "greedy" if s.greedy else f"top-k {s.top_k}, temperature {s.temperature}",
            "tokenizer": "stand-in (one id per character)",
        }
