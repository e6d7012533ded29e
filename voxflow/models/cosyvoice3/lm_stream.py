"""The LM stage's share of a request whose text arrives while it runs (issue 43 item 2; spec
addendum §4-§9): one bistream generation over the whole stream of text.

The front end gives such a request one segment whose payload is `StreamedText` (the request's
`TextFeed`). Its LM state (`StreamState`) holds the `BistreamDecoder` (schedule, KV cache,
sampler) and an `IncrementalTokenizer`; between steps the stage moves the feed's new text into
the schedule (`take_text`) and parks the request while the schedule waits for text
(`voxflow.stages.autoregressive.AutoregressiveStage.ready`). A request that gets no text and no
end for `bistream_text_timeout_s` fails with `TextStalledError` (its state is then freed).

The LM prompt is the voice's (SYS ⧺ EOP ⧺ transcript, its P prompt tokens) or, with
instructions, INS ⧺ EOP and no prompt tokens (§2); the flow side is the voice's either way.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """One fed request's LM side: its decoder, tokenizer hold, feed and text timeout (s)."""

    decoder: BistreamDecoder
    tokenizer: IncrementalTokenizer
    feed: TextFeed
    timeout_s: float

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
        if schedule.done or not self.feed.has_news:
            return
        text, ended = self.feed.take()
        ids = self.tokenizer.push(text)
        if ended:
            ids += self.tokenizer.finish()
        if ids:
            schedule.push(ids)
        if ended:
            schedule.end()

    def ready(self) -> bool:
        """Whether a step has work: text to take, a call due, the end, or the text timeout."""
        self.take_text()
        return not self.schedule.waiting or self.stalled

    @property
    def stalled(self) -> bool:
        return self.schedule.waiting and self.feed.idle_s() > self.timeout_s

    def stall_error(self) -> TextStalledError:
        return TextStalledError(self.timeout_s)
