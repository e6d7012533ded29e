"""The LM stage's share of a request whose text arrives while it runs (issue 43 item 2; spec
addendum §4-§9): one bistream generation over the whole stream of text.

The front end gives such a request one segment whose payload is `StreamedText` (the request's
`TextFeed`). Its LM state (`StreamState`) holds the `BistreamDecoder` (schedule, KV cache,
sampler) and an `IncrementalTokenizer`; between steps the stage moves the feed's new text into
the schedule (`take_text`) and parks the request while the schedule waits for text
(`voxflow.stages.autoregressive.AutoregressiveStage.ready`). A request that gets no text and no
end for `bistream_text_timeout_s` fails with `TextStalledError` (its state is then freed).

Roll-over (`corrected` rule): a generation takes at most `BistreamSchedule.max_text_ids` target
ids. At the first group boundary past them (`BistreamSchedule.full`) it ends its text there, at
a pre-token boundary, and speaks what it took to its end (final phase, eos); the text it did not
take goes back into the feed (`TextFeed.roll_over`), and the session speaks it in a new
generation (`voxflow.server.speech_stream`). So no text is dropped at the length cap.

The LM prompt is the voice's (SYS ⧺ EOP ⧺ transcript, its P prompt tokens) or, with
instructions, INS ⧺ EOP and no prompt tokens (§2); the flow side is the voice's either way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from voxflow.errors import TextStalledError
from voxflow.models.cosyvoice3.bistream import BistreamRule, BistreamSchedule
from voxflow.models.cosyvoice3.lm import CosyVoice3LM
from voxflow.models.cosyvoice3.lm_bistream import BistreamDecoder
from voxflow.models.cosyvoice3.sampling import Sampler
from voxflow.models.cosyvoice3.text import CosyVoice3Tokenizer
from voxflow.models.cosyvoice3.text_stream import IncrementalTokenizer
from voxflow.stages.text_feed import TextFeed


@dataclass(frozen=True)
class StreamedText:
    """The payload of the one segment of a request fed with text while it runs."""

    feed: TextFeed


@dataclass
class StreamState:
    """One fed request's LM side: its decoder, tokenizer hold, feed and text timeout (s).

    `pieces` are the pre-tokens pushed into the schedule that it may not have taken yet (text,
    id count), `base` the target ids before the first of them: where a roll-over cuts the text.
    """

    decoder: BistreamDecoder
    tokenizer: IncrementalTokenizer
    feed: TextFeed
    timeout_s: float
    pieces: deque[tuple[str, int]] = field(default_factory=deque)
    base: int = 0
    rolled: bool = False

    @classmethod
    def open(cls, lm: CosyVoice3LM, tokenizer: CosyVoice3Tokenizer, feed: TextFeed,
             prompt_text: list[int], prompt_tokens: list[int], rule: BistreamRule,
             sampler: Sampler, timeout_s: float) -> StreamState:
        schedule = BistreamSchedule(prompt_text, prompt_tokens, lm.speech_token_size, rule=rule)
        return cls(BistreamDecoder(lm, schedule, sampler), IncrementalTokenizer(tokenizer), feed,
                   timeout_s)

    @property
    def schedule(self) -> BistreamSchedule:
        return self.decoder.schedule

    def take_text(self) -> None:
        """Move the feed's new text into the schedule (committed ids; all of it at the end)."""
        schedule = self.schedule
        if schedule.done or self.rolled or not self.feed.has_news:
            return
        text, ended = self.feed.take()
        pieces = self.tokenizer.push_pieces(text)
        if ended:
            pieces += self.tokenizer.finish_pieces()
        ids = [i for _, piece in pieces for i in piece]
        self.pieces.extend((piece, len(piece_ids)) for piece, piece_ids in pieces)
        if ids:
            schedule.push(ids)
        if ended:
            schedule.end()

    def ready(self) -> bool:
        """Whether a step has work: text to take, a call due, the end, or the text timeout.
        Rolls over first when the schedule is `full` (module docstring)."""
        self.take_text()
        self._forget_taken()
        if self.schedule.full:
            self.roll_over()
        return not self.schedule.waiting or self.stalled

    def _forget_taken(self) -> None:
        """Drop the pieces the schedule has taken whole."""
        taken = self.schedule.taken
        while self.pieces and self.base + self.pieces[0][1] <= taken:
            self.base += self.pieces.popleft()[1]

    def roll_over(self) -> str:
        """End this generation's text at the pre-token boundary at or after what the schedule
        took (`BistreamSchedule.close_text`) and give the rest back to the feed
        (`TextFeed.roll_over`): the pre-tokens not taken, then the tokenizer's hold. Returns
        that rest (NFC text)."""
        self._forget_taken()
        extra = 0
        if self.pieces and self.base < self.schedule.taken:  # a pre-token begun: finish it
            extra = self.base + self.pieces[0][1] - self.schedule.taken
            self.base += self.pieces.popleft()[1]
        rest = "".join(piece for piece, _ in self.pieces) + self.tokenizer.drop_held()
        self.pieces.clear()
        self.schedule.close_text(extra)
        self.rolled = True
        self.feed.roll_over(rest)
        return rest

    @property
    def stalled(self) -> bool:
        return self.schedule.waiting and self.feed.idle_s() > self.timeout_s

    def stall_error(self) -> TextStalledError:
        return TextStalledError(self.timeout_s)
