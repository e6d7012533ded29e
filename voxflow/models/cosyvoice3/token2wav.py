"""CosyVoice3 token-to-wave loop, per segment (spec §9.7 streaming protocol, §9.6, §1 item 10).

Speech tokens (25 Hz, ids < S) → flow → mel (80 bins, 50 fps, float32 [1, 80, F], ln-magnitude)
→ HiFT → 24 kHz mono float32 pieces [1, n] in ±0.99, 480 samples per mel frame.

Two paths, chosen per segment by `token2wav_mode` or by speed ≠ 1, never by the HTTP `stream`
flag (spec §9.6):

- **streaming** (`Token2WavSegment(..., mode="streaming")`): tokens arrive one by one (`push`);
  whenever `len(tokens) − offset ≥ this_hop + 3` the flow reruns on the token prefix plus the 3
  lookahead tokens (chunk-causal attention, not final), the new mel frames are appended to
  `acc_mel` and HiFT runs (not final) on a window of it that reaches back
  `hift.DECODER_CONTEXT_FRAMES` before its first new sample (the reference reruns the whole
  `acc_mel`; the pieces agree up to float rounding, `hift.HiFTStream`), emitting up to its
  8-frame hold-back. `finish` runs any triggers still met, then the flow on all tokens (final, full
  attention) and HiFT final, emitting the rest. See `HopSchedule` for the hop sizes.
- **offline** (`mode="offline"`, or any speed ≠ 1): `finish` makes one full-attention flow call
  on all tokens, resamples the mel to ⌊F/speed⌋ frames when speed ≠ 1 (`resample_mel`) and makes
  one HiFT final call (spec §9.7 item 5).

Both paths keep their state per segment (`Token2WavSegment`): the silent-token-filtered tokens,
the token offset, the hop (the reference mutates one shared hop and never resets it; here each
segment starts from `token_hop_len`), `acc_mel` and the samples emitted (`HiFTStream`). The flow
and HiFT modules are shared and stateless between calls.

Every flow/HiFT round is recorded as a `Token2WavCall` (`Token2WavSegment.calls`), with the same
fields as the reference trace in `token2wav_tiny_meta.json`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT
from voxflow.models.cosyvoice3.flow_bucket import FlowSolve
from voxflow.models.cosyvoice3.flow_cache import SettledFlowCache, solve_streamed_chunk
from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator, HiFTStream
from voxflow.models.cosyvoice3.sampling import SilentTokenFilter

Token2WavMode = Literal["streaming", "offline"]
"""`token2wav_mode` (spec §9.3): the streamed schedule of §9.7, or one offline flow call."""

TOKEN2WAV_MODES: tuple[Token2WavMode, ...] = ("streaming", "offline")

TOKEN_HOP_LEN = 25
"""First (base) hop in tokens at full size (spec §9.3; = `static_chunk_size` 50 frames / 2)."""
TOKEN_MAX_HOP_LEN = 100
"""Largest hop in tokens at full size (spec §9.3)."""
STREAM_SCALE_FACTOR = 2
"""The base hop is multiplied by this after each chunk, up to the max hop (spec §9.7 3.4)."""


@dataclass(frozen=True)
class Token2WavConfig:
    """Hop settings (spec §9.3): tokens, 25 Hz. Immutable; the changing hop lives per segment in
    `HopSchedule`. Defaults are full size; `tiny()` matches the tiny flow's 10-frame chunk."""

    token_hop_len: int = TOKEN_HOP_LEN
    token_max_hop_len: int = TOKEN_MAX_HOP_LEN
    stream_scale_factor: int = STREAM_SCALE_FACTOR

    def __post_init__(self) -> None:
        if self.token_hop_len < 1:
            raise ValueError(f"token_hop_len must be >= 1, got {self.token_hop_len}")
        if self.token_max_hop_len < self.token_hop_len:
            raise ValueError(f"token_max_hop_len ({self.token_max_hop_len}) must be >= "
                             f"token_hop_len ({self.token_hop_len})")
        if self.stream_scale_factor < 1:
            raise ValueError(f"stream_scale_factor must be >= 1, got {self.stream_scale_factor}")

    @classmethod
    def tiny(cls) -> Token2WavConfig:
        """The tiny fixture's hops (fixture README §4): 5, up to 20, doubling."""
        return cls(token_hop_len=5, token_max_hop_len=20)

    def check_flow(self, flow: CausalMaskedDiffWithDiT) -> None:
        """Refuse a hop that is not half the flow's streaming chunk (spec §9.3): with
        `token_hop_len` · `token_mel_ratio` = `static_chunk_size`, P + offset stays chunk-aligned
        and a streamed prefix repeats exactly across calls (spec §6 "Streaming property")."""
        chunk = flow.config.static_chunk_size
        ratio = flow.config.token_mel_ratio
        if self.token_hop_len * ratio != chunk:
            raise ValueError(f"token_hop_len {self.token_hop_len} must be static_chunk_size/"
                             f"{ratio} = {chunk / ratio:g} for this flow")


@dataclass
class HopSchedule:
    """The per-segment hop state machine of spec §9.7 (items 1, 2, 3.4), no model calls.

    `prompt_tokens` = P. pad = ⌈P/hop⌉·hop − P; the first hop is `token_hop_len` + pad (so
    P + offset stays chunk-aligned), then the base hop grows ×`stream_scale_factor` up to
    `token_max_hop_len`: full size 25+pad, 50, 100, 100, …; tiny (P=7) 8, 10, 20, 20, ….
    A chunk is due when `n_tokens − offset ≥ this_hop + lookahead` (lookahead = 3 tokens).
    """

    config: Token2WavConfig
    prompt_tokens: int
    lookahead: int = 3
    offset: int = 0
    """Tokens whose mel has been appended to `acc_mel` (tokens, not frames)."""
    hop: int = field(init=False)
    """The base hop (tokens) for the next chunk after the first."""
    pad: int = field(init=False)
    """Extra tokens of the first hop (0 ≤ pad < token_hop_len)."""

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be >= 0, got {self.prompt_tokens}")
        base = self.config.token_hop_len
        self.hop = base
        self.pad = math.ceil(self.prompt_tokens / base) * base - self.prompt_tokens

    @property
    def this_hop(self) -> int:
        """Tokens the next chunk settles: hop + pad for the first chunk, hop after."""
        return self.hop + self.pad if self.offset == 0 else self.hop

    def due(self, n_tokens: int) -> bool:
        """Whether `n_tokens` filtered tokens meet the trigger (spec §9.7 item 2)."""
        return n_tokens - self.offset >= self.this_hop + self.lookahead

    def take_due(self, n_tokens: int) -> list[tuple[int, int, int]]:
        """Every chunk `n_tokens` filtered tokens make due, in order, advancing past each:
        (tokens the flow call gets, lookahead included; offset before it; its hop)."""
        chunks = []
        while self.due(n_tokens):
            offset, hop = self.offset, self.this_hop
            chunks.append((offset + hop + self.lookahead, offset, hop))
            self.advance()
        return chunks

    def advance(self) -> int:
        """After a chunk: offset += this_hop; hop = min(max, hop · scale). Returns the old
        this_hop (the chunk's hop)."""
        done = self.this_hop
        self.offset += done
        self.hop = min(self.config.token_max_hop_len, self.hop * self.config.stream_scale_factor)
        return done


@dataclass(frozen=True)
class FlowPrompt:
    """The flow's share of a voice (spec §9.5), batch 1, on the models' device.

    prompt_token [1, P] int (ids < S, 25 Hz); prompt_feat [1, 2P, 80] float32 (channels last,
    50 fps, ln-magnitude mel); embedding [1, 192] float32 (raw speaker vector; the flow
    L2-normalises it).
    """

    prompt_token: Tensor
    prompt_feat: Tensor
    embedding: Tensor

    def __post_init__(self) -> None:
        if self.prompt_token.dim() != 2 or self.prompt_token.shape[0] != 1:
            raise ValueError(f"prompt_token must be [1, P], got {list(self.prompt_token.shape)}")
        p = self.prompt_token.shape[1]
        if self.prompt_feat.dim() != 3 or self.prompt_feat.shape[:2] != (1, 2 * p):
            raise ValueError(f"prompt_feat must be [1, 2P={2 * p}, 80], got "
                             f"{list(self.prompt_feat.shape)}")
        if self.embedding.dim() != 2 or self.embedding.shape[0] != 1:
            raise ValueError(f"embedding must be [1, 192], got {list(self.embedding.shape)}")

    @property
    def tokens(self) -> int:
        """P, prompt tokens."""
        return int(self.prompt_token.shape[1])


@dataclass(frozen=True)
class Token2WavCall:
    """One flow + HiFT round, as the reference trace records it (`token2wav_tiny_meta.json`).

    n_tokens: target tokens given to the flow (prefix + lookahead, or all); token_offset: tokens
    already settled before the call; hop: tokens this chunk settles (None for final and offline
    calls); stream: chunk-causal flow attention; finalize: final flow and HiFT call;
    acc_mel_frames: accumulated mel frames after appending (offline: before any speed resample);
    vocoded_frames: mel frames of the window HiFT ran on (`HiFTStream`; the reference's are all
    of acc_mel); emitted: samples returned by this call;
    speech_offset_after: samples emitted by the segment so far (24 kHz).
    """

    n_tokens: int
    token_offset: int
    hop: int | None
    stream: bool
    finalize: bool
    acc_mel_frames: int
    vocoded_frames: int
    emitted: int
    speech_offset_after: int

    def as_reference(self) -> dict[str, int | bool]:
        """The fields of the reference trace entries, under their names there."""
        return {
            "n_tokens": self.n_tokens,
            "token_offset": self.token_offset,
            "stream": self.stream,
            "finalize": self.finalize,
            "acc_mel_frames": self.acc_mel_frames,
            "speech_offset_after": self.speech_offset_after,
            "emitted": self.emitted,
        }


JobKind = Literal["chunk", "final", "offline"]
"""A planned flow call: a streamed chunk (§9.7 item 3), the final call (4) or offline (5)."""


@dataclass(frozen=True)
class Token2WavJob:
    """One flow call a segment planned (`Token2WavSegment.plan`), waiting for its mel.

    kind: which call; n_tokens: target tokens given to the flow; token_offset: tokens settled
    before the call; hop: tokens a chunk settles (None otherwise); solve: the flow inputs
    (`FlowSolve`: conditioning of T mel frames, streaming flag), None when there are no tokens
    (the call then gives an empty piece [1, 0]); cached: a streamed chunk its segment solves
    against its `SettledFlowCache` (`Token2WavSegment.solve_cached`), never in a batch.
    """

    kind: JobKind
    n_tokens: int
    token_offset: int
    hop: int | None
    solve: FlowSolve | None
    cached: bool = False


def resample_mel(mel: Tensor, speed: float) -> Tensor:
    """Speed change on the mel (spec §9.7 item 5): [B, 80, T] → [B, 80, ⌊T/speed⌋], linear,
    align_corners False (output frame i reads source position (i + ½)·T/n − ½, clamped at 0).
    speed 1 returns `mel` unchanged."""
    if not speed > 0 or not math.isfinite(speed):
        raise ValueError(f"speed must be a positive number, got {speed}")
    if speed == 1.0:
        return mel
    frames = int(mel.shape[-1] / speed)
    if frames == 0:
        return mel[:, :, :0]
    return F.interpolate(mel, size=frames, mode="linear", align_corners=False)


class Token2WavSegment:
    """One segment's token → wave state (spec §9.7); create one per segment, never share.

    `push` takes LM tokens (applying the silent-token filter of spec §5 unless told not to)
    and returns the audio pieces the streaming triggers produce; `finish` (LM done) returns the
    rest. Pieces are float32 [1, n] on the models' device, 24 kHz; concatenated they are the
    segment's audio: streaming 480·(acc mel frames) samples; offline 480·⌊2N/speed⌋.
    An empty segment (no tokens) gives [1, 0] (silence, not an error; spec §11).
    """

    def __init__(
        self,
        flow: CausalMaskedDiffWithDiT,
        hift: CausalHiFTGenerator,
        prompt: FlowPrompt,
        config: Token2WavConfig | None = None,
        *,
        mode: Token2WavMode = "streaming",
        speed: float = 1.0,
        filter_silent: bool = True,
        flow_cache: bool = False,
    ) -> None:
        if mode not in TOKEN2WAV_MODES:
            raise ValueError(f"mode must be one of {TOKEN2WAV_MODES}, got {mode!r}")
        if not speed > 0 or not math.isfinite(speed):
            raise ValueError(f"speed must be a positive number, got {speed}")
        self.flow = flow
        self.hift = hift
        self.prompt = prompt
        self.config = config or Token2WavConfig()
        self.config.check_flow(flow)
        self.speed = float(speed)
        # spec §9.6 / §11: speed ≠ 1 is only applied offline.
        self.mode: Token2WavMode = "offline" if self.speed != 1.0 else mode
        self.silent_filter = SilentTokenFilter() if filter_silent else None
        self.tokens: list[int] = []
        """Filtered tokens (ids < S), in order."""
        self.schedule = HopSchedule(self.config, prompt.tokens, flow.pre_lookahead_len)
        self.stream = HiFTStream(hift)
        self.calls: list[Token2WavCall] = []
        self.finished = False
        self.flow_cache = (SettledFlowCache(flow.decoder.estimator)
                           if flow_cache and self.mode == "streaming" else None)
        """The settled frames' DiT keys and values (`flow_settled_cache`), or None."""
        self._offline_mel: Tensor | None = None

    # -- state ----------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """Settled tokens (spec §9.7 `offset`)."""
        return self.schedule.offset

    @property
    def acc_mel(self) -> Tensor | None:
        """Accumulated flow mel [1, 80, F] float32 (50 fps), or None before the first call.
        Streaming: what HiFT last ran on. Offline: the flow's mel before any speed resample."""
        return self.stream.mel if self.mode == "streaming" else self._offline_mel

    @property
    def speech_offset(self) -> int:
        """Samples emitted so far (24 kHz)."""
        return self.stream.speech_offset

    # -- driving --------------------------------------------------------------------------

    def push(self, tokens: int | Iterable[int]) -> list[Tensor]:
        """Add LM tokens (ids in [0, S)); returns the pieces [1, n] of every chunk now due
        (usually 0 or 1). Raises ValueError for an id outside [0, S), e.g. a stop id."""
        jobs = self.plan(tokens, final=False)
        return self.complete(jobs, self.solve_eagerly(jobs))

    def finish(self) -> list[Tensor]:
        """LM done: the remaining pieces (chunks still due, then the final one)."""
        jobs = self.plan((), final=True)
        return self.complete(jobs, self.solve_eagerly(jobs))

    def plan(self, tokens: int | Iterable[int], final: bool) -> list[Token2WavJob]:
        """Add LM tokens and plan the flow calls they make due, without solving them: the
        chunks now due (streaming), then, when `final`, the final (or offline) call. The hop
        schedule advances here; `complete` must get these jobs' mels next, in order.

        Raises:
            RuntimeError: the segment is finished.
            ValueError: an id outside [0, S), e.g. a stop id.
        """
        if self.finished:
            raise RuntimeError("this token2wav segment is already finished")
        vocab = self.flow.config.vocab_size
        for value in [tokens] if isinstance(tokens, int) else tokens:
            token = int(value)
            if not 0 <= token < vocab:
                raise ValueError(f"speech token {token} is outside [0, {vocab}) (stop ids end "
                                 "the segment and never reach token2wav)")
            if self.silent_filter is None or self.silent_filter.accept(token):
                self.tokens.append(token)
        jobs: list[Token2WavJob] = []
        if self.mode == "streaming":
            jobs += [self._job("chunk", n, offset, hop)
                     for n, offset, hop in self.schedule.take_due(len(self.tokens))]
        if final:
            kind: JobKind = "final" if self.mode == "streaming" else "offline"
            jobs.append(self._job(kind, len(self.tokens), self.schedule.offset, None))
            self.finished = True
        return jobs

    def complete(self, jobs: Sequence[Token2WavJob], mels: Sequence[Tensor | None]
                 ) -> list[Tensor]:
        """The pieces [1, n] of `jobs` (from `plan`, in order) given their flow mels
        (float32 [1, 80, frames], `None` for an empty segment's job): HiFT per job, as
        `push`/`finish` do."""
        pieces: list[Tensor] = []
        for job, mel in zip(jobs, mels, strict=True):
            if mel is None:
                pieces.append(self._empty())
            elif job.kind == "chunk":
                pieces.append(self._chunk(job, mel))
            elif job.kind == "final":
                pieces.append(self._final(job, mel))
            else:
                pieces.append(self._offline(job, mel))
        return pieces

    def solve_eagerly(self, jobs: Sequence[Token2WavJob]) -> list[Tensor | None]:
        """The jobs' mels from the unbatched, eager flow (`CausalMaskedDiffWithDiT.inference`
        semantics): float32 [1, 80, frames] each, None for an empty job."""
        mels: list[Tensor | None] = []
        for job in jobs:
            if job.solve is None:
                mels.append(None)
                continue
            if job.cached:
                mels.append(self.solve_cached(job))
                continue
            c = job.solve.cond
            with torch.inference_mode():
                feat = self.flow.decoder(c.mu, c.mask, c.spks, c.cond,
                                         streaming=job.solve.streaming)
            mels.append(feat[:, :, c.prompt_frames:].float())
        return mels

    def solve_cached(self, job: Token2WavJob) -> Tensor:
        """A cached chunk job's new mel frames float32 [1, 80, 2·hop]: the frames from
        2·(P + offset) of the streamed solve of its prefix, computed for the frames after the
        cache's settled ones only (`flow_cache.solve_streamed_chunk`)."""
        assert self.flow_cache is not None and job.solve is not None and job.cached
        c = job.solve.cond
        start = self.flow_cache.settled
        with torch.inference_mode():
            mel = solve_streamed_chunk(self.flow.decoder, c, self.flow_cache)
        first = c.prompt_frames + self.flow.token_mel_ratio * job.token_offset
        return mel[:, :, first - start :].float()

    @property
    def cache_bytes(self) -> int:
        """Bytes the segment's settled-frame flow cache holds (0 without one)."""
        return 0 if self.flow_cache is None else self.flow_cache.nbytes

    # -- model calls ----------------------------------------------------------------------

    def _job(self, kind: JobKind, n_tokens: int, offset: int, hop: int | None) -> Token2WavJob:
        """A planned call on the first `n_tokens` tokens (no solve when there are none)."""
        if n_tokens == 0:
            return Token2WavJob(kind, n_tokens, offset, hop, None)
        p = self.prompt
        device = p.prompt_token.device
        token = torch.tensor([self.tokens[:n_tokens]], dtype=torch.int32, device=device)
        finalize = kind != "chunk"
        with torch.inference_mode():
            cond = self.flow.conditioning(token, p.prompt_token, p.prompt_feat, p.embedding,
                                          finalize)
        cached = kind == "chunk" and self.flow_cache is not None
        return Token2WavJob(kind, n_tokens, offset, hop, FlowSolve(cond, kind == "chunk"),
                            cached)

    def _record(self, n_tokens: int, offset: int, hop: int | None, stream: bool,
                finalize: bool, acc_frames: int, vocoded: int, piece: Tensor) -> None:
        self.calls.append(Token2WavCall(
            n_tokens=n_tokens, token_offset=offset, hop=hop, stream=stream, finalize=finalize,
            acc_mel_frames=acc_frames, vocoded_frames=vocoded, emitted=int(piece.shape[-1]),
            speech_offset_after=self.stream.speech_offset,
        ))

    def _chunk(self, job: Token2WavJob, mel: Tensor) -> Tensor:
        """Spec §9.7 item 3: flow(tokens[:offset + this_hop + 3], streaming, not final); append
        mel frames [2·offset, end); HiFT on (a window of) acc_mel, not final; emit the new
        samples."""
        offset = job.token_offset
        new = mel if job.cached else mel[:, :, self.flow.token_mel_ratio * offset:]
        piece = self.stream.push(new, finalize=False)
        frames = self._acc_frames()
        self._record(job.n_tokens, offset, job.hop, True, False, frames,
                     self.stream.window_frames, piece)
        return piece

    def _final(self, job: Token2WavJob, mel: Tensor) -> Tensor:
        """Spec §9.7 item 4: flow on all tokens, final, full attention; append frames
        [2·offset, end); HiFT final; emit the rest."""
        offset = job.token_offset
        self.flow_cache = None  # full attention: the final call recomputed every frame
        piece = self.stream.push(mel[:, :, self.flow.token_mel_ratio * offset:], finalize=True)
        frames = self._acc_frames()
        self._record(job.n_tokens, offset, None, False, True, frames, self.stream.window_frames,
                     piece)
        return piece

    def _offline(self, job: Token2WavJob, mel: Tensor) -> Tensor:
        """Spec §9.7 item 5: one full-attention final flow call, the speed resample, one HiFT
        final call."""
        self._offline_mel = mel
        vocoded = resample_mel(mel, self.speed)
        if vocoded.shape[-1] == 0:
            return self._empty()
        piece = self.stream.push(vocoded, finalize=True)
        self._record(job.n_tokens, 0, None, False, True, int(mel.shape[-1]),
                     int(vocoded.shape[-1]), piece)
        return piece

    def _acc_frames(self) -> int:
        return 0 if self.stream.mel is None else int(self.stream.mel.shape[-1])

    def _empty(self) -> Tensor:
        return torch.zeros(1, 0, device=self.prompt.prompt_token.device, dtype=torch.float32)
