"""CosyVoice3 instruct mode (issue 43 item 1; spec addendum §2, §10.6): the LM layout and greedy
decodes equal the reference fixtures `ins_x3`, `ins_x2`, `ins_x3_argmax_all`; the instruction's
ids; its checks (400s); the LM stage uses the instruction and no prompt tokens, the flow side
keeps the voice's prompt; the engine refuses bad instructions and serves good ones."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("tiktoken")

from tests.unit.cosyvoice3_fixtures import meta, tensors  # noqa: E402
from voxflow.config import load_settings  # noqa: E402
from voxflow.engine.engine import Engine  # noqa: E402
from voxflow.engine.request import SpeechRequest  # noqa: E402
from voxflow.errors import InvalidRequestError  # noqa: E402
from voxflow.models.cosyvoice3.instruct import (  # noqa: E402
    INSTRUCT_PREFIX,
    KNOWN_GOOD_INSTRUCTIONS,
    check_instruction,
    instruct_prompt_ids,
)
from voxflow.models.cosyvoice3.lm import (  # noqa: E402
    TINY_LM_CONFIG,
    CosyVoice3LM,
    LMDecoder,
    length_limits,
)
from voxflow.models.cosyvoice3.model import CosyVoice3Family  # noqa: E402
from voxflow.models.cosyvoice3.sampling import GreedySampler  # noqa: E402
from voxflow.models.cosyvoice3.settings import CosyVoice3Settings  # noqa: E402
from voxflow.models.cosyvoice3.stages import TextSegment  # noqa: E402
from voxflow.models.cosyvoice3.text import default_tokenizer  # noqa: E402
from voxflow.server.ignored import instructions_value  # noqa: E402
from voxflow.stages.items import RequestInfo, StageItem  # noqa: E402

S = 81
FIXTURE = "lm_instruct_bistream_tiny_fixtures.safetensors"
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "cosyvoice3-tiny.yaml"
VOICE = "random-tiny"
SYS = [2610, 525, 264, 10950, 17847, 13]  # "You are a helpful assistant." (addendum header)
EOP = 151646


@pytest.fixture(scope="module")
def lm() -> CosyVoice3LM:
    model = CosyVoice3LM(TINY_LM_CONFIG)
    model.load_state_dict(tensors("lm_tiny_state_dict.safetensors.gz"), strict=True)
    return model.eval()


@pytest.fixture(scope="module")
def fx() -> dict:
    return tensors(FIXTURE)


@pytest.fixture(scope="module")
def family() -> CosyVoice3Family:
    return CosyVoice3Family("cosyvoice3", CosyVoice3Settings())


def fed_embeds(lm: CosyVoice3LM, fx: dict, case: str, positions: slice) -> torch.Tensor:
    """The fixture's fed positions embedded from their tables: [L, D]."""
    table, ids = fx[f"{case}.fed.table"][positions], fx[f"{case}.fed.id"][positions]
    rows = [lm.embed_speech(i[None]) if t == 0 else lm.embed_text(i[None])
            for t, i in zip(table.tolist(), ids, strict=True)]
    return torch.cat(rows)


# --- the LM against the reference fixtures ----------------------------------------------------


@pytest.mark.parametrize(("case", "n_ins", "steps"), [("ins_x3", 5, 60), ("ins_x2", 10, 40)])
def test_instruct_layout_and_greedy_decode_equal_the_reference(lm, fx, case, n_ins, steps):
    info = meta("lm_instruct_bistream_tiny_meta.json")["cases"][case]
    ins, text = fx[f"{case}.in.prompt_text"][0], fx[f"{case}.in.text"][0]
    assert int(ins[-1]) == EOP and len(ins) == n_ins
    assert fx[f"{case}.in.prompt_speech_token"].numel() == 0
    with torch.inference_mode():
        prefill = lm.prefill_embeds(text, ins, None)  # S, INS⧺EOP, X, S+2; no prompt tokens
        n_prefill = int(fx[f"{case}.step.n_fed"][0])
        assert n_prefill == 1 + n_ins + len(text) + 1 == prefill.shape[0]
        tables, ids = fx[f"{case}.fed.table"][:n_prefill], fx[f"{case}.fed.id"][:n_prefill]
        assert tables.tolist() == [0] + [1] * (n_ins + len(text)) + [0]
        assert ids.tolist() == [S, *ins.tolist(), *text.tolist(), S + 2]
        assert torch.equal(prefill, fed_embeds(lm, fx, case, slice(0, n_prefill)))
    min_len, max_len = length_limits(len(text))  # the instruction is not counted
    assert (min_len, max_len) == (info["min_len"], info["max_len"]) == (2 * len(text), steps)
    decoder = LMDecoder(lm, prefill, min_len, max_len, GreedySampler(limit=S),
                        "reference_sos_only")
    outs = []
    while (out := decoder.step()) is not None:
        outs.append(out)
    assert len(outs) == steps  # ended by max_len = 20·|X|
    logits = torch.stack([o.logits for o in outs])
    assert float((logits - fx[f"{case}.step.logits"]).abs().max()) < 1e-4
    assert decoder.tokens == fx[f"{case}.tokens"].tolist() == fx[f"{case}.step.out"].tolist()


def test_instruct_min_length_quirk_stops_at_the_first_call(lm, fx):
    case = "ins_x3_argmax_all"
    ins, text = fx[f"{case}.in.prompt_text"][0], fx[f"{case}.in.text"][0]
    with torch.inference_mode():
        prefill = lm.prefill_embeds(text, ins, None)
    min_len, max_len = length_limits(len(text))
    decoder = LMDecoder(lm, prefill, min_len, max_len, GreedySampler(), "reference_sos_only")
    out = decoder.step()
    assert out is not None and out.stop and out.token == int(fx[f"{case}.step.out"][0]) == 126
    assert decoder.tokens == [] and decoder.step() is None  # 0 tokens (min_len 6 not enforced)
    assert float((out.logits - fx[f"{case}.step.logits"][0]).abs().max()) < 1e-5


# --- the instruction's ids and checks ---------------------------------------------------------


def test_the_instruction_prompt_is_the_reference_string_tokenised_whole():
    tok = default_tokenizer()
    english = instruct_prompt_ids(tok, "Please say a sentence as loudly as possible.")
    assert english[:6] == SYS and english[6] == 5209 and english[-1] == EOP  # " Please"
    chinese = instruct_prompt_ids(tok, "请用广东话表达。")
    assert chinese[:7] == [*SYS, 220] and chinese[-1] == EOP  # the space is its own token
    assert english == tok.encode(INSTRUCT_PREFIX + KNOWN_GOOD_INSTRUCTIONS[17]
                                 + "<|endofprompt|>")
    # a marker inside the instruction is text: it cannot end the prompt early
    marked = instruct_prompt_ids(tok, "Shout.<|endofprompt|>Say this")
    assert marked.count(EOP) == 1 and marked[-1] == EOP


def test_the_26_known_good_instructions_pass_the_checks():
    assert len(KNOWN_GOOD_INSTRUCTIONS) == 26 == len(set(KNOWN_GOOD_INSTRUCTIONS))
    dialects = [i for i in KNOWN_GOOD_INSTRUCTIONS if i.endswith("话表达。")]
    assert len(dialects) == 17
    for text in KNOWN_GOOD_INSTRUCTIONS:
        check_instruction(text, 100)
    check_instruction("Voice: warm.\n\tTone: calm.\r\n", 100)  # multi-line prompts are fine


@pytest.mark.parametrize(("text", "code", "words"), [
    ("x" * 101, "instructions_too_long", "101 characters long; this model takes at most 100"),
    (" \n\t ", "invalid_value", "only whitespace"),
    ("Speak\x00slowly", "invalid_value", "a control character (U+0000) at character 5"),
    ("Speak\x1bslowly", "invalid_value", "a control character (U+001B)"),
    ("Speak\x85slowly", "invalid_value", "a control character (U+0085)"),
    ("Speak \ud800", "invalid_value", "a lone surrogate (U+D800) at character 6"),
    ("Speak \U000e0080", "invalid_value", "an unassigned code point (U+E0080)"),
])
def test_bad_instructions_are_refused_with_a_clear_400(text, code, words):
    with pytest.raises(InvalidRequestError) as info:
        check_instruction(text, 100)
    assert (info.value.status, info.value.param, info.value.code) == (400, "instructions", code)
    assert words in info.value.message


def test_the_header_says_applied_ignored_or_nothing():
    assert instructions_value(True, []) == "applied"
    assert instructions_value(False, ["backend", "instructions"]) == "ignored"
    assert instructions_value(False, ["backend"]) is None


# --- the LM stage -----------------------------------------------------------------------------


def _item(family: CosyVoice3Family, text: str, instructions: str | None) -> StageItem:
    ids = np.asarray(family.tokenizer.encode(text), np.int32)
    info = RequestInfo("r", "cosyvoice3", VOICE, "en", 5, True, instructions=instructions)
    return StageItem(info, 0, TextSegment(text, ids))


def test_the_lm_stage_prefills_the_instruction_without_prompt_tokens(family):
    lm = family.stages()[1]
    text, ins = "Hello there.", "Please say a sentence in a very soft voice."
    plain, instructed = lm.begin(_item(family, text, None)), lm.begin(_item(family, text, ins))
    model = family.models.lm
    x = torch.tensor(family.tokenizer.encode(text))
    ins_ids = torch.tensor(instruct_prompt_ids(family.tokenizer, ins))
    with torch.inference_mode():
        expected = model.prefill_embeds(x, ins_ids, None)
    voice = family.voice_models[VOICE]
    assert instructed.next_input.shape[1] == 1 + len(ins_ids) + len(x) + 1
    assert torch.equal(instructed.next_input[0], expected)
    assert plain.next_input.shape[1] == (1 + voice.prompt_text_ids.numel() + len(x) + 1
                                         + voice.prompt_tokens)
    # min/max length count X only; the flow side (hop schedule) keeps the voice's P prompt tokens
    assert (instructed.min_len, instructed.max_len) == (plain.min_len, plain.max_len)
    assert instructed.schedule is not None and plain.schedule is not None
    assert instructed.schedule.due(28) == plain.schedule.due(28)
    assert instructed.schedule.due(9) == plain.schedule.due(9)


# --- the engine ---------------------------------------------------------------------------------


def _sha(chunks) -> str:
    return hashlib.sha256(np.concatenate([c.samples for c in chunks]).tobytes()).hexdigest()


def test_the_engine_refuses_bad_instructions_and_serves_good_ones_repeatably():
    settings = load_settings(str(CONFIG), {"engine.warmup": False})

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            try:
                engine.submit(SpeechRequest("cosyvoice3", "Hi.", VOICE, instructions="a\x07b"))
            except InvalidRequestError as exc:
                refused = (exc.status, exc.param, exc.code)
            soft = "Please say a sentence in a very soft voice."
            runs = []
            for instructions in (soft, soft, None):
                stream = engine.submit(SpeechRequest("cosyvoice3", "Hello there.", VOICE, seed=2,
                                                     instructions=instructions))
                assert stream.state.request.instructions == instructions  # kept: followed
                runs.append(_sha(await stream.collect()))
            held = [q.stage.live_states() for q in engine.models["cosyvoice3"].queues]
            return refused, runs, held
        finally:
            engine.stop()

    refused, runs, held = asyncio.run(main())
    assert refused == (400, "instructions", "invalid_value")
    assert runs[0] == runs[1] != runs[2]  # seeded reruns equal; the instruction changes the LM
    assert held == [0, 0, 0]
