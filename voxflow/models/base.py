"""The contract a model family implements: its voices, limits and ordered stages.

A family is a small graph of stages (text front end -> acoustic model -> vocoder or codec). The
engine owns the queues and worker threads; a stage is a plain object that turns a batch of work
items into one output per item, testable without a server.

Data flow through a family's stages (the contract itself is `voxflow.stages`):
- stage 0 (`fans_out = True`) receives one item per request whose payload is the request's
  parsed document and returns, per item, its `Segments` (none when nothing is speakable: the
  request is then only silence);
- each following stage receives one item per segment (or segment part) and returns `Next`;
- the last stage returns each item's `Audio`, (N,) float32 in [-1, 1] at the voice's rate.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel

from voxflow.errors import InvalidRequestError, echo
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Segments
from voxflow.stages.stage import Stage
from voxflow.text.document import SpeechDocument, TextRun
from voxflow.text.language import choose_language


@dataclass(frozen=True)
class Voice:
    """A voice a family can speak with.

    Attributes:
        id: the name clients pass as `voice`.
        language: BCP-47-ish tag, e.g. "en-US".
        sample_rate: Hz of the audio this voice produces.
        family: the model family name, e.g. "piper".
    """

    id: str
    language: str
    sample_rate: int
    family: str

log = logging.getLogger(__name__)

UNSPEAKABLE_SILENCE_S = 0.2
"""Seconds of silence answered for an input with nothing speakable and no breaks."""


class TextFrontendStage(Stage):
    """Stage 0 of a family: one request's parsed input -> its segment payloads (fans out).

    The item's payload is the request's `SpeechDocument` (`voxflow.text.document`), parsed at
    validation. Each run is segmented by the family (`run_segments`); a run boundary is a
    segment boundary. The returned `Segments` carry each segment's speaking-rate factor
    (request speed x the run's rate) and the silence after it (a run's break goes after its
    last segment, or before the first audio when nothing was spoken yet).

    Runs one item at a time on one worker: the G2P libraries behind it (espeak-ng, OpenJTalk)
    keep global state. A document with nothing speakable (only punctuation, symbols, emoji,
    markup or breaks) yields no segment: the request is `UNSPEAKABLE_SILENCE_S` of silence (or
    its breaks' length), as OpenAI answers ``"."`` with audio (Home Assistant checks its API
    key that way; apps that split text at punctuation send lone dashes and ellipses).
    """

    name = "frontend"
    fans_out = True

    def __init__(self) -> None:
        super().__init__(max_batch_size=1, workers=1)

    @abstractmethod
    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list[Any]:
        """The segment payloads of one run of `item`'s document, in reading order.

        Args:
            item: the request's item (`item.request`: voice, language).
            run: the run; `run.phonemes` (IPA) replaces `run.text` for families that take
                phonemes, others speak `run.text`.
            first: True while no earlier run produced a segment, in a streamed (or seeded)
                request: the family may cap this run's first segment shorter, for time to
                first audio.
        """

    def _plan(self, item: StageItem) -> Segments:
        document: SpeechDocument = item.payload
        request_speed = item.request.speed
        segments: list[Any] = []
        speeds: dict[int, float] = {}
        pauses: dict[int, float] = {}
        lead = document.lead_silence_s
        # a whole unseeded response has no first audio to hurry: no shorter first segment
        hurry = item.request.hurries
        for run in document.runs:
            if run.text.strip() or run.phonemes:
                payloads = self.run_segments(item, run, first=hurry and not segments)
                for payload in payloads:
                    if run.rate != 1.0:
                        speeds[len(segments)] = request_speed * run.rate
                    segments.append(payload)
            if run.break_after_s > 0:
                if segments:
                    last = len(segments) - 1
                    pauses[last] = pauses.get(last, 0.0) + run.break_after_s
                else:
                    lead += run.break_after_s
        if not segments:  # nothing to say: silence, no segment to synthesize
            return Segments([], lead_silence_s=lead or UNSPEAKABLE_SILENCE_S)
        if item.request.timestamps:
            segments = self.place_words(document, segments)
        return Segments(segments, speeds, pauses, lead)

    def place_words(self, document: SpeechDocument, payloads: list[Any]) -> list[Any]:
        """With word timestamps: the segment payloads with each spoken word's span of the
        input (`document.source`) attached, for the next stages to time. Only families with
        `ModelFamily.word_timestamps` are asked; default: unchanged."""
        return payloads

    def run(self, batch: StageBatch) -> list:
        return [self._plan(item) for item in batch]


def missing_symbols(ipa: str, table: Container[str]) -> str:
    """The code points of `ipa` not in `table`, each once in order, whitespace left out
    (`ModelFamily.phoneme_gaps`)."""
    return "".join(dict.fromkeys(c for c in ipa if not c.isspace() and c not in table))


class ModelFamily(ABC):
    """A loaded model family: voices, limits and stages.

    Lifecycle: constructed with its validated settings (weights loaded, sessions created, its
    voices recorded with `set_voices`), then `stages()` is called once by the engine, then
    `warmup_text` is synthesized once before the engine reports ready.
    """

    family: ClassVar[str]
    warmup_text: ClassVar[str] = "Hello. This is a warm-up."
    # True when its stages can time each word of the input (`SpeechRequest.timestamps`):
    # the front end places words (`TextFrontendStage.place_words`) and the stages attach
    # `voxflow.stages.outputs.WordTiming`s to each segment's output.
    word_timestamps: ClassVar[bool] = False
    # True when the model reads a request's `instructions` (style prompts, gpt-4o-mini-tts
    # style); otherwise they are accepted and ignored, and the response says so.
    follows_instructions: ClassVar[bool] = False
    # True when one request may take its text while it runs (`SpeechRequest.text_feed`: a
    # WebSocket session feeding one running generation, voxflow.stages.text_feed).
    streams_text_in: ClassVar[bool] = False

    def __init__(self, name: str, settings: BaseModel):
        self.name = name
        self.settings = settings
        self._voices: dict[str, Voice] = {}
        self._default_voice = ""

    def set_voices(self, voices: dict[str, Voice], default: str) -> None:
        """Record the loaded voices (by id) and the default one.

        Raises:
            ValueError: `default` is not among `voices` (names both), or there are none.
        """
        if default not in voices:
            raise ValueError(
                f"default_voice '{default}' is not among the loaded voices: "
                f"{', '.join(sorted(voices)) or 'none'}"
            )
        self._voices, self._default_voice = dict(voices), default

    @property
    def voices(self) -> dict[str, Voice]:
        """Voices by id."""
        return self._voices

    @property
    def default_voice(self) -> str:
        """The voice used when a request names none (CLI) and the one `make serve` speaks."""
        return self._default_voice

    @abstractmethod
    def stages(self) -> list[Stage]:
        """The ordered stages; the first fans out into segments, the last yields audio."""

    def check_instructions(self, instructions: str) -> None:
        """Refuse `instructions` (non-empty) this family follows but cannot take: too long,
        characters its prompt cannot hold. Only called when `follows_instructions`; default:
        every string is taken.

        Raises:
            InvalidRequestError: a 400 with ``param: instructions`` saying why.
        """
        return None

    def languages(self, voice_id: str) -> tuple[str, ...]:
        """Language tags `voice_id` can speak, its own first (default: only its own)."""
        return (self.voices[voice_id].language,)

    def times_words_in(self, language: str) -> bool:
        """Whether word timestamps can be given for text read in `language` (a tag of
        `languages`); default: `word_timestamps`, whatever the language."""
        return self.word_timestamps

    def resolve_language(self, voice_id: str, requested: str | None, text: str) -> str:
        """The one language a request is read in, decided at validation.

        Args:
            voice_id: a voice of this family.
            requested: the request's `language` tag, or None.
            text: the input as written (`voxflow.text.scripts.spoken_text` of the document
                parsed with say-as content as written).
        Returns:
            One of `languages(voice_id)`: the one `requested` names (`match_language`), else
            the one whose scripts hold most of the text's letters
            (`voxflow.text.language.choose_language`; the voice's own on a tie or without
            letters, so always its own for a voice of one language).
        Raises:
            InvalidRequestError: param "language", code "unsupported_language": `requested`
                names none of the voice's languages.
        """
        spoken = self.languages(voice_id)
        if requested is None:
            return choose_language(text, spoken)
        language = match_language(requested, spoken)
        if language is None:
            raise InvalidRequestError(
                f"Voice '{voice_id}' of model '{self.name}' does not speak language "
                f"{echo(requested)}; it speaks: {', '.join(spoken)}.",
                param="language",
                code="unsupported_language",
            )
        return language

    def kept_scripts(self, voice_id: str, language: str) -> frozenset[str]:
        """Scripts outside `language`'s own that the front end reads inside it as foreign
        words (ISO 15924 codes); letters of these are not dropped by the script check
        (`voxflow.text.scripts.check_document`). Default: none."""
        return frozenset()

    def phoneme_gaps(self, voice_id: str, ipa: str) -> str | None:
        """The symbols of `ipa` (IPA, as in SSML ``<phoneme ph>`` or a lexicon entry) that
        `voice_id` has no phoneme for, each once in order of first use ("" when it can say
        them all; whitespace is never a gap), or None when the family does not take phonemes
        (it speaks a phoneme run's text). Default: None."""
        return None

    def fixed_audio(self, seeded: bool, streamed: bool) -> bool:
        """Whether a request's audio is a pure function of the request (its text, voice,
        speed, seed and options), so the same request gives the same bytes every time and its
        response may be cached (`voxflow.server.audio_cache`).

        Args:
            seeded: the client gave a seed.
            streamed: the response is streamed (segments may be cut by the load's deadlines).
        Default: seeded requests only (run alone, `engine.isolate_seeded`, from the seed's
        noise); an unseeded request draws fresh noise (Piper's, CosyVoice3's sampling).
        A family overrides this only where a test shows unseeded reruns byte-identical.
        """
        return seeded

    def random_weights_note(self) -> str | None:
        """None for trained weights; with random weights (a model served for testing or
        timing), a sentence saying its output is noise, not speech. Clients are told in
        `/v1/models` (``weights``), the ``X-Voxflow-Weights: random`` response header and the
        comment of a WAV written by ``voxflow speak``. Default: None."""
        return None

    def warn_random_weights(self, batch: StageBatch) -> None:
        """Log, per request of `batch`, that its output is noise (random weights only)."""
        note = self.random_weights_note()
        if note is not None:
            for item in batch:
                log.warning("model %s request %s: weights are %s", self.name,
                            item.request.request_id, note)

    def describe(self) -> dict[str, Any]:
        """Facts for the start-up log: the voices, then the family's own (`details`)."""
        return {"voices": sorted(self.voices), **self.details()}

    def details(self) -> dict[str, Any]:
        """The family's own facts for `describe` (workers, threads, model file). Default: none."""
        return {}


def match_language(requested: str, supported: Sequence[str]) -> str | None:
    """The first of `supported` that the tag `requested` names, or None.

    Tags match when equal or when one is the other's primary subtag ("en" names "en-US",
    "ja-JP" names "ja"), ignoring case and "_" vs "-".
    """
    tag = requested.strip().lower().replace("_", "-")
    for candidate in supported:
        norm = candidate.lower().replace("_", "-")
        if tag == norm or norm.startswith(tag + "-") or tag.startswith(norm + "-"):
            return candidate
    return None
