"""A speech request, its per-request state while in flight, and the audio chunks it yields.

Lifecycle of a `RequestState`: created by `Engine.submit` -> its text enters the model's first
stage -> the front end fans it out into N segments -> each segment's audio arrives from the last
stage (possibly out of order across workers) -> `deliver()` re-orders and emits one `AudioChunk`
per segment, the last with ``is_last=True``. A segment may arrive in several parts (a
streaming stage emits audio hop by hop): parts are emitted in (segment, part) order, and the
part marked final closes its segment. A segment's word timings (`deliver`'s `words`, relative
to the segment's audio) are moved onto the response's time line (lead silence, earlier
segments and their pauses) and sent with the first chunk emitted from then on. `cancel()`
(client gone, timeout) makes every stage queue drop the request's pending items; `fail()` ends
it with an error.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from voxflow.engine.foreground import Foreground
from voxflow.stages.items import RequestInfo
from voxflow.stages.outputs import WordTiming
from voxflow.stages.text_feed import TextFeed
from voxflow.text.document import SpeechDocument


@dataclass(frozen=True)
class TimedWord:
    """A word of the input and when the response's audio speaks it.

    Attributes:
        start, end: seconds from the response's first sample (every pause and silence the
            client receives counted, speed applied), start <= end.
        text_start, text_end: code point offsets of the word in the request's `input`.
    """

    start: float
    end: float
    text_start: int
    text_end: int


@dataclass(frozen=True)
class AudioChunk:
    """A piece of a request's audio, in order.

    Attributes:
        samples: (N,) float32 PCM in [-1, 1], mono.
        sample_rate: Hz.
        request_id: the request this belongs to.
        index: 0-based chunk number within the request.
        is_last: True on the final chunk (which may be empty).
        words: words whose timings became known with this chunk (empty without timestamps):
            each starts no earlier than this chunk, so a client can show them before playing it.
    """

    samples: np.ndarray
    sample_rate: int
    request_id: str
    index: int
    is_last: bool
    words: tuple[TimedWord, ...] = ()


@dataclass(frozen=True)
class SpeechRequest:
    """What a client asked for, already validated by the server or CLI.

    Attributes:
        model: served model name.
        text: input text (non-empty, within the length limit).
        voice: voice id of that model.
        speed: playback speed factor, 0.25 to 4.0 (1.0 = the voice's natural rate).
        seed: when given, the audio is byte-identical on every run; None = fresh randomness.
        request_id: unique id (a uuid4 hex by default).
        language: BCP-47-ish tag of the text ("en", "ja-JP"); None = the family decides.
        timestamps: True to get each word's start and end (`AudioChunk.words`); only for a
            family that can time words (`ModelFamily.word_timestamps`).
        streamed: True when the listener gets the audio as it is made (a streamed response);
            False when it gets the whole file at the end, so no segment's audio is needed
            before the last one's (a stage need not spend compute to make it early).
        instructions: how to speak (OpenAI's `instructions`), non-empty, for a family that
            follows them (`ModelFamily.follows_instructions`, checked by
            `ModelFamily.check_instructions`); None otherwise (ignored ones are not carried).
        text_feed: where the rest of the text arrives while the request runs, for a family
            that feeds one running generation (`ModelFamily.streams_text_in`); `text` is then
            the first piece, which the caller also pushes into the feed. None: `text` is all.
        lexicon: a saved pronunciation lexicon's name; "" for none; None for the configured
            default (`voxflow.engine.lexicons`).
    """

    model: str
    text: str
    voice: str
    speed: float = 1.0
    seed: int | None = None
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    language: str | None = None
    timestamps: bool = False
    streamed: bool = True
    instructions: str | None = None
    text_feed: TextFeed | None = field(default=None, compare=False)
    lexicon: str | None = None


@dataclass(frozen=True)
class Deadlines:
    """Scheduling targets behind `RequestState.due`, in seconds.

    Attributes:
        ttfa_target_s: how long a new request's first segment may wait before it is due.
        continuation_lead_s: how long before a stream's audio runs out its next segment is due
            (its synthesis time, roughly: a 120-character segment takes 0.1-0.3 s here).
        running_dry_s: a stream with less audio than this left to play is running dry: it
            goes ahead of first segments already late (scheduler rule 2). At least
            `continuation_lead_s`.
        late_first_yields: a first segment past its due (its listener's first audio already
            late) yields to first segments still on time; False: it keeps its place by due.
        segment_estimate_s: assumed audio length of a segment not yet synthesized.
    """

    ttfa_target_s: float = 1.0
    continuation_lead_s: float = 0.5
    running_dry_s: float = 1.0
    late_first_yields: bool = True
    segment_estimate_s: float = 2.0


# Signature of the sink a RequestState pushes to: (chunk or None, error or None).
Sink = Callable[[AudioChunk | None, BaseException | None], None]


class RequestState:
    """Engine-side state of one in-flight request; shared by the stage worker threads.

    Args:
        request: the validated request.
        seed: the seed actually used (the request's, or a fresh random one).
        sample_rate: Hz of the voice's output.
        sink: called from worker threads with each in-order chunk, or with an error once.
        deadlines: the scheduling targets (`Deadlines`; defaults when None).
        listener_ends_at: perf_counter seconds when the audio that earlier requests sent to
            this request's listener has played out (the segments of a WebSocket speech
            stream), or None for a request of its own.
        max_ahead_samples: how many samples the audio emitted may run ahead of what the
            listener has read (`mark_read`) before the request is `backlogged` and the
            scheduler holds its items (`server.max_buffered_audio_s`); None: no limit.
        foreground: the engine's `Foreground` for a background request (a long-form job's
            segment), whose items wait while an interactive request is in the engine; None
            for an interactive one.
    """

    _arrivals = itertools.count()

    def __init__(
        self,
        request: SpeechRequest,
        seed: int,
        sample_rate: int,
        sink: Sink,
        deadlines: Deadlines | None = None,
        listener_ends_at: float | None = None,
        max_ahead_samples: int | None = None,
        foreground: Foreground | None = None,
    ):
        self.request = request
        # Set for a background request (a long-form job's segment): it is held like a backlog
        # while an interactive request is in the engine (`waits_for_listener`, foreground.py).
        self.foreground = foreground
        # perf_counter when the audio earlier requests sent to the same listener has played
        # out (a speech stream's next segment), else None: then this request continues that
        # audio and is scheduled as a continuation from its first segment on (`due`).
        self.listener_ends_at = listener_ends_at
        self.seed = seed
        self.sample_rate = sample_rate
        self.arrival = next(self._arrivals)
        self.submitted_at = time.perf_counter()
        self.first_audio_at: float | None = None
        self.audio_samples = 0
        # Samples the listener has taken (`mark_read`); the scheduler holds the request's
        # items while `audio_samples` runs more than `max_ahead_samples` ahead of them.
        self.read_samples = 0
        self.max_ahead_samples = max_ahead_samples
        # True while the request gave its admission slot back (`Admission.park`) and waits
        # for one again: it is held like a backlog (`waits_for_listener`).
        self.parked = False
        self._backlog_watchers: list[Callable[[], None]] = []
        # Playback underruns (`_track_playback`): chunks emitted after the audio before them had
        # played out, as (segment, part, gap seconds), for the metrics, the log and `due`.
        self.underruns: list[tuple[int, int, float]] = []
        self.segments_total: int | None = None
        self.segments_synthesized = 0
        self._sink = sink
        self._deadlines = deadlines or Deadlines()
        self._lock = threading.Lock()
        # (segment, part) -> (samples, final, words)
        self._pending: dict[tuple[int, int], tuple[np.ndarray, bool, tuple | None]] = {}
        # Word timings placed on the response's time line, not yet sent with a chunk.
        self._words: list[TimedWord] = []
        self._segment_start = 0  # first sample of the segment being emitted (in the response)
        self._words_end = 0.0  # end of the last word placed (seconds)
        self._next_segment = 0
        self._next_part = 0
        self._next_chunk = 0
        self._cancelled = threading.Event()
        self._finished = False
        # Seconds of silence after segments, and before the first (breaks, pauses).
        self._pauses_after: dict[int, float] = {}
        self._lead_silence_s = 0.0
        # True when the input had nothing speakable: the audio is only silence (fan_out).
        self.unspeakable = False
        # The parsed input (`voxflow.text.document.SpeechDocument`), set by `Engine.submit`.
        self.document: SpeechDocument | None = None
        self._ended: list[Callable[[], None]] = []
        self._info: RequestInfo | None = None
        # Called (outside the lock) each time a segment's last part is emitted.
        self._segment_watchers: list[Callable[[], None]] = []

    @property
    def id(self) -> str:
        return self.request.request_id

    @property
    def info(self) -> RequestInfo:
        """The request's facts as stages see them (`voxflow.stages.items.RequestInfo`); built
        on first use, after `Engine.submit` set `document` (its language)."""
        if self._info is None:
            request = self.request
            language = getattr(self.document, "language", None) or request.language
            self._info = RequestInfo(
                request_id=self.id,
                model=request.model,
                voice=request.voice,
                language=language,
                seed=self.seed,
                seeded=request.seed is not None,
                speed=request.speed,
                arrival=self.arrival,
                timestamps=request.timestamps,
                streamed=request.streamed,
                instructions=request.instructions,
                text_feed=request.text_feed,
            )
        return self._info

    @property
    def cancelled(self) -> bool:
        """True once the request was cancelled or ended; stages skip its work."""
        return self._cancelled.is_set()

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def segments_delivered(self) -> int:
        """Segments whose audio has been emitted whole, in order (0 before the first)."""
        return self._next_segment

    def watch_segments(self, callback: Callable[[], None]) -> None:
        """Call `callback` (no lock held) each time a segment's last part is emitted and when
        the request is cancelled; a callback already registered is not added twice."""
        with self._lock:
            if callback not in self._segment_watchers:
                self._segment_watchers.append(callback)

    @property
    def backlogged(self) -> bool:
        """True while the audio emitted runs more than `max_ahead_samples` ahead of what the
        listener has read: the scheduler neither runs nor counts the request's items (a
        client that stops reading stops its synthesis, and its memory stays bounded)."""
        limit = self.max_ahead_samples
        return limit is not None and self.audio_samples - self.read_samples > limit

    @property
    def waits_for_listener(self) -> bool:
        """True while the scheduler holds the request for its listener (rule 9): it is
        `backlogged`, or `parked` without an admission slot until its listener reads on, or a
        background request while an interactive one is in the engine (`foreground`)."""
        return (self.parked or self.backlogged
                or (self.foreground is not None and self.foreground.busy))

    def wake_held(self) -> None:
        """Wake the queues holding this request's items (`watch_backlog`): the foreground
        emptied (`Foreground.leave`)."""
        if not self.waits_for_listener:
            self._wake_backlog_watchers()

    def mark_read(self, samples: int) -> None:
        """The listener took `samples` more samples (called on the event loop as its consumer
        comes back for the next chunk); wakes the queues holding the request's items
        (`watch_backlog`) when that ends its hold."""
        was = self.waits_for_listener
        self.read_samples += samples
        if was and not self.waits_for_listener:
            self._wake_backlog_watchers()

    def set_parked(self, parked: bool) -> None:
        """Mark the request parked (its slot given back) or not (called on the event loop);
        wakes the queues holding its items when that ends its hold."""
        was = self.waits_for_listener
        self.parked = parked
        if was and not self.waits_for_listener:
            self._wake_backlog_watchers()

    def _wake_backlog_watchers(self) -> None:
        with self._lock:
            watchers = list(self._backlog_watchers)
        for callback in watchers:
            callback()

    def watch_backlog(self, callback: Callable[[], None]) -> None:
        """Call `callback` (no lock held) each time the request stops `waits_for_listener`;
        a callback already registered is not added twice."""
        with self._lock:
            if callback not in self._backlog_watchers:
                self._backlog_watchers.append(callback)

    @property
    def audio_flowing(self) -> bool:
        """Whether the listener already has audio: this request's own first chunk went out,
        or earlier requests sent audio it continues (`listener_ends_at`). Its segments are
        then continuations, due when that audio runs out (`due`)."""
        return self.first_audio_at is not None or self.listener_ends_at is not None

    def due(self, segment_index: int, now: float) -> float:
        """When segment `segment_index` should be ready (perf_counter seconds), for scheduling.

        Before any audio: the first segment is due at arrival plus the TTFA target; a later
        one is due `segment_estimate_s` per segment after `now` at the earliest (its listener
        has heard nothing yet, so it is never due before first segments already waiting).
        Once audio flows: the next segment is due when the audio sent so far has played out
        (`_played_out`: playback from the first chunk, resumed at a late chunk after a gap),
        less the lead its synthesis needs.
        Segments further ahead are due one `segment_estimate_s` later each. A request that
        continues a listener's audio (`listener_ends_at`) is due as if that audio were its
        own: segment k at `listener_ends_at` less the lead, plus k estimates.
        """
        d = self._deadlines
        if self.first_audio_at is None and self.listener_ends_at is not None:
            # continues a listener's audio: due when it runs out, less the lead
            start = self.listener_ends_at - d.continuation_lead_s
            return start + max(segment_index, 0) * d.segment_estimate_s
        if self.first_audio_at is None:
            arrival = self.submitted_at + d.ttfa_target_s
            if segment_index <= 0:
                return arrival
            start, ahead = max(now, arrival), segment_index
        else:
            start = self._played_out(self.first_audio_at) - d.continuation_lead_s
            ahead = max(segment_index - self._next_segment, 0)
        return start + ahead * d.segment_estimate_s

    def rank(self, segment_index: int, now: float) -> tuple[int, float]:
        """Scheduler rule 2's (tier, due) for segment `segment_index`: tier 0 goes first, each
        tier by due (`due`). Tier 0: a stream running dry (less than `running_dry_s` of audio
        left to play, `slack`) and, with `late_first_yields`, a first segment still on time
        (not past due); tier 1: a stream with audio to spare and a first segment already
        late."""
        d = self._deadlines
        due = self.due(segment_index, now)
        if self.audio_flowing:
            return (0 if self._slack_at(due, now) < d.running_dry_s else 1), due
        return (0 if d.late_first_yields and due > now else 1), due

    def slack(self, segment_index: int, now: float) -> float:
        """Seconds from `now` until segment `segment_index` must have audio out, or its
        listener waits: its first audio's target (arrival plus the TTFA target) before any
        audio; once audio flows, when the audio sent so far has played out (`due` without the
        continuation lead). Negative: already late."""
        return self._slack_at(self.due(segment_index, now), now)

    def _slack_at(self, due: float, now: float) -> float:
        """`slack` from a segment's `due` (computed once by the caller)."""
        lead = self._deadlines.continuation_lead_s if self.audio_flowing else 0.0
        return due + lead - now

    def set_segment_plan(self, pauses_after: dict[int, float], lead_silence_s: float) -> None:
        """Called with the front end's plan (`voxflow.stages.outputs.Segments`) before its
        segments are handed out.

        Args:
            pauses_after: segment index -> seconds of silence emitted after its audio.
            lead_silence_s: seconds of silence emitted before segment 0's audio.
        """
        self._pauses_after = dict(pauses_after)
        self._lead_silence_s = lead_silence_s

    def _with_pauses(self, segment: int, part: int, final: bool, audio: np.ndarray) -> np.ndarray:
        """`audio` with the planned silence before (segment 0's first part) and after (a
        segment's final part)."""
        before = self._lead_silence_s if segment == 0 and part == 0 else 0.0
        after = self._pauses_after.get(segment, 0.0) if final else 0.0
        if not before and not after:
            return audio
        head = np.zeros(round(before * self.sample_rate), np.float32)
        tail = np.zeros(round(after * self.sample_rate), np.float32)
        return np.concatenate([head, np.asarray(audio, np.float32), tail])

    def cancel(self) -> None:
        """Stop all further work for this request (idempotent, thread-safe); wakes the queues
        watching its segments or its backlog (`watch_segments`, `watch_backlog`), so they drop
        its held items now."""
        already = self._cancelled.is_set()
        self._cancelled.set()
        if not already:
            with self._lock:
                watchers = [*self._segment_watchers, *self._backlog_watchers]
            for callback in watchers:
                callback()

    def set_segment_count(self, n: int) -> None:
        """Called by the front end once it knows how many segments the text has (n >= 1)."""
        with self._lock:
            self.segments_total = n
            self._flush_locked()

    def deliver(
        self, segment_index: int, audio: np.ndarray, part: int = 0, final: bool = True,
        words: tuple[WordTiming, ...] | None = None,
    ) -> None:
        """Hand in audio of one segment part, (N,) float32; emits every chunk now in order.

        Args:
            segment_index: 0-based segment.
            audio: the part's samples (may be empty).
            part: 0-based part of the segment (0 for a segment delivered whole).
            final: True on the segment's last part.
            words: the segment's word timings, seconds from its first sample (usually with
                part 0); sent with the first chunk emitted once this part is.
        """
        with self._lock:
            if self._finished:
                return
            if final:
                self.segments_synthesized += 1
            self._pending[(segment_index, part)] = (audio, final, words)
            before = self._next_segment
            self._flush_locked()
            watchers = self._segment_watchers if self._next_segment != before else []
        for callback in watchers:
            callback()

    def fail(self, error: BaseException) -> None:
        """End the request with an error (first error wins; later calls do nothing)."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self.cancel()
        self._sink(None, error)

    def on_end(self, callback: Callable[[], None]) -> None:
        """Register `callback` to run once when the request ends (any outcome); see `end`."""
        self._ended.append(callback)

    def end(self) -> None:
        """Run the end callbacks once (the engine calls this when the request's stream ends:
        finished, failed, timed out or cancelled); later calls do nothing."""
        callbacks, self._ended = self._ended, []
        for callback in callbacks:
            callback()

    def _flush_locked(self) -> None:
        while (self._next_segment, self._next_part) in self._pending and not self._finished:
            segment, part = self._next_segment, self._next_part
            samples, final, words = self._pending.pop((segment, part))
            audio = self._with_pauses(segment, part, final, samples)
            if part == 0:
                lead = self._lead_silence_s if segment == 0 else 0.0
                self._segment_start = self.audio_samples + round(lead * self.sample_rate)
            if words:
                self._place_words(words)
            if final:
                self._next_segment, self._next_part = segment + 1, 0
            else:
                self._next_part += 1
            last = (
                final
                and self.segments_total is not None
                and self._next_segment == self.segments_total
            )
            if audio.size or final:  # an empty held-back part is no chunk
                self._track_playback(segment, part, audio.size)
                self._emit_locked(audio, last)
        if (
            not self._finished
            and self.segments_total is not None
            and self._next_segment == self.segments_total
        ):
            self._emit_locked(np.zeros(0, np.float32), True)

    def _place_words(self, words: tuple[WordTiming, ...]) -> None:
        """Queue `words` (of the segment being emitted) on the response's time line, in
        order and without overlap."""
        offset = self._segment_start / self.sample_rate
        for w in words:
            start = max(offset + w.start_s, self._words_end)
            end = max(offset + w.end_s, start)
            self._words.append(TimedWord(start, end, w.text_start, w.text_end))
            self._words_end = end

    def _played_out(self, first_audio_at: float) -> float:
        """When the audio sent so far has played out, on the listener's clock: playback from
        the first chunk (or from `listener_ends_at`, the end of the listener's earlier audio,
        if later), each underrun's gap added (`_track_playback`)."""
        begin = first_audio_at
        if self.listener_ends_at is not None:
            begin = max(begin, self.listener_ends_at)
        return begin + self.audio_samples / self.sample_rate + self.underrun_s

    def _track_playback(self, segment: int, part: int, samples: int) -> None:
        """Record a playback underrun when a chunk of `samples` goes out after the audio
        emitted before it has played out (called before `_emit_locked` counts it). The
        listener is the bench's (`voxflow.bench.timeline`): playback starts at the first
        chunk and, after a gap, resumes at the late chunk; `due` schedules continuations by
        the same clock."""
        if not samples or self.first_audio_at is None:
            return
        now = time.perf_counter()
        played_out = self._played_out(self.first_audio_at)
        if now > played_out:
            self.underruns.append((segment, part, now - played_out))

    @property
    def underrun_s(self) -> float:
        """Seconds the listener waited in underruns (0.0 without any)."""
        return sum(gap for _, _, gap in self.underruns)

    def _emit_locked(self, audio: np.ndarray, last: bool) -> None:
        if self.first_audio_at is None and audio.size:
            self.first_audio_at = time.perf_counter()
        self.audio_samples += int(audio.size)
        words, self._words = tuple(self._words), []
        chunk = AudioChunk(audio, self.sample_rate, self.id, self._next_chunk, last, words)
        self._next_chunk += 1
        if last:
            self._finished = True
            self._cancelled.set()
        self._sink(chunk, None)
