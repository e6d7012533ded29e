"""The engine: owns the served models, their stage queues and worker threads.

`submit(request)` validates the request against the served models and admission limits and
returns a `SpeechStream`. Worker threads (one or more per stage) take batches from their stage's
queue, run the stage, and pass each output on: to the next stage's queue or, from the last stage,
to the request's state, which re-orders segments and hands chunks to the event loop thread-safely.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from voxflow.config import ConfigError, Settings
from voxflow.engine.admission import Admission
from voxflow.engine.aliases import Aliases
from voxflow.engine.ar_loop import AutoregressiveLoop
from voxflow.engine.checked import CheckedRequest
from voxflow.engine.checks import SPEED_MAX, SPEED_MIN, check_input, check_seed, check_speed
from voxflow.engine.drain import Drain
from voxflow.engine.foreground import Foreground
from voxflow.engine.lexicons import RequestLexicons
from voxflow.engine.metrics import EngineMetrics
from voxflow.engine.promotion import PROMOTER, can_restore, thread_nice
from voxflow.engine.request import Deadlines, RequestState, SpeechRequest
from voxflow.engine.scheduler import (
    ANY,
    BULK,
    FAST,
    BulkPromotion,
    Job,
    StageQueue,
    drain,
    lower_thread_priority,
)
from voxflow.engine.stream import SpeechStream
from voxflow.engine.supervisor import Supervisor, failing
from voxflow.engine.worker import run_stage_batch
from voxflow.errors import (
    EngineNotReadyError,
    InvalidRequestError,
    ModelNotFoundError,
    ShuttingDownError,
    echo,
)
from voxflow.lexicons.store import LexiconFileError, LexiconStore, lexicons_directory
from voxflow.memory_budget import BUDGET
from voxflow.memory_gate import GATE
from voxflow.models.base import ModelFamily
from voxflow.models.files import ModelFileError
from voxflow.models.registry import family_class
from voxflow.shipped_configs import LANGUAGE_HINTS
from voxflow.stages.autoregressive import AutoregressiveStage
from voxflow.stages.items import WHOLE_REQUEST, StageItem
from voxflow.stages.stage import Stage
from voxflow.text.document import SpeechDocument, parse_input
from voxflow.text.scripts import check_document, readable_scripts, spoken_text

log = logging.getLogger(__name__)


def _mib(nbytes: int | None) -> int | None:
    return None if nbytes is None else round(nbytes / 2**20)



def _check_run_speeds(document: SpeechDocument, speed: float) -> None:
    """Every run's speaking rate (request speed x SSML prosody rate) must be in range.

    Raises:
        InvalidRequestError: a run's rate is outside SPEED_MIN..SPEED_MAX (code invalid_ssml:
            only SSML prosody makes a run's rate differ from `speed`).
    """
    for run in document.runs:
        effective = speed * run.rate
        if not SPEED_MIN - 1e-9 <= effective <= SPEED_MAX + 1e-9:
            raise InvalidRequestError(
                f"SSML <prosody rate> {run.rate:g} (nested rates multiplied) times speed "
                f"{speed:g} is {effective:g}, outside {SPEED_MIN} to {SPEED_MAX}: "
                "lower the prosody rate or the request's speed.",
                param="input",
                code="invalid_ssml",
            )


@dataclass
class ServedModel:
    """A loaded family with its stage queues; `status` is loading, ready or failed."""

    name: str
    family: ModelFamily | None = None
    queues: list[StageQueue] = field(default_factory=list)
    status: str = "loading"
    error: str | None = None


class Engine:
    """Serves every model in `settings.models` from one process.

    Args:
        settings: the validated deployment.
        limit_input: refuse inputs over `server.max_input_chars` (True for the server).

    Lifecycle: `await start()` loads models, starts workers, runs a warm-up synthesis per model;
    `submit()` while running; `stop()` closes queues and joins workers.
    """

    def __init__(self, settings: Settings, *, limit_input: bool = True):
        self.settings = settings
        # The server's `max_input_chars` (off for `voxflow speak`, which reads whole files).
        self.max_input_chars = settings.server.max_input_chars if limit_input else None
        self.metrics = EngineMetrics()
        self.supervisor = Supervisor(self.metrics.worker_restarts)  # restarts dead worker loops
        self.models: dict[str, ServedModel] = {m.name: ServedModel(m.name) for m in settings.models}
        # The shipped models this deployment does not serve that read a language its voices may
        # not (`voxflow.shipped_configs.LANGUAGE_HINTS`: Kokoro's Japanese, from
        # configs/multi.yaml): their sentence for an unsupported_script refusal -> the scripts
        # they read. Fixed with the served models, so built once, not per request.
        self._readers_elsewhere: dict[str, frozenset[str] | None] = {
            hint.sentence(): readable_scripts((hint.tag,))
            for hint in LANGUAGE_HINTS if hint.model not in self.models}
        self._threads: list[threading.Thread] = []
        self._promotion_refused = False  # said once in the log (`_bulk_promotion`)
        self.aliases = Aliases.from_settings(settings)
        try:
            store = LexiconStore(lexicons_directory(settings.server.lexicons_dir))
        except LexiconFileError as exc:
            raise ConfigError(str(exc)) from exc
        self.lexicons = RequestLexicons(store, settings)  # pronunciation lexicons (issue 44)
        cfg = settings.engine
        self._deadlines = Deadlines(cfg.ttfa_target_s, cfg.continuation_lead_s,
                                    cfg.running_dry_s, cfg.late_first_yields)
        self.foreground = Foreground(settings.jobs.quiet_s)  # jobs wait behind requests
        self.admission = Admission(cfg.max_inflight_requests, cfg.max_queued_requests,
                                   cfg.retry_after_s, self.metrics.inflight, self.metrics.waiting)
        self.drain = Drain(cfg.retry_after_s)  # work in flight, for a graceful stop
        self.started_at = time.monotonic()
        self.created_at = time.time()
        self.ready_after_s: float | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Load every model (in a thread), start its workers, warm each up.

        A model that fails to load is marked failed (shown in `/health`) and the error re-raised;
        a voice alias naming no loaded voice raises `ConfigError` (workers stopped).
        """
        headroom = self.settings.engine.memory_headroom_mb
        cache = self.settings.cache
        BUDGET.start(None if headroom is None else headroom * 10**6,
                     cache.max_bytes if cache.enabled else 0)
        GATE.set_capacity(None)  # warm-ups run unbounded; the capacity is set once all loaded
        for spec in self.settings.models:
            served = self.models[spec.name]
            try:
                cls = family_class(spec.family)
                with BUDGET.loading(spec.name):
                    served.family = await asyncio.to_thread(cls, spec.name, spec.options)
                served.queues = self._start_workers(served.name, served.family)
                if self.settings.engine.warmup:
                    await self._warmup(served.family)
                served.status = "ready"
                log.info("model %s ready: %s", spec.name, served.family.describe())
            except Exception as exc:
                served.status, served.error = "failed", f"{type(exc).__name__}: {exc}"
                if isinstance(exc, ModelFileError):  # the file and what is wrong: one line
                    log.error("model %s failed to start: %s", spec.name, exc)
                else:
                    log.exception("model %s failed to start", spec.name)
                raise
        try:
            self.aliases.check(self)  # voice aliases need the loaded voices
            self.lexicons.check_voices({n: m.family for n, m in self.models.items()
                                        if m.family is not None})
            self.aliases = self.aliases.with_openai_voices(self)
        except ConfigError:
            self.stop()
            raise
        GATE.set_capacity(BUDGET.run_capacity)
        log.info("memory: models %s MiB, audio cache %s MiB, budget %s MiB, runs' working sets "
                 "%s MiB", {name: round(b / 2**20) for name, b in BUDGET.models.items()},
                 _mib(BUDGET.cache), _mib(BUDGET.limit), _mib(BUDGET.run_capacity))
        self.ready_after_s = time.monotonic() - self.started_at

    def _start_workers(self, model: str, family: ModelFamily) -> list[StageQueue]:
        stages = family.stages()
        for stage in stages:
            stage.start()  # capture graphs, allocate state pools: before any request
        isolate = self.settings.engine.isolate_seeded
        queues = [StageQueue(model, stage, self.metrics, isolate) for stage in stages]
        for i, (stage, queue) in enumerate(zip(stages, queues, strict=True)):
            if stage.serves_next and i + 1 < len(queues):
                queue.serve(queues[i + 1])  # scheduler rule 8
            if stage.workers + stage.bulk_workers < 1 and queue.served_by is None:
                raise ValueError(f"{model}: stage '{stage.name}' has no workers and no "
                                 "earlier stage serves it")
        for i, (stage, queue) in enumerate(zip(stages, queues, strict=True)):
            downstream = queues[i + 1] if i + 1 < len(queues) else None
            lanes = [(FAST if stage.bulk_workers else ANY, w) for w in range(stage.workers)]
            if not isinstance(stage, AutoregressiveStage):
                lanes += [(BULK, w) for w in range(stage.bulk_workers)]
            after_served = queues[i + 2] if queue.serves is not None and i + 2 < len(queues) \
                else None
            for lane, w in lanes:
                loop = self._worker(model, stage, queue, downstream, lane, after_served)
                t = threading.Thread(
                    target=self.supervisor.supervise(model, stage.name, loop),
                    name=f"{model}-{stage.name}-{'bulk-' if lane == BULK else ''}{w}",
                    daemon=True,
                )
                t.start()
                self._threads.append(t)
        self.metrics.watch_stages(model, stages)
        return queues

    def _worker(self, model: str, stage: Stage, queue: StageQueue,
                downstream: StageQueue | None, lane: str = ANY,
                after_served: StageQueue | None = None):
        """The loop one worker thread of `stage` runs, by the stage's kind and its lane
        (scheduler rule 7: a bulk worker first lowers its thread's priority); batches it takes
        from the queue it serves (rule 8) pass on to `after_served`, that stage's next."""
        if isinstance(stage, AutoregressiveStage):
            if downstream is None:
                raise ValueError(f"autoregressive stage {stage.name} cannot be the last stage")
            return AutoregressiveLoop(model, stage, queue, downstream, self.metrics)

        def handle(batch: list[Job]) -> None:
            with failing(batch, stage.name):  # the loop dies: its batch fails at once
                run_stage_batch(model, stage, batch, downstream, self.metrics,
                                queue.isolated(batch), queue)

        def served(source: StageQueue, batch: list[Job]) -> None:
            # a batch of the next stage's, taken by this worker (scheduler rule 8)
            with failing(batch, source.stage.name):
                run_stage_batch(model, source.stage, batch, after_served, self.metrics,
                                source.isolated(batch), source)

        def loop() -> None:
            drain(queue, handle, lane, self._bulk_promotion(model, stage) if lane == BULK
                  else None, served)

        return loop

    def _bulk_promotion(self, model: str, stage: Stage) -> BulkPromotion | None:
        """Lower the calling bulk worker's priority (rule 7) and say how its runs are promoted
        when they turn urgent (`voxflow.engine.promotion`; None: they are not)."""
        base = thread_nice()
        if base is None or not lower_thread_priority(stage.bulk_nice):
            log.warning("%s: cannot lower a bulk worker's priority here; it runs at the "
                        "fast lane's", stage.name)
            return None
        if not stage.bulk_promotion:
            return None
        if not can_restore(base):
            if not self._promotion_refused:
                self._promotion_refused = True
                log.warning("%s: this process may not raise a thread's priority back "
                            "(CAP_SYS_NICE or RLIMIT_NICE, `ulimit -e`), so a bulk run that "
                            "turns urgent keeps the bulk priority", stage.name)
            return None
        counter = self.metrics.lane_promotions.labels(model, stage.name)
        return BulkPromotion(PROMOTER, base, stage.bulk_nice, counter.inc)

    async def _warmup(self, family: ModelFamily) -> None:
        request = SpeechRequest(family.name, family.warmup_text, family.default_voice, seed=0)
        # Loading may be slow; the warm-up gets its own generous deadline, not the request one.
        await self.submit(request, internal=True, timeout_s=600.0).collect()

    def stop(self) -> None:
        """Close every queue and join the workers (idempotent)."""
        for served in self.models.values():
            for q in served.queues:
                q.close()
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()
        for served in self.models.values():
            for q in served.queues:
                q.stage.close()  # per-request state of requests cut off by the shutdown
        GATE.set_capacity(None)  # the process's gate and budget were this engine's
        BUDGET.start(None)

    @property
    def ready(self) -> bool:
        """Every model loaded and warm, and not draining (`/health` answers 200)."""
        return not self.drain.draining and all(m.status == "ready" for m in self.models.values())

    def health(self) -> dict[str, Any]:
        """Readiness and per-model status, for `/health`."""
        return {
            "status": "draining" if self.drain.draining else (
                "ready" if self.ready else "not_ready"),
            "models": {name: self._worker_health(m) for name, m in self.models.items()},
            "inflight_requests": self.admission.inflight,
            "waiting_requests": self.admission.waiting,
            "parked_requests": self.admission.parked,
        }

    @staticmethod
    def _model_health(served: ServedModel) -> dict[str, Any]:
        body: dict[str, Any] = {"status": served.status}
        if served.error:
            body["error"] = served.error
        note = served.family.random_weights_note() if served.family else None
        if note is not None:
            body["weights"] = note  # random weights: its audio is noise (spec §9.4)
        reports = ((q.stage.name, q.stage.health()) for q in served.queues)
        stages = {name: report for name, report in reports if report}
        if stages:
            body["stages"] = stages  # e.g. which shapes run as captured graphs, or why not
        return body

    def _worker_health(self, served: ServedModel) -> dict[str, Any]:
        """`_model_health`, with ``worker_restarts`` (`Supervisor.health`) where a worker
        loop of the model died and was restarted."""
        body = self._model_health(served)
        restarts = self.supervisor.health(served.name)
        if restarts:
            body["worker_restarts"] = restarts
        return body

    # ---- requests ----------------------------------------------------------------------------
    def family(self, model: str) -> ModelFamily:
        """The loaded family serving `model`.

        Raises:
            ModelNotFoundError: not a served model (404).
            EngineNotReadyError: still loading or failed (503).
        """
        served = self.models.get(model)
        if served is None:
            raise ModelNotFoundError(model, sorted(self.models))
        if served.family is None:
            raise EngineNotReadyError(f"model '{model}' is {served.status}")
        return served.family

    def resolve(self, request: SpeechRequest) -> SpeechRequest:
        """`request` with its model and voice aliases (`engine.aliases`) replaced by the served
        model and voice they stand for.

        Raises:
            ModelNotFoundError: the model is neither served nor an alias (404, aliases listed).
            InvalidRequestError: param "voice": neither a voice of the model nor an alias.
        """
        model, voice = self.aliases.resolve(self, request.model, request.voice)
        if (model, voice) == (request.model, request.voice):
            return request
        return replace(request, model=model, voice=voice)

    def validate(self, request: SpeechRequest) -> ModelFamily:
        """Check model, voice, language, speed and text; returns the family.

        Raises:
            ModelNotFoundError, InvalidRequestError (param names the field), EngineNotReadyError.
        """
        return self.prepare(request)[0]

    def prepare(self, request: SpeechRequest) -> tuple[ModelFamily, SpeechDocument]:
        """`validate`, and parse the input (plain text or SSML) into the document the front
        end segments, with the one language it is read in decided (`_read_in_language`). Runs
        on the event loop, so every input error is a 400 before any audio.

        Raises:
            ModelNotFoundError, InvalidRequestError (param names the field), EngineNotReadyError.
        """
        check_input(request.text, self.max_input_chars)
        family = self.check_options(request)
        document = parse_input(request.text, say_as_language=None)  # say-as as written
        _check_run_speeds(document, request.speed)
        document = self._read_in_language(request, family, document)
        lexicon = self.lexicons.resolve(request.model, request.voice, request.lexicon, family)
        return family, self.lexicons.apply(document, lexicon, request.voice, family)

    def check_options(self, request: SpeechRequest) -> ModelFamily:
        """Every check of `prepare` but the input's: model, voice, language, speed, seed,
        instructions (`ModelFamily.check_instructions`, for a family that follows them) and
        word timestamps (for a stream whose text comes later). Aliases must be resolved
        (`resolve`). Returns the family.

        Raises:
            ModelNotFoundError, InvalidRequestError (param names the field), EngineNotReadyError.
        """
        family = self.family(request.model)
        if request.voice not in family.voices:
            raise InvalidRequestError(
                f"Voice {echo(request.voice)} is not a voice of model '{request.model}'. "
                f"Available voices: {', '.join(sorted(family.voices))}.",
                param="voice",
                code="voice_not_found",
            )
        if request.language is not None:
            # Refused here, before the input is parsed (the family's own check and message).
            family.resolve_language(request.voice, request.language, "")
        check_speed(request.speed)
        check_seed(request.seed)
        if request.instructions and family.follows_instructions:
            family.check_instructions(request.instructions)
        if request.text_feed is not None and not family.streams_text_in:
            raise InvalidRequestError(
                f"Model '{request.model}' cannot take text while it speaks (its family "
                f"'{family.family}' speaks each sentence on its own).",
                param="text", code="unsupported_parameter")
        self.lexicons.resolve(request.model, request.voice, request.lexicon, family)
        if request.timestamps and not family.word_timestamps:
            raise InvalidRequestError(
                f"Model '{request.model}' cannot give word timestamps (its family "
                f"'{family.family}' has no word durations to time them by); ask a Piper or "
                "Kokoro model.",
                param="timestamps",
                code="timestamps_unsupported",
            )
        return family

    def _read_in_language(
        self, request: SpeechRequest, family: ModelFamily, written: SpeechDocument
    ) -> SpeechDocument:
        """Decide the request's one language from the text as written
        (`ModelFamily.resolve_language`), spell SSML say-as out in it, and check the scripts
        in it; returns the document the front end reads, its `language` set."""
        language = family.resolve_language(request.voice, request.language, spoken_text(written))
        document = written
        if written.ssml:
            document = parse_input(request.text, say_as_language=language)
        document = replace(document, language=language)
        if request.timestamps and not family.times_words_in(language):
            raise InvalidRequestError(
                f"Model '{request.model}' cannot give word timestamps for text read as "
                f"'{language}' (no word boundaries in its readings); ask without timestamps, "
                "or for English text.",
                param="timestamps",
                code="timestamps_unsupported",
            )
        return self._check_scripts(request, family, document, written)

    def _check_scripts(
        self,
        request: SpeechRequest,
        family: ModelFamily,
        document: SpeechDocument,
        written: SpeechDocument,
    ) -> SpeechDocument:
        """`voxflow.text.scripts.check_document` in the document's language, letters counted
        as written: a 400 naming the voice's other languages and the other served voices that
        read the input when it is mostly in scripts the voice cannot read in that language,
        else the document with the few foreign words dropped."""
        language = document.language or family.voices[request.voice].language
        own = f"{request.model}/{request.voice}"
        voices = {
            f"{name}/{voice}": readable_scripts(tuple(served.family.languages(voice)))
            for name, served in self.models.items()
            if served.family is not None
            for voice in served.family.voices
            if f"{name}/{voice}" != own
        }
        others = {
            tag: readable_scripts((tag,))
            for tag in family.languages(request.voice)
            if tag != language
        }
        label = f"voice '{request.voice}' of model '{request.model}' ({language})"
        document, dropped = check_document(
            document,
            readable_scripts((language,)),
            label,
            voices,
            written=written,
            kept=family.kept_scripts(request.voice, language),
            other_languages=others,
            voice_id=request.voice,
            elsewhere=self._readers_elsewhere,
        )
        if dropped:
            log.info("input: dropped %d letters in scripts that %s cannot read", dropped, label)
        return document

    def check(self, request: SpeechRequest, *, internal: bool = False) -> CheckedRequest:
        """Resolve aliases, check and parse `request` (`resolve`, `prepare`), drop the
        instructions its model does not follow, and say whether its audio is fixed
        (`CheckedRequest.fixed_audio`). Admits nothing: `submit(request, checked=...)` does.

        Raises:
            ModelNotFoundError, InvalidRequestError, EngineNotReadyError: bad or early request
                (a model still warming up, unless `internal`).
        """
        request = self.resolve(request)
        family, document = self.prepare(request)
        if request.instructions and not family.follows_instructions:
            request = replace(request, instructions=None)  # ignored (the response says so)
        if not internal and not self.models[request.model].status == "ready":
            raise EngineNotReadyError(f"model '{request.model}' is still warming up")
        seeded = request.seed is not None
        fixed = (family.fixed_audio(seeded, request.streamed)
                 and (not seeded or self.settings.engine.isolate_seeded))
        lexicon = self.lexicons.name_for(request.model, request.voice, request.lexicon)
        return CheckedRequest(request, family, document, fixed, lexicon)

    def submit(
        self, request: SpeechRequest, *, internal: bool = False, timeout_s: float | None = None,
        listener_ends_at: float | None = None, checked: CheckedRequest | None = None,
        background: bool = False,
    ) -> SpeechStream:
        """Validate and admit a request; returns its chunk stream (iterate it to start work).

        Must be called on the event loop thread. `listener_ends_at`: perf_counter seconds when
        audio that earlier requests sent to the same listener plays out (a speech stream's
        next segment): the request is then scheduled as that audio's continuation
        (`RequestState.due`), not as a new arrival. `checked`: `check(request)`'s result when
        the caller has it (the request is then not checked or parsed again). `background`: a
        long-form job's segment, whose items wait while any other request is in the engine
        (`voxflow.engine.foreground`).

        Raises:
            ModelNotFoundError, InvalidRequestError, EngineNotReadyError: bad or early request.
            OverloadedError: in-flight plus queued requests are at their limit (429).
        """
        if checked is None:
            checked = self.check(request, internal=internal)
        request, family, document = checked.request, checked.family, checked.document
        cfg = self.settings.engine
        self.admission.reserve()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stream: SpeechStream | None = None  # set below, before any chunk can arrive

        def sink(chunk, error) -> None:
            assert stream is not None
            loop.call_soon_threadsafe(stream.arrive, chunk, error)

        seed = request.seed if request.seed is not None else secrets.randbits(63)
        voice = family.voices[request.voice]
        server = self.settings.server
        state = RequestState(request, seed, voice.sample_rate, sink, self._deadlines,
                             listener_ends_at=listener_ends_at,
                             max_ahead_samples=None if internal else
                             round(server.max_buffered_audio_s * voice.sample_rate),
                             foreground=self.foreground if background else None)
        state.document = document
        state.on_end(self._releaser(request.model, state.id))
        if background:
            self.foreground.add_background(state)
            state.on_end(lambda: self.foreground.remove_background(state))
        else:
            self.foreground.enter()
            state.on_end(self.foreground.leave)
        if not internal:  # a drain that times out ends it as its protocol ends an error
            retry = cfg.retry_after_s
            state.on_end(self.drain.on_abort(
                lambda: state.fail(ShuttingDownError(retry_after=retry))))
        first = self.models[request.model].queues[0]

        def start() -> None:
            item = StageItem(state.info, WHOLE_REQUEST, document, speed=request.speed)
            first.put(Job(state, item))

        stream = SpeechStream(state, queue, timeout_s or cfg.request_timeout_s, self.admission,
                              start, self._ended, internal,
                              stall_s=None if internal else server.client_stall_timeout_s,
                              gate=None if internal else GATE)
        return stream

    def _releaser(self, model: str, request_id: str):
        """A callback that frees `request_id`'s per-request state in every stage of `model`."""

        def release() -> None:
            for queue in self.models[model].queues:
                try:
                    queue.stage.release(request_id)
                except Exception:  # noqa: BLE001 (a failing free must not break the others)
                    log.exception("stage %s failed to release %s", queue.stage.name, request_id)

        return release

    def _ended(self, stream: SpeechStream, status: str) -> None:
        """Called once per stream when it ends: frees the stages' state, records metrics."""
        stream.state.end()  # stages free what they hold for it: one path for every outcome
        if not stream.internal:
            self._record(stream.state, status)

    def _record(self, state: RequestState, status: str) -> None:
        model = state.request.model
        if status in ("cancelled", "timeout", "stalled"):
            reason = "client" if status == "cancelled" else status
            self.metrics.cancellations.labels(model, reason).inc()
        self.metrics.requests.labels(model, status).inc()
        if status == "ok":
            self._record_timing(model, state)

    def _record_timing(self, model: str, state: RequestState) -> None:
        audio_s = state.audio_samples / state.sample_rate
        if state.first_audio_at is not None:
            self.metrics.ttfa.labels(model).observe(state.first_audio_at - state.submitted_at)
            log.debug("request %s: first audio after %.3f s", state.id,
                      state.first_audio_at - state.submitted_at)
        self.metrics.audio_seconds.labels(model).inc(audio_s)
        if state.underruns:
            self.metrics.underruns.labels(model).inc(len(state.underruns))
            self.metrics.underrun_seconds.labels(model).inc(state.underrun_s)
            log.info("request %s: %d playback underrun(s), %.3f s (segment:part gap %s)",
                     state.id, len(state.underruns), state.underrun_s,
                     " ".join(f"{s}:{p} {g:.3f}" for s, p, g in state.underruns))
        if audio_s > 0:
            wall_s = time.perf_counter() - state.submitted_at
            self.metrics.rtf.labels(model).observe(wall_s / audio_s)

