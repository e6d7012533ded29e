"""Property tests of the corrected bistream rule (spec addendum §5, §10.3-§10.5; issue 43 item 3),
as seeded random loops (hypothesis is not a dependency): random prompts (P, |T|), target texts,
arrival schedules and model decisions. A fake model decides from a hash of everything fed so
far, as a causal LM would, so equal fed sequences give equal decisions.

Properties: the fed sequence is the training format (groups of 5 text ids and 15 speech ids,
prompt first, then the rest of the text, task_id, the remaining speech; Q1-Q4); nothing is fed
twice and every prompt token and text id is fed; the first decode waits for exactly the text a
full first group needs; arrival timing changes nothing; the mixed phase never yields a stop id
and the final phase ends on eos or at min(20·|X|, 7500 − P) (Q5, Q6); waiting costs no call."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from voxflow.models.cosyvoice3.bistream import (
    SRC_HEAD,
    SRC_P,
    SRC_SOS,
    SRC_T,
    SRC_TASK,
    SRC_X,
    SRC_Y,
    BistreamError,
    BistreamSchedule,
    Call,
    Fed,
)

S = 81
EOS, TASK, FILL = S + 1, S + 2, S + 3
EOP = 151646
SEEDS = range(300)


class FakeLM:
    """Decides from a hash of the whole fed sequence: a speech id, or with the given odds a
    fill (mixed phase) or eos (final phase)."""

    def __init__(self, fill_odds: float = 0.0, eos_odds: float = 0.0) -> None:
        self.fed: list[Fed] = []
        self.fill_odds, self.eos_odds = fill_odds, eos_odds

    def __call__(self, call: Call) -> int:
        self.fed += call.feed
        rng = random.Random(hash(tuple((f.table, f.id) for f in self.fed)))
        draw = rng.random()
        if call.phase == "mixed" and draw < self.fill_odds:
            return FILL
        if call.phase == "final" and draw < self.eos_odds:
            return EOS
        return rng.randrange(S)


def scenario(seed: int) -> tuple[list[int], list[int], list[int]]:
    """(prompt text with EOP, prompt tokens, target ids), sizes drawn from `seed`. |X| >= max(2,
    |T|), so the mixed phase (3 tokens per text id) never reaches the 20·|X| cap by itself."""
    rng = random.Random(seed)
    head = [rng.randrange(1000, 2000) for _ in range(rng.randrange(0, 8))] + [EOP]
    transcript = [rng.randrange(2000, 3000) for _ in range(rng.randrange(0, 12))]
    p = [rng.randrange(S) for _ in range(rng.choice([0, 0, 15, 30, rng.randrange(1, 46)]))]
    low = max(2, len(transcript))
    n_x = rng.randrange(low, rng.choice([low + 2, 12, 40]))  # short texts too (Q1)
    return head + transcript, p, [rng.randrange(3000, 4000) for _ in range(n_x)]


def run(prompt_text: list[int], p: list[int], x: list[int], model: FakeLM,
        arrival: Callable[[BistreamSchedule, list[int]], None] | None = None,
        rng: random.Random | None = None) -> BistreamSchedule:
    """Drive a corrected schedule to its end. Without `arrival`, push all text then end; with
    it, `arrival(schedule, left)` pushes some of `left` (and removes it) whenever called: at
    every wait, and (with `rng`) at random moments between calls."""
    schedule = BistreamSchedule(prompt_text, p, S)
    left = list(x)
    if arrival is None:
        schedule.push(left)
        left = []
        schedule.end()
    while not schedule.done:
        if left and rng is not None and rng.random() < 0.3:
            assert arrival is not None
            arrival(schedule, left)
        call = schedule.next_call()
        if call is None:
            assert schedule.waiting and arrival is not None
            arrival(schedule, left)
            if not left:
                schedule.end()
            continue
        assert call.feed, "a call feeds at least one position"
        schedule.record(model(call))
    return schedule


def training_format(prompt_text: list[int], p: list[int], x: list[int],
                    y: list[int]) -> list[tuple[int, int]]:
    """The fed (src, id) sequence the corrected rule must give without sampled fills or eos:
    sos, head, groups C[5g:5g+5] ⧺ Y[15g:15g+15] (Y = p ⧺ y), then C's rest, task_id and the
    rest of Y but the last token decided (it is never fed). Only complete groups are mixed;
    with too little text for the prompt (Q1), the leftover prompt tokens follow task_id."""
    cut = prompt_text.index(EOP) + 1
    c = [(SRC_T, i) for i in prompt_text[cut:]] + [(SRC_X, i) for i in x]
    speech = [(SRC_P, t) for t in p] + [(SRC_Y, t) for t in y[:-1]]
    groups = len(c) // 5
    out = [(SRC_SOS, S)] + [(SRC_HEAD, i) for i in prompt_text[:cut]]
    for g in range(groups):
        out += c[5 * g : 5 * g + 5] + speech[15 * g : 15 * g + 15]
    return out + c[5 * groups :] + [(SRC_TASK, TASK)] + speech[15 * groups :]


def test_the_fed_sequence_is_the_training_format():
    for seed in SEEDS:
        _the_fed_sequence_is_the_training_format(seed)


def _the_fed_sequence_is_the_training_format(seed: int) -> None:
    prompt_text, p, x = scenario(seed)
    model = FakeLM()
    schedule = run(prompt_text, p, x, model)
    assert schedule.stop == "length" and len(schedule.tokens) == schedule.max_len == 20 * len(x)
    fed = [(f.src, f.id) for f in model.fed]
    assert fed == training_format(prompt_text, p, x, schedule.tokens)


def test_nothing_is_fed_twice_and_all_prompt_and_text_is_fed():
    for seed in SEEDS:
        _nothing_is_fed_twice_and_all_prompt_and_text_is_fed(seed)


def _nothing_is_fed_twice_and_all_prompt_and_text_is_fed(seed: int) -> None:
    prompt_text, p, x = scenario(seed)
    model = FakeLM(fill_odds=0.15, eos_odds=0.05)  # sampled fills (Q4) and early ends
    schedule = run(prompt_text, p, x, model)
    sources = [(f.src, f.src_index) for f in model.fed]
    assert len(sources) == len(set(sources))  # Q4: no position fed again
    assert [f.id for f in model.fed if f.src == SRC_P] == p  # Q1: the prompt is never dropped
    assert [f.id for f in model.fed if f.src == SRC_X] == x
    assert [f.src for f in model.fed].count(SRC_TASK) == 1
    fed_y = [f.id for f in model.fed if f.src == SRC_Y]
    assert fed_y == schedule.tokens[: len(fed_y)] and len(fed_y) >= len(schedule.tokens) - 1
    assert schedule.stop in ("eos", "length")
    assert FILL not in schedule.tokens and all(t < S for t in schedule.tokens)


def test_the_first_decode_waits_for_exactly_one_full_group():
    for seed in SEEDS:
        _the_first_decode_waits_for_exactly_one_full_group(seed)


def _the_first_decode_waits_for_exactly_one_full_group(seed: int) -> None:
    prompt_text, p, x = scenario(seed)
    x = x + [5000 + i for i in range(15)]  # enough for any first group
    schedule = BistreamSchedule(prompt_text, p, S)
    transcript = len(prompt_text) - prompt_text.index(EOP) - 1
    groups = -(-len(p) // 15)
    # Q2/Q3: with no partial prompt group open, one more full group of text is due first
    needed = 5 * groups + (5 if len(p) % 15 == 0 else 0) - transcript
    pushed = 0
    while (call := schedule.next_call()) is None:
        schedule.push([x[pushed]])
        pushed += 1
    assert pushed == max(1, needed)
    assert schedule.calls == 0 and call.phase == "mixed" and not call.forced_fill
    first_speech = sum(f.src == SRC_P for f in call.feed)
    assert first_speech == len(p)


def test_text_arrival_timing_changes_nothing():
    for seed in SEEDS:
        _text_arrival_timing_changes_nothing(seed)


def _text_arrival_timing_changes_nothing(seed: int) -> None:
    prompt_text, p, x = scenario(seed)
    rng = random.Random(seed)

    def bursts(schedule: BistreamSchedule, left: list[int]) -> None:
        n = rng.randrange(0, 7)
        schedule.push(left[:n])
        del left[:n]

    whole_model = FakeLM(fill_odds=0.1, eos_odds=0.03)
    whole = run(prompt_text, p, x, whole_model)
    bursty_model = FakeLM(fill_odds=0.1, eos_odds=0.03)
    bursty = run(prompt_text, p, x, bursty_model, bursts, rng)
    assert bursty_model.fed == whole_model.fed
    assert (bursty.tokens, bursty.out, bursty.stop) == (whole.tokens, whole.out, whole.stop)


def test_waiting_for_text_costs_no_call_and_changes_nothing():
    schedule = BistreamSchedule([1, EOP], [3] * 7, S)
    schedule.push([10, 11, 12, 13])
    for _ in range(3):
        assert schedule.next_call() is None and schedule.waiting and schedule.calls == 0
    schedule.push([14])
    call = schedule.next_call()
    assert call is not None and [f.id for f in call.feed] == [S, 1, EOP, 10, 11, 12, 13, 14,
                                                              *[3] * 7]
    for k in range(8):  # 15 − 7 tokens complete the first group, then the fill is implied
        schedule.record(40 + k)
    assert schedule.out == [*range(40, 48), FILL] and schedule.next_call() is None
    schedule.push([20, 21, 22, 23, 24])
    call = schedule.next_call()
    assert call is not None and [f.id for f in call.feed] == [47, 20, 21, 22, 23, 24]


def test_the_phases_refuse_the_other_phases_stop_id():
    schedule = BistreamSchedule([EOP], [], S)
    schedule.push(range(10, 15))
    call = schedule.next_call()
    assert call is not None and call.mask == "speech_or_fill"
    with pytest.raises(BistreamError, match="should not get token 82"):
        schedule.record(EOS)
    assert schedule.done and schedule.stop == "error"
    final = BistreamSchedule([EOP], [], S)
    final.push([10])
    final.end()
    call = final.next_call()
    assert call is not None and call.mask == "speech_or_eos" and call.phase == "final"
    assert [f.id for f in call.feed] == [S, EOP, 10, TASK]  # the plain instruct layout
    with pytest.raises(BistreamError, match="should not get token 84"):
        final.record(FILL)


def test_the_final_phase_stops_at_twenty_tokens_per_text_id_or_the_noise():
    schedule = BistreamSchedule([EOP], [], S)
    schedule.push([10, 11])
    schedule.end()
    while schedule.next_call() is not None:
        schedule.record(7)
    assert len(schedule.tokens) == 40 and schedule.stop == "length"
    long = BistreamSchedule([EOP], list(range(60)) * 40, S)  # P = 2400: 7500 − P = 5100
    long.push([10] * 300)
    assert long.max_len == 5100
    empty = BistreamSchedule([EOP], [], S)
    empty.end()
    assert empty.next_call() is None and empty.done and empty.tokens == []


def test_the_reference_rule_keeps_its_defects_for_parity():
    ref = BistreamSchedule([EOP], [], S, rule="reference")
    ref.push([10])
    call = ref.next_call()  # Q2: decodes from S, INS, EOP before any target text
    assert call is not None and [f.id for f in call.feed] == [S, EOP] and call.mask == "sos"
    q1 = BistreamSchedule([EOP, 5], [1] * 20, S, rule="reference")
    q1.push([10, 11, 12, 13])
    q1.end()
    call = q1.next_call()  # Q1: p[15:20] dropped
    assert call is not None and sum(f.src == SRC_P for f in call.feed) == 15
    assert call.mask == "none" and call.phase == "final"
    with pytest.raises(ValueError, match="endofprompt"):
        BistreamSchedule([1, 2], [], S)
