"""Roll-over of a fed CosyVoice3 generation (issue 43 hardening): a `corrected` generation takes
at most `max_text_ids` target ids; at the first group boundary past them it ends its text at a
pre-token boundary (the final phase speaks what it took) and gives the rest back to the feed, so
text sent past the cap is never dropped silently. Pure schedule plus the real tokenizer; the LM
is a stand-in that always decides a speech id (the corrected rule's forced fill closes each
group after 15)."""

from __future__ import annotations

import pytest

pytest.importorskip("tiktoken")

from voxflow.models.cosyvoice3 import bistream  # noqa: E402
from voxflow.models.cosyvoice3.bistream import (  # noqa: E402
    SRC_TASK,
    SRC_X,
    SRC_Y,
    BistreamSchedule,
)
from voxflow.models.cosyvoice3.lm_stream import StreamState  # noqa: E402
from voxflow.models.cosyvoice3.text import default_tokenizer  # noqa: E402
from voxflow.models.cosyvoice3.text_stream import IncrementalTokenizer  # noqa: E402
from voxflow.stages.text_feed import TextFeed  # noqa: E402

S = 81
EOP = 151646
INSTRUCT = [1000, 1001, EOP]  # P = 0: the first decode waits for a full group


class _Decoder:
    """What `StreamState` reads of its decoder: the schedule."""

    def __init__(self, schedule: BistreamSchedule) -> None:
        self.schedule = schedule


def _state(feed: TextFeed) -> StreamState:
    return StreamState(_Decoder(BistreamSchedule(INSTRUCT, [], S)),  # type: ignore[arg-type]
                       IncrementalTokenizer(default_tokenizer()), feed, 30.0)


def _run(state: StreamState, speech: int = 7) -> list[tuple]:
    """Step `state` as the LM loop does (ready, then a call) until done or parked; every
    decision a speech id. Returns the calls' feeds."""
    feeds = []
    schedule = state.schedule
    while not schedule.done and state.ready():
        call = schedule.next_call()
        if call is None:
            break
        feeds.append(call.feed)
        schedule.record(speech)
    return feeds


def test_the_default_cap_keeps_the_mixed_phase_far_below_the_token_cap():
    schedule = BistreamSchedule(INSTRUCT, [3] * 250, S)
    assert schedule.max_text_ids == (7500 - 250) // 10 == 725
    # 15 tokens per group of 5: the mixed phase ends by 3 x (725 + 5 + a pre-token) tokens
    assert 3 * (725 + 5 + 20) < 7500 - 250


def test_a_generation_rolls_over_at_the_first_group_boundary_past_its_cap(monkeypatch):
    monkeypatch.setattr(bistream, "ROLL_OVER_TOKENS_PER_ID", 750)  # (7500 - 0) // 750 = 10 ids
    tok = default_tokenizer()
    text = " one two three four five six seven eight nine ten eleven twelve thirteen."
    assert len(tok.encode_ordinary(text)) == 14  # one id a word, and the full stop
    feed = TextFeed()
    feed.push(text)
    state = _state(feed)
    feeds = _run(state)
    schedule = state.schedule
    assert schedule.max_text_ids == 10 and state.rolled and feed.rolled
    assert schedule.done and schedule.stop == "length"  # the final phase's 20 x 10 cap
    fed_x = [f.id for feed_ in feeds for f in feed_ if f.src == SRC_X]
    assert fed_x == tok.encode_ordinary(" one two three four five six seven eight nine ten")
    # 2 groups x 15 calls, then the final phase: the 15th token (its fill was forced, so it
    # was not fed yet) and task_id: nothing fed twice, no text after the cap
    assert [f.src for f in feeds[30]] == [SRC_Y, SRC_TASK]
    assert len(schedule.tokens) == 200 and schedule.taken == 10
    rest, ended = feed.take()
    assert (rest, ended) == (" eleven twelve thirteen.", False)  # all of it, for the next one


def test_a_word_begun_at_the_cap_is_finished_and_the_end_goes_with_the_rest(monkeypatch):
    monkeypatch.setattr(bistream, "ROLL_OVER_TOKENS_PER_ID", 1500)  # 5 ids: one group
    tok = default_tokenizer()
    long_word = " antidisestablishmentarianism"
    head = " one two three four"
    assert len(tok.encode_ordinary(head)) == 4 and len(tok.encode_ordinary(long_word)) > 2
    feed = TextFeed()
    feed.push(head + long_word + " then the rest")
    feed.end()  # the client already ended: the rest still rolls over, ended
    state = _state(feed)
    feeds = _run(state)
    fed_x = [f.id for feed_ in feeds for f in feed_ if f.src == SRC_X]
    assert fed_x == tok.encode_ordinary(head + long_word)  # the whole word, not 1 id of it
    ids = tok.encode_ordinary(head + long_word)
    final = next(f for f in feeds if f[-1].src == SRC_TASK)  # the word's other ids, task_id
    assert [f.id for f in final if f.src == SRC_X] == ids[5:] and state.schedule.done
    assert feed.take() == (" then the rest", True)


def test_no_roll_over_when_the_text_ends_within_the_cap(monkeypatch):
    monkeypatch.setattr(bistream, "ROLL_OVER_TOKENS_PER_ID", 750)  # 10 ids
    feed = TextFeed()
    feed.push(" one two three four five six seven eight nine ten")
    feed.end()
    state = _state(feed)
    _run(state)
    assert state.schedule.done and not state.rolled and not feed.rolled
    assert state.schedule.taken == 10


def test_the_reference_rule_never_rolls_over(monkeypatch):
    monkeypatch.setattr(bistream, "ROLL_OVER_TOKENS_PER_ID", 1500)
    schedule = BistreamSchedule(INSTRUCT, [], S, rule="reference")
    schedule.push(range(3000, 3020))
    for _ in range(40):
        call = schedule.next_call()
        assert call is not None and not schedule.full
        schedule.record(schedule.fill if call.forced_fill else 7)
