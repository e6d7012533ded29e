"""The bistream schedule: which LM inputs to feed, and when, while the target text still arrives.

Spec: `../shared/specs/cosyvoice3-instruct-bistream.md` §4 (the reference algorithm,
`Qwen2LM.inference_bistream`), §5 (its defects Q1-Q6 and voxflow's `corrected` rule), §10 (tests).
Pure bookkeeping, no torch: it says what each LM call feeds and how its output is decided; the
caller runs the network (`lm_bistream.BistreamDecoder`) and reports each decision back.

Terms (ids are ints; S = speech_token_size):
- head: the prompt text up to and including its first ``<|endofprompt|>`` (SYS ⧺ EOP zero-shot,
  INS ⧺ EOP instruct); T: the rest of the prompt text (the transcript; empty in instruct mode);
  X: the target text ids in arrival order; C = T ⧺ X; p: the P prompt speech tokens; y: the
  generated ids, `out` in the reference (fills counted, so a call's decision is y[|out|]).
- The mix ratio (5 text ids, 15 speech ids) is the training format's group
  (`examples/libritts/cosyvoice3/conf/cosyvoice3.yaml`; addendum §1 and §4 "Training format").

The reference (§4), as a state machine fed one text id per pull:
1. pending = [sos] ⧺ head; text_cache = T; next_fill = (⌊P/15⌋+1)·15 − P.
2. Each pulled id joins text_cache. While prompt tokens remain and text_cache holds ≥ 5 ids,
   5 ids then the next ≤ 15 prompt tokens join pending; with prompt tokens left, pull again.
3. If the last decision was fill, 5 cached ids are needed (else pull again); they *replace*
   pending. Then calls run: feed pending; at |out| = next_fill the decision is a forced fill
   (next_fill += 16), otherwise sampled with only sos masked (a sampled fill sets
   next_fill = |out| + 16). A fill ends the run of calls (neither yielded nor fed); another id
   ≥ S is an error; a speech id is yielded and is the next pending.
4. At end of text: pending ⧺ text_cache ⧺ [task_id] is fed, then calls with nothing masked until
   eos; fill or any other id ≥ S is an error. No length limit.

`corrected` (the default, §5) changes: Q1 unconsumed prompt tokens are fed after task_id, not
dropped; Q2/Q3 when no partial prompt group is open (P mod 15 = 0, instruct's P = 0 included)
the first decode waits for 5 target ids; Q4 nothing is fed twice (a forced fill needs no call:
its token is fed with the next text group); Q5 the mixed phase may only choose speech or fill and
the final phase speech or eos (`mask_kind`); Q6 the final phase stops once the speech tokens reach
min(20·|X|, 7500 − P). The model choosing fill itself ends a group early, as in the reference.
A corrected generation also takes at most `max_text_ids` target ids: at the first group boundary
past them (`full`) its caller ends the text there (`close_text`) and speaks the rest in a new
generation (roll-over; the reference has no limit).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

BistreamRule = Literal["corrected", "reference"]
BISTREAM_RULES: tuple[BistreamRule, ...] = ("corrected", "reference")

MIX_TEXT = 5
"""Text ids per group (`mix_ratio[0]`, addendum §1)."""
MIX_SPEECH = 15
"""Speech ids per group (`mix_ratio[1]`, addendum §1)."""
MAX_TOKEN_TEXT_RATIO = 20
"""The final phase's cap, 20 speech tokens per target id (`corrected` Q6; cosyvoice3.md §5)."""
MAX_TOTAL_SPEECH_TOKENS = 7500
"""Prompt + generated tokens fit the 15,000-frame flow noise (cosyvoice3.md §11; Q6)."""
ROLL_OVER_TOKENS_PER_ID = 10
"""A `corrected` generation takes at most (7500 − P) / 10 target ids (`max_text_ids`), then ends
its text at the next group boundary (`full`, `close_text`): the rest goes to a new generation
(roll-over, `lm_stream.StreamState.roll_over`). The mixed phase yields at most 15 tokens per 5
ids while speech takes about 5–7 tokens per id (addendum §7), so the final phase speaks the
backlog; 10 per id leaves it room under the 7500 − P cap, and keeps the mixed phase (≤ 3 per id)
far below that cap, which would otherwise end a generation with text fed but never spoken."""
ENDOFPROMPT_ID = 151646
"""``<|endofprompt|>``: the prompt text is cut after its first one (addendum §4 step 1)."""

# fed-position sources, the fixture's `fed.src` codes
SRC_SOS, SRC_HEAD, SRC_T, SRC_X, SRC_TASK, SRC_P, SRC_Y = range(7)
TABLE_SPEECH, TABLE_TEXT = 0, 1
"""Embedding tables: `speech_embedding` (speech ids and specials), the Qwen2 text table."""

Phase = Literal["mixed", "final"]
MaskKind = Literal["sos", "none", "speech_or_fill", "speech_or_eos"]
"""What a sampled decision may not choose (`mask_kind`): ``sos`` only id S (the reference's
mixed phase); ``none`` (the reference's final phase); ``speech_or_fill``/``speech_or_eos``: every
id ≥ S but fill/eos (the corrected phases, Q5)."""


class Fed(NamedTuple):
    """One LM input position: its table, its id there, and where it came from (the fixture's
    `fed.src` code, `SRC_*`, and the index within that source, `fed.src_index`)."""

    table: int
    id: int
    src: int
    src_index: int


@dataclass(frozen=True)
class Call:
    """One LM forward: feed `feed` (after the cache), then decide one id.

    Attributes:
        feed: the positions, in order (≥ 1).
        forced_fill: the decision is fill whatever the logits (the reference's forced fill).
        phase: ``mixed`` while text may still arrive, ``final`` after its end.
        mask: the ids a sampled decision may not choose (`MaskKind`).
    """

    feed: tuple[Fed, ...]
    forced_fill: bool
    phase: Phase
    mask: MaskKind


class BistreamError(ValueError):
    """A decision the phase does not allow (the reference's ``should not get token N``)."""


@dataclass
class BistreamSchedule:
    """One bistream request's schedule (see the module docstring).

    Use: `push` text ids as they arrive and `end` once; loop ``call = next_call()``: None means
    wait for text (or `done`); otherwise run the LM on `call.feed` and `record` the decided id.

    Args:
        prompt_text: zero-shot SYS ⧺ EOP ⧺ T, or instruct INS ⧺ EOP (must hold EOP).
        prompt_tokens: the P prompt speech tokens for the LM (none in instruct mode).
        speech_token_size: S (sos S, eos S+1, task_id S+2, fill S+3).
        rule: `corrected` (default) or `reference`.
    Raises:
        ValueError: the prompt text has no ``<|endofprompt|>`` (the reference asserts it).
    """

    prompt_text: Sequence[int]
    prompt_tokens: Sequence[int]
    speech_token_size: int
    rule: BistreamRule = "corrected"
    pending: list[Fed] = field(init=False)
    text_cache: list[Fed] = field(init=False)
    prompt_left: list[Fed] = field(init=False)
    out: list[int] = field(init=False, default_factory=list)
    tokens: list[int] = field(init=False, default_factory=list)
    pulls: list[int] = field(init=False, default_factory=list)
    calls: int = field(init=False, default=0)
    phase: Literal["pull", "decode", "final", "done"] = field(init=False, default="pull")
    stop: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.rule not in BISTREAM_RULES:
            raise ValueError(f"bistream rule {self.rule!r}; expected one of {BISTREAM_RULES}")
        ids = [int(i) for i in self.prompt_text]
        if ENDOFPROMPT_ID not in ids:
            raise ValueError("the prompt text must hold <|endofprompt|> (151646)")
        cut = ids.index(ENDOFPROMPT_ID) + 1
        s = self.speech_token_size
        self.sos, self.eos, self.task_id, self.fill = s, s + 1, s + 2, s + 3
        self.pending = [Fed(TABLE_SPEECH, s, SRC_SOS, 0)]
        self.pending += [Fed(TABLE_TEXT, i, SRC_HEAD, j) for j, i in enumerate(ids[:cut])]
        self.text_cache = [Fed(TABLE_TEXT, i, SRC_T, j) for j, i in enumerate(ids[cut:])]
        p = [int(t) for t in self.prompt_tokens]
        self.prompt_left = [Fed(TABLE_SPEECH, t, SRC_P, j) for j, t in enumerate(p)]
        self.n_prompt = len(p)
        self.next_fill = (len(p) // MIX_SPEECH + 1) * MIX_SPEECH - len(p)
        # corrected Q2/Q3: no partial prompt group open, so the next thing due is text
        self._text_first = self.rule == "corrected" and len(p) % MIX_SPEECH == 0
        self._inbox: deque[int] = deque()
        self._n_text = 0  # target ids pushed
        self._ended = False

    # ---- input ---------------------------------------------------------------------------------
    def push(self, ids: Iterable[int]) -> None:
        """Target text ids arrived (in order). Raises ValueError after `end`."""
        if self._ended:
            raise ValueError("text pushed after the end of text")
        for i in ids:
            self._inbox.append(int(i))
            self._n_text += 1

    def end(self) -> None:
        """No more text will come."""
        self._ended = True

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def waiting(self) -> bool:
        """True when the schedule cannot go on without more text (or its end)."""
        return self.phase == "pull" and not self._inbox and not self._ended

    @property
    def taken(self) -> int:
        """Target ids taken from the inbox so far: fed, or in `text_cache` to be fed."""
        return self._n_text - len(self._inbox)

    @property
    def max_text_ids(self) -> int:
        """Target ids one `corrected` generation takes before it rolls over:
        (7500 − P) // `ROLL_OVER_TOKENS_PER_ID`, at least one group."""
        return max(MIX_TEXT, (MAX_TOTAL_SPEECH_TOKENS - self.n_prompt) // ROLL_OVER_TOKENS_PER_ID)

    @property
    def full(self) -> bool:
        """True (`corrected` only) at a group boundary (after a fill, before the next group is
        taken) once `max_text_ids` ids were taken and more text is or may be coming: the caller
        should `close_text` now."""
        return (self.rule == "corrected" and self.phase == "pull" and bool(self.out)
                and self.out[-1] == self.fill and self.taken >= self.max_text_ids
                and (bool(self._inbox) or not self._ended))

    def close_text(self, extra: int = 0) -> int:
        """End this generation's text here (`full`; roll-over): take `extra` more ids from the
        inbox (the rest of a pre-token already begun), drop the others and end the text, so
        the next call is the final phase over what was taken. Returns the ids dropped (the
        caller gives their text to the next generation)."""
        for _ in range(min(extra, len(self._inbox))):
            index = self.taken
            self.text_cache.append(Fed(TABLE_TEXT, self._inbox.popleft(), SRC_X, index))
            self.pulls.append(self.calls)
        dropped = len(self._inbox)
        self._inbox.clear()
        self._n_text -= dropped
        self._ended = True
        return dropped

    @property
    def max_len(self) -> int:
        """The corrected final phase's cap on speech tokens: min(20·|X|, 7500 − P) (Q6)."""
        return max(0, min(MAX_TOKEN_TEXT_RATIO * self._n_text,
                          MAX_TOTAL_SPEECH_TOKENS - self.n_prompt))

    # ---- the state machine -----------------------------------------------------------------------
    def next_call(self) -> Call | None:
        """The next LM call, or None: waiting for text, or done."""
        while self.phase == "pull":
            if not self._inbox:
                if not self._ended:
                    return None
                self._end_of_text()
                break
            self._pull()
        if self.phase == "decode":
            forced = self.rule == "reference" and len(self.out) == self.next_fill
            mask: MaskKind = "sos" if self.rule == "reference" else "speech_or_fill"
            return Call(tuple(self.pending), forced, "mixed", mask)
        if self.phase == "final":
            mask = "none" if self.rule == "reference" else "speech_or_eos"
            return Call(tuple(self.pending), False, "final", mask)
        return None

    def _pull(self) -> None:
        """Take one text id (the reference pulls one per loop iteration) and act on it."""
        index = self._n_text - len(self._inbox)
        self.text_cache.append(Fed(TABLE_TEXT, self._inbox.popleft(), SRC_X, index))
        self.pulls.append(self.calls)
        while self.prompt_left and len(self.text_cache) >= MIX_TEXT:
            self.pending += self.text_cache[:MIX_TEXT] + self.prompt_left[:MIX_SPEECH]
            del self.text_cache[:MIX_TEXT]
            del self.prompt_left[:MIX_SPEECH]
        if self.prompt_left:
            return  # wait for the next id
        after_fill = bool(self.out) and self.out[-1] == self.fill
        needs_text = after_fill or (not self.out and self._text_first)
        if needs_text:
            if len(self.text_cache) < MIX_TEXT:
                return
            group = self.text_cache[:MIX_TEXT]
            del self.text_cache[:MIX_TEXT]
            if self.rule == "reference" and after_fill:
                self.pending = group  # replaces what the fill's call fed (already cached)
            else:
                self.pending += group
        self.phase = "decode"

    def _end_of_text(self) -> None:
        """The reference's end of text: pending ⧺ text_cache ⧺ [task_id] (§4 step 3)."""
        task = Fed(TABLE_SPEECH, self.task_id, SRC_TASK, 0)
        self.pending = self.pending + self.text_cache + [task]
        if self.rule == "corrected":
            self.pending += self.prompt_left  # Q1: fed, not dropped
        self.text_cache, self.prompt_left = [], []
        self.phase = "final"
        if self.rule == "corrected" and self.max_len <= len(self.tokens):
            self._finish("length")

    def record(self, decided: int) -> int | None:
        """The decision of the call `next_call` gave. Returns the speech token to yield, or
        None (fill, eos, or the end). Raises BistreamError for an id the phase forbids."""
        if self.phase not in ("decode", "final"):
            raise RuntimeError(f"record() without a call (phase {self.phase})")
        self.calls += 1
        mixed = self.phase == "decode"
        if mixed and self.rule == "reference" and len(self.out) == self.next_fill:
            decided = self.fill  # forced: the logits are ignored
            self.next_fill += MIX_SPEECH + 1
        elif mixed and decided == self.fill:
            self.next_fill = len(self.out) + MIX_SPEECH + 1
        self.out.append(decided)
        if mixed and decided == self.fill:
            if self.rule == "corrected":
                self.pending = []  # Q4: what this call fed is in the cache; never again
            self.phase = "pull"
            return None
        if not mixed and decided == self.eos:
            self._finish("eos")
            return None
        if decided >= self.speech_token_size:
            self._finish("error")
            raise BistreamError(f"should not get token {decided}")
        self.tokens.append(decided)
        self.pending = [Fed(TABLE_SPEECH, decided, SRC_Y, len(self.out) - 1)]
        if self.rule == "corrected":
            if len(self.tokens) >= (self.max_len if not mixed else
                                    MAX_TOTAL_SPEECH_TOKENS - self.n_prompt):
                self._finish("length")
            elif mixed and len(self.out) == self.next_fill:
                # Q4: the forced fill needs no call; its token goes in with the next group
                self.out.append(self.fill)
                self.next_fill += MIX_SPEECH + 1
                self.phase = "pull"
        return decided

    def _finish(self, reason: str) -> None:
        self.phase, self.stop = "done", reason
