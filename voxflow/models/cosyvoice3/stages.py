"""The CosyVoice3 family's three stages (spec §9.2 on the engine contract of `voxflow.stages`).

    frontend (TextFrontendStage)  text -> segments of text ids (`TextSegment`), one per LM request
    lm (AutoregressiveStage)       one decode step at a time over the running segments; emits the
                                   speech tokens of a hop as a part (`HopSchedule`), the rest
                                   as the segment's final part
    token2wav (Stage, in_order)    per request: a `Token2WavSegment` per segment; each part's
                                   tokens plan the flow calls they trigger, the batch's solves
                                   (several requests) run bucketed (`FlowBucketRunner`), then
                                   HiFT per request; the final part runs the final (or offline)
                                   round and closes the segment

The LM emits a part exactly when the token2wav segment's own schedule would start a chunk: it
keeps a mirror of the silent-token filter and the hop schedule (spec §9.7), so each part runs
one streamed chunk downstream. With `token2wav_mode: offline`, or a segment speed other than 1,
the LM emits everything in the final part and token2wav runs the offline path.

Randomness (spec §9.6): only LM sampling is random, from a `torch.Generator` per segment seeded
from (request seed, segment index). A seeded request's LM calls run one row at a time (its
bytes never depend on batch-mates); the other segments' decode steps and the other fed
requests' calls (several positions each) run together in one batched forward
(`lm_batch.forward_rows`, each row with its own KV cache and positions). The HTTP `stream`
flag changes nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from voxflow.models.base import TextFrontendStage
from voxflow.models.cosyvoice3.bistream import BistreamError, Call
from voxflow.models.cosyvoice3.flow_bucket import FlowBucketRunner
from voxflow.models.cosyvoice3.lm import KVCache, length_limits
from voxflow.models.cosyvoice3.lm_batch import forward_rows
from voxflow.models.cosyvoice3.lm_bistream import embed_call
from voxflow.models.cosyvoice3.lm_stream import StreamedText, StreamState
from voxflow.models.cosyvoice3.sampling import (
    RasSampler,
    SilentTokenFilter,
    mask_before_min_len,
)
from voxflow.models.cosyvoice3.token2wav import HopSchedule, Token2WavJob, Token2WavSegment
from voxflow.models.cosyvoice3.voices import Voice as CosyVoice
from voxflow.stages.autoregressive import AutoregressiveStage, Step
from voxflow.stages.items import StageBatch, StageItem
from voxflow.stages.outputs import Audio, Segments
from voxflow.stages.stage import Stage
from voxflow.stages.state import HoldsRequestStates, RequestStates
from voxflow.text.document import SpeechDocument, TextRun
from voxflow.text.segment import segment_text

if TYPE_CHECKING:
    from voxflow.models.cosyvoice3.model import CosyVoice3Family


UNDETERMINED = "und"


@dataclass(frozen=True)
class TextSegment:
    """One LM request: the segment's text and its text ids, int32 [n] (n >= 1, < 151936)."""

    text: str
    ids: np.ndarray


def segment_seed(seed: int, segment: int) -> int:
    """The LM sampler's seed for one segment of a request seeded `seed` (0 <= result < 2**63)."""
    state = np.random.SeedSequence([seed, segment]).generate_state(2, np.uint32)
    return (int(state[0]) << 31 ^ int(state[1])) & (2**63 - 1)


class CosyVoice3FrontendStage(TextFrontendStage):
    """Text -> `TextSegment`s: sentences (`text/segment.py`, at most `max_segment_chars`, the
    first at most `first_segment_chars`), each tokenized with the Qwen2 BPE with special-token
    markers read as plain text (spec §11). SSML ``<phoneme>`` runs are read from their text
    (the LM takes text ids, not IPA). Logs a WARNING per request when the weights are random
    (spec §9.4)."""

    def __init__(self, family: CosyVoice3Family):
        super().__init__()
        self._family = family

    def run(self, batch: StageBatch) -> list:
        self._family.warn_random_weights(batch)
        # a request fed with text while it runs is one segment: its text comes by the feed
        return [Segments([StreamedText(item.request.text_feed)])
                if item.request.text_feed is not None else self._plan(item) for item in batch]

    def run_segments(self, item: StageItem, run: TextRun, first: bool) -> list[TextSegment]:
        s = self._family.settings
        document: SpeechDocument = item.payload
        language = document.language or item.request.language or UNDETERMINED
        lang = "en" if language == UNDETERMINED else language
        cap = s.first_segment_chars if first else None
        out = []
        for piece in segment_text(run.text, s.max_segment_chars, cap, lang=lang):
            ids = self._family.tokenizer.encode(piece, specials=False)
            if ids:
                out.append(TextSegment(piece, np.asarray(ids, np.int32)))
        return out


@dataclass
class LMSegment:
    """One segment's decode state (spec §9.7 "State", LM side).

    Attributes:
        next_input: the next forward's input embeddings, [1, L, D] (prefill) then [1, 1, D].
        cache: the segment's own KV cache.
        sampler: RAS with the segment's own generator.
        min_len, max_len: speech-token bounds (spec §5, capped by the vocoder's noise).
        tokens: every token sampled (LM context and RAS window), ids < S.
        pending: tokens not yet emitted downstream.
        schedule: mirror of token2wav's hop schedule; None on the offline path.
        silent: mirror of token2wav's silent-token filter (`filtered` counts what passes).
        stream: for a request fed with text while it runs, its bistream state (`lm_stream`);
            `next_input` is then unused (the schedule says what each call feeds).
    """

    next_input: Tensor
    cache: KVCache
    sampler: RasSampler
    min_len: int
    max_len: int
    schedule: HopSchedule | None
    silent: SilentTokenFilter = field(default_factory=SilentTokenFilter)
    tokens: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    filtered: int = 0
    stream: StreamState | None = None

    def take(self) -> np.ndarray:
        """The pending tokens as int64 [k], now emitted."""
        out, self.pending = np.asarray(self.pending, np.int64), []
        return out


class CosyVoice3LMStage(AutoregressiveStage[LMSegment]):
    """The Qwen2 LM, continuously batched (see the module docstring). Payload in:
    `TextSegment`; parts out: int64 [k] speech tokens (< S)."""

    name = "lm"

    def __init__(self, family: CosyVoice3Family):
        super().__init__(max_batch_size=family.settings.lm_max_batch_size)
        self._family = family

    def begin(self, item: StageItem) -> LMSegment:
        family, s = self._family, self._family.settings
        models = family.models
        voice: CosyVoice = family.voice_models[item.request.voice]
        text: TextSegment | StreamedText = item.payload
        device = models.device
        prompt_text: Tensor = voice.prompt_text_ids
        prompt_tokens: Tensor | None = voice.prompt_speech_tokens
        if item.request.instructions is not None:  # instruct mode (spec addendum §2.3)
            ins = family.instruct_prompts(item.request.instructions)
            prompt_text = torch.tensor(ins, dtype=torch.int64, device=device)
            prompt_tokens = None  # the LM gets none; the flow still takes the voice's
        sampler = RasSampler.from_seed(segment_seed(item.request.seed, item.segment),
                                       top_p=s.top_p, top_k=s.top_k, win_size=s.ras_win,
                                       tau_r=s.ras_tau)
        streaming = s.token2wav_mode == "streaming" and item.speed == 1.0
        schedule = (HopSchedule(models.hops, voice.prompt_tokens, models.flow.pre_lookahead_len)
                    if streaming else None)
        if isinstance(text, StreamedText):  # one generation over text still arriving
            stream = StreamState.open(
                models.lm, family.tokenizer, text.feed, prompt_text.tolist(),
                [] if prompt_tokens is None else prompt_tokens.tolist(), s.bistream_rule,
                sampler, s.bistream_text_timeout_s)
            return LMSegment(torch.empty(0), stream.decoder.cache, sampler, 0,
                             models.max_speech_tokens(item.speed), schedule, stream=stream)
        with torch.inference_mode():
            prefill = models.lm.prefill_embeds(torch.from_numpy(text.ids).to(device),
                                               prompt_text, prompt_tokens)
        min_len, max_len = length_limits(int(text.ids.size), voice.prompt_tokens)
        max_len = min(max_len, models.max_speech_tokens(item.speed))
        return LMSegment(prefill[None], KVCache(), sampler, min(min_len, max_len), max_len,
                         schedule)

    @torch.inference_mode()
    def step(self, batch: StageBatch, states: Sequence[LMSegment]) -> list[Step | BaseException]:
        lm = self._family.models.lm
        logits: dict[int, Tensor] = {}
        together: list[int] = []  # one batched forward (`forward_rows`), each its own cache
        chunks: dict[int, Tensor] = {}
        calls: dict[int, Call] = {}
        results: dict[int, Step | BaseException] = {}
        for i, (item, state) in enumerate(zip(batch, states, strict=True)):
            stream = state.stream
            if stream is not None:  # fed text: its schedule's next call, if any
                call = None if stream.stalled else stream.schedule.next_call()
                if call is None or item.request.seeded:
                    results[i] = self._stream_step(state)  # alone: seeded bytes never
                    continue  # depend on batch-mates (or nothing to run)
                calls[i], chunks[i] = call, embed_call(lm, call)[0]
                together.append(i)
            elif state.max_len <= 0:
                continue  # nothing to say (noise cap)
            elif batch.step[i] == 0 or item.request.seeded:
                logits[i] = lm(state.next_input, state.cache)[0][0]  # alone: prefill, or seeded
            else:
                chunks[i] = state.next_input[0]
                together.append(i)
        if together:
            rows = forward_rows(lm, [chunks[i] for i in together],
                                [states[i].cache for i in together])[0]
            logits.update(zip(together, rows, strict=True))
        for i, call in calls.items():
            results[i] = self._stream_finish(states[i], call, logits.pop(i))
        return [results[i] if i in results else self._choose(state, logits.get(i))
                for i, state in enumerate(states)]

    def ready(self, state: LMSegment) -> bool:
        """A request fed with text is parked while its schedule waits for text (`lm_stream`)."""
        return state.stream is None or state.stream.ready()

    def nbytes(self, state: LMSegment) -> int:
        """The segment's KV cache and next input embeddings, in bytes."""
        cache = state.cache
        tensors = [*list(cache.keys), *list(cache.values), state.next_input]
        return sum(t.numel() * t.element_size() for t in tensors)

    def _choose(self, state: LMSegment, logits: Tensor | None) -> Step:
        """Sample the segment's next token from `logits` [V] and decide what it emits."""
        if logits is None:
            return Step(emit=state.take(), done=True)
        models = self._family.models
        size = models.lm.speech_token_size
        scores = torch.log_softmax(logits.float(), dim=-1).cpu()
        if len(state.tokens) < state.min_len:
            mask_before_min_len(scores, size, self._family.settings.min_len_rule)
        token = state.sampler(scores, state.tokens)
        if token >= size:  # a stop id: never passed on
            return Step(emit=state.take(), done=True)
        self._accept(state, token)
        ids = torch.tensor([token], device=models.device)
        state.next_input = models.lm.embed_speech(ids).reshape(1, 1, -1)
        return self._emission(state)

    @staticmethod
    def _accept(state: LMSegment, token: int) -> None:
        state.tokens.append(token)
        state.pending.append(token)
        state.filtered += state.silent.accept(token)

    @staticmethod
    def _emission(state: LMSegment, done: bool = False) -> Step:
        """The step's part: everything pending when done or at max_len, a hop when one is
        due (`HopSchedule`), else nothing yet."""
        if done or len(state.tokens) >= state.max_len:
            return Step(emit=state.take(), done=True)
        if state.schedule is not None and state.schedule.due(state.filtered):
            state.schedule.advance()
            return Step(emit=state.take())
        return Step()

    def _stream_step(self, state: LMSegment) -> Step | BaseException:
        """One call of a fed request's bistream schedule, run alone (or none while it waits)."""
        stream = state.stream
        assert stream is not None
        if stream.stalled:
            return stream.stall_error()
        try:
            result = stream.decoder.step()
        except BistreamError as exc:  # the reference rule's error (Q5): this request fails
            return exc
        if result is not None and result.token is not None:
            self._accept(state, result.token)
        return self._emission(state, done=stream.schedule.done)

    def _stream_finish(self, state: LMSegment, call: Call, logits: Tensor) -> Step | BaseException:
        """Decide a fed call that ran as a row of the batched forward (its cache grown)."""
        stream = state.stream
        assert stream is not None
        try:
            result = stream.decoder.finish(call, logits)
        except BistreamError as exc:
            return exc
        if result.token is not None:
            self._accept(state, result.token)
        return self._emission(state, done=stream.schedule.done)


@dataclass
class _Stream:
    """A request's token2wav state: the segment being vocoded (None between segments)."""

    segment: Token2WavSegment | None = None
    index: int = -1


class CosyVoice3Token2WavStage(HoldsRequestStates, Stage):
    """Flow + HiFT per request, in order (spec §9.7), flow solves batched across requests.

    A part's tokens go to its segment's `Token2WavSegment`, which plans the flow calls they
    make due (`Token2WavSegment.plan`); the solves of every item in the batch (one item per
    request) run together through the bucketed flow (`FlowBucketRunner`: per frame bucket, up
    to `flow_max_batch_size` rows a call, replayed as CUDA graphs where captured, eager
    otherwise); then HiFT runs per request on its own mels and the pieces come out as one
    `Audio` per item (24 kHz float32). State per request, released when it ends.

    `stats` and `graphs` are the runner's (`voxflow_bucket_calls_total`,
    `voxflow_graph_runs_total`, /health "flow_graphs").
    """

    name = "token2wav"
    in_order = True

    def __init__(self, family: CosyVoice3Family):
        s = family.settings
        super().__init__(max_batch_size=s.flow_max_batch_size, workers=1)
        self._family = family
        self.states: RequestStates[_Stream] = RequestStates(lambda request_id: _Stream())
        self.flow = FlowBucketRunner(
            family.models.flow, s.flow_capture_frame_buckets, s.flow_capture_batch_sizes,
            s.flow_max_batch_size, s.flow_capture_batch_frames, s.capture_enabled,
            str(family.models.device))
        self.stats = self.flow.stats
        self.graphs = self.flow.graphs

    def start(self) -> None:
        """Capture the flow's (rows, frame bucket) shapes (CUDA), or record why not.

        Raises:
            RuntimeError: `require_graphs` is set and a shape was not captured.
        """
        self.flow.start()
        failed = sorted({v for v in self.graphs.status.values() if v != "captured"})
        if self._family.settings.require_graphs and failed:
            raise RuntimeError(f"model {self._family.name}: require_graphs is set but flow "
                               f"graph capture failed: {failed[0]}")

    def run(self, batch: StageBatch) -> list:
        with torch.inference_mode():
            plans: list[tuple[Token2WavSegment, list[Token2WavJob]] | BaseException] = []
            for item in batch:
                try:
                    plans.append(self._plan(item))
                except Exception as exc:  # noqa: BLE001 (this item fails, not its batch-mates)
                    plans.append(exc)
            solves = [job.solve for plan in plans if not isinstance(plan, BaseException)
                      for job in plan[1] if job.solve is not None and not job.cached]
            try:
                mels = iter(self.flow.solve(solves))
            except Exception as exc:  # noqa: BLE001 (the segments with solves fail, not the rest)
                return [self._without_flow(item, plan, exc) for item, plan in zip(batch, plans,
                                                                                 strict=True)]
            out: list = []
            for item, plan in zip(batch, plans, strict=True):
                if isinstance(plan, BaseException):
                    out.append(plan)
                    continue
                segment, jobs = plan
                batched = [None if job.solve is None or job.cached else next(mels)
                           for job in jobs]
                try:  # a cached chunk is solved by its segment alone (`flow_settled_cache`)
                    own = [segment.solve_cached(job) if job.cached else mel
                           for job, mel in zip(jobs, batched, strict=True)]
                except Exception as exc:  # noqa: BLE001 (this item fails, not its batch-mates)
                    out.append(self._without_flow(item, plan, exc))  # its segment dropped
                    continue
                out.append(self._audio(segment.complete(jobs, own)))
            return out

    def _open(self, item: StageItem) -> Token2WavSegment:
        family = self._family
        models = family.models
        return Token2WavSegment(models.flow, models.hift, family.flow_prompt(item.request.voice),
                                models.hops, mode=family.settings.token2wav_mode,
                                speed=item.speed,
                                flow_cache=family.flow_cache(item.request.text_feed is not None))

    def _plan(self, item: StageItem) -> tuple[Token2WavSegment, list[Token2WavJob]]:
        """The item's segment and the flow calls its tokens make due (schedule advanced)."""
        stream = self.states.get_or_create(item.request.request_id)
        if stream.segment is None or stream.index != item.segment:
            stream.segment, stream.index = self._open(item), item.segment
        segment = stream.segment
        jobs = segment.plan((int(t) for t in item.payload), final=item.final)
        if item.final:
            stream.segment = None
        return segment, jobs

    def _without_flow(self, item: StageItem,
                      plan: tuple[Token2WavSegment, list[Token2WavJob]] | BaseException,
                      exc: BaseException) -> Audio | BaseException:
        """An item's output when the batch's flow call raised `exc`: its own planning error,
        `exc` if it had solves (its segment is dropped: its schedule already moved on), else
        its (empty) pieces."""
        if isinstance(plan, BaseException):
            return plan
        segment, jobs = plan
        if any(job.solve is not None for job in jobs):
            if item.request.request_id in self.states:
                stream = self.states.get_or_create(item.request.request_id)
                if stream.segment is segment:
                    stream.segment = None
            return exc
        return self._audio(segment.complete(jobs, [None] * len(jobs)))

    @staticmethod
    def _audio(pieces: list[Tensor]) -> Audio:
        if not pieces:
            return Audio.empty()
        audio = torch.cat(pieces, dim=1)[0]  # [n] float32, 24 kHz
        return Audio(audio.float().cpu().numpy())

    def health(self) -> dict:
        return {"flow_graphs": self.flow.health()}

    def state_bytes(self) -> int:
        """Bytes of every open segment's accumulated mel (HiFT's input, 80 x F float32) and
        settled-frame flow cache (`flow_settled_cache`)."""
        total = 0
        for stream in self.states.values():
            segment = stream.segment
            if segment is None:
                continue
            mel = segment.acc_mel
            if mel is not None:
                total += mel.numel() * mel.element_size()
            total += segment.cache_bytes
        return total
