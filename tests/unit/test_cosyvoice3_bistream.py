"""The bistream LM (issue 43 items 2-3; spec addendum §4, §5, §10) against the reference fixtures
`lm_instruct_bistream_tiny_*`: with the reference rule every bistream case's fed positions,
forced fills, phases, masks, id pull times, logits, decisions, tokens and end equal the
reference's; KV consistency (call-by-call feeding equals one uncached forward over the same fed
sequence); the plain cases (`ins_*`, `plain_zs_p12`) replayed the same way."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.unit.cosyvoice3_fixtures import meta, tensors  # noqa: E402
from voxflow.models.cosyvoice3.bistream import (  # noqa: E402
    BistreamError,
    BistreamSchedule,
    Fed,
)
from voxflow.models.cosyvoice3.lm import (  # noqa: E402
    TINY_LM_CONFIG,
    CosyVoice3LM,
    KVCache,
    LMDecoder,
    length_limits,
)
from voxflow.models.cosyvoice3.lm_bistream import (  # noqa: E402
    BistreamDecoder,
    embed_call,
)
from voxflow.models.cosyvoice3.sampling import GreedySampler  # noqa: E402

S = 81
FILL, EOS = S + 3, S + 1
FIXTURE = "lm_instruct_bistream_tiny_fixtures.safetensors"
META = meta("lm_instruct_bistream_tiny_meta.json")
BISTREAM = [name for name, case in META["cases"].items()
            if case["entry"] == "Qwen2LM.inference_bistream"]
PLAIN = [name for name, case in META["cases"].items() if case["entry"] == "Qwen2LM.inference"]
PHASES = {"mixed": 1, "final": 2}
MASKED = {"sos": 1, "none": 0}


@pytest.fixture(scope="module")
def lm() -> CosyVoice3LM:
    model = CosyVoice3LM(TINY_LM_CONFIG)
    model.load_state_dict(tensors("lm_tiny_state_dict.safetensors.gz"), strict=True)
    return model.eval()


@pytest.fixture(scope="module")
def fx() -> dict:
    return tensors(FIXTURE)


class Scripted:
    """The fixtures' `scripted` rule: greedy over speech ids, except at the listed |out|."""

    def __init__(self, script: dict[str, int]) -> None:
        self.script = {int(k): v for k, v in script.items()}

    def __call__(self, scores, decoded) -> int:
        return self.script.get(len(decoded), int(torch.argmax(scores[:S])))


def rule_sampler(case: dict):
    return {"speech_greedy": GreedySampler(limit=S), "argmax_all": GreedySampler(),
            "scripted": Scripted(case.get("script", {}))}[case["rule"]]


def fixture_fed(fx: dict, name: str) -> list[tuple[int, Fed]]:
    keys = ("table", "id", "src", "src_index", "step")
    cols = [fx[f"{name}.fed.{k}"].tolist() for k in keys]
    return [(step, Fed(t, i, s, j)) for t, i, s, j, step in zip(*cols, strict=True)]


def test_the_fixture_lists_fifteen_cases_eleven_of_them_bistream():
    assert len(META["cases"]) == 15 and len(BISTREAM) == 11 and len(PLAIN) == 4


@pytest.mark.parametrize("name", BISTREAM)
def test_reference_rule_reproduces_every_bistream_case(lm, fx, name):
    case = META["cases"][name]
    schedule = BistreamSchedule(case["prompt_text"], case["prompt_speech_token"], S,
                                rule="reference")
    for chunk in case["chunks"]:  # arrival does not matter to the LM (checked below)
        schedule.push(chunk)
    schedule.end()
    decoder = BistreamDecoder(lm, schedule, rule_sampler(case))
    stop = case["stop"]
    fed: list[tuple[int, Fed]] = []
    steps, error = [], None
    cap = case["n_tokens_yielded"] if stop["reason"] == "harness_cap" else None
    while cap is None or len(schedule.tokens) < cap:
        try:
            step = decoder.step()
        except BistreamError as exc:
            error = str(exc)
            break
        if step is None:
            break
        fed += [(len(steps), f) for f in step.call.feed]
        steps.append(step)
    assert error == stop["error"]
    n_calls = case["n_steps"]
    expected = fixture_fed(fx, name)
    logits = fx[f"{name}.step.logits"]
    if error is None:
        assert len(steps) == n_calls and fed == expected
    else:  # the failing call ran (fed, logits) and its decision raised, as in the reference
        assert len(steps) == n_calls - 1
        assert fed == [x for x in expected if x[0] < n_calls - 1]
        assert decoder.cache.length == len(expected) and decoder.last_logits is not None
        assert float((decoder.last_logits - logits[-1]).abs().max()) < 1e-4
        assert schedule.done and schedule.stop == "error"
    for k, step in enumerate(steps):
        assert float((step.logits - logits[k]).abs().max()) < 1e-4, k
        assert step.decided == int(fx[f"{name}.step.out"][k])
        assert int(step.call.forced_fill) == int(fx[f"{name}.step.kind"][k])
        assert PHASES[step.call.phase] == int(fx[f"{name}.step.phase"][k])
        masked = -1 if step.call.forced_fill else MASKED[step.call.mask]
        assert masked == int(fx[f"{name}.step.sos_masked"][k])
    assert schedule.tokens == fx[f"{name}.tokens"].tolist()
    n_pulled = sum(v >= 0 for v in fx[f"{name}.text.pull_after_step"].tolist())
    assert schedule.pulls == fx[f"{name}.text.pull_after_step"].tolist()[:n_pulled]
    if stop["reason"] == "generator_returned":
        assert schedule.stop == "eos"


@pytest.mark.parametrize("name", ["bi_zs_p7", "bi_ins_p0", "bi_zs_p12_whole"])
@pytest.mark.parametrize("chunking", ["one id at a time", "all at once", "pushed while decoding"])
def test_the_fed_sequence_does_not_depend_on_text_arrival(lm, fx, name, chunking):
    case = META["cases"][name]
    text = [i for chunk in case["chunks"] for i in chunk]
    schedule = BistreamSchedule(case["prompt_text"], case["prompt_speech_token"], S,
                                rule="reference")
    decoder = BistreamDecoder(lm, schedule, GreedySampler(limit=S))
    if chunking == "all at once":
        schedule.push(text)
    elif chunking == "one id at a time":
        for i in text:
            schedule.push([i])
    fed: list[Fed] = []
    left = list(text) if chunking == "pushed while decoding" else []
    ended = chunking != "pushed while decoding"
    if ended:
        schedule.end()
    while len(schedule.tokens) < case["n_tokens_yielded"]:
        step = decoder.step()
        if step is None:
            assert schedule.waiting and not ended
            schedule.push(left[:2])  # two ids whenever the LM waits
            del left[:2]
            if not left:
                schedule.end()
                ended = True
            continue
        fed += step.call.feed
    assert fed == [f for _, f in fixture_fed(fx, name)]
    assert schedule.tokens == fx[f"{name}.tokens"].tolist()


@pytest.mark.parametrize("name", BISTREAM + PLAIN)
def test_call_by_call_feeding_equals_one_uncached_forward(lm, fx, name):
    table, ids = fx[f"{name}.fed.table"], fx[f"{name}.fed.id"]
    with torch.inference_mode():
        rows = [lm.embed_speech(i[None]) if t == 0 else lm.embed_text(i[None])
                for t, i in zip(table.tolist(), ids, strict=True)]
        embeds = torch.cat(rows)[None]  # [1, L, D]
        whole = lm.llm_decoder(lm.llm(embeds))[0]  # [L, V], one causal pass, no cache
        cache = KVCache()
        pos0, n_fed = fx[f"{name}.step.pos0"].tolist(), fx[f"{name}.step.n_fed"].tolist()
        for k, (start, n) in enumerate(zip(pos0, n_fed, strict=True)):
            assert cache.length == start
            logits = lm(embeds[:, start : start + n], cache)[0][0]
            last = start + n - 1
            assert float((logits - whole[last]).abs().max()) < 1e-4, k
            assert float((logits - fx[f"{name}.step.logits"][k]).abs().max()) < 1e-4, k


def test_plain_zero_shot_rerun_equals_the_bistream_prefix_only(lm, fx):
    """`plain_zs_p12` replays through `LMDecoder`; it shares positions 0..12 with
    `bi_zs_p12_whole` and no more (bistream is a different sequence, §10.2)."""
    case = META["cases"]["plain_zs_p12"]
    text = torch.tensor(case["text"])
    with torch.inference_mode():
        prefill = lm.prefill_embeds(text, torch.tensor(case["prompt_text"]),
                                    torch.tensor(case["prompt_speech_token"]))
    decoder = LMDecoder(lm, prefill, *length_limits(len(text), 0), GreedySampler(limit=S),
                        "reference_sos_only")
    while len(decoder.tokens) < 20:
        decoder.step()
    assert decoder.tokens == fx["plain_zs_p12.tokens"].tolist()
    plain, bi = fx["plain_zs_p12.fed.id"].tolist(), fx["bi_zs_p12_whole.fed.id"].tolist()
    assert plain[:13] == bi[:13] and plain[13] != bi[13]


def test_embed_call_takes_each_position_from_its_table(lm):
    schedule = BistreamSchedule([7, 151646, 9], [3, 4], S, rule="reference")
    schedule.push([11, 12, 13])  # C = T ⧺ X holds 4 ids: the prompt group waits for a 5th
    assert schedule.next_call() is None and schedule.waiting
    schedule.push([14])
    call = schedule.next_call()
    assert call is not None
    assert [(f.table, f.id) for f in call.feed] == [
        (0, S), (1, 7), (1, 151646), (1, 9), (1, 11), (1, 12), (1, 13), (1, 14), (0, 3), (0, 4)]
    with torch.inference_mode():
        rows = embed_call(lm, call)[0]
        assert torch.equal(rows[0], lm.embed_speech(torch.tensor([S]))[0])
        assert torch.equal(rows[2], lm.embed_text(torch.tensor([151646]))[0])
        assert torch.equal(rows[9], lm.embed_speech(torch.tensor([4]))[0])


def test_masks_leave_each_phase_only_its_own_ids():
    from voxflow.models.cosyvoice3.lm_bistream import mask_scores

    base = torch.linspace(-3.0, 0.0, S + 200)
    allowed = {}
    for kind in ("sos", "none", "speech_or_fill", "speech_or_eos"):
        scores = base.clone()
        mask_scores(scores, kind, S)
        allowed[kind] = {i for i in range(S, S + 200) if scores[i] > float("-inf")}
        assert torch.equal(scores[:S], base[:S])  # speech ids untouched
    assert allowed["sos"] == set(range(S + 1, S + 200))  # the reference: eos etc. reachable
    assert allowed["none"] == set(range(S, S + 200))
    assert allowed["speech_or_fill"] == {FILL}  # corrected mixed phase (Q5)
    assert allowed["speech_or_eos"] == {EOS}  # corrected final phase (Q5)
