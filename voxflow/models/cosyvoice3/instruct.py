"""CosyVoice3 instruct mode: a request's `instructions` as the LM's instruct prompt.

Spec: `../shared/specs/cosyvoice3-instruct-bistream.md` §2 (instruct mode), §9 (voxflow's
choices), §10.6 (tests). The reference (`CosyVoice2.inference_instruct2`, inherited by CosyVoice3)
takes a whole instruct string; the CosyVoice3 form, used by its `example.py` and by the 26 entries
of `instruct_list` (`cosyvoice/utils/common.py`), is::

    "You are a helpful assistant. " + instruction + "<|endofprompt|>"

one space after the period, ``<|endofprompt|>`` last. Its ids, SYS ⧺ ids(" " + instruction) ⧺ EOP,
take the place of the zero-shot prompt text (SYS ⧺ EOP ⧺ transcript), and the LM gets **no prompt
speech tokens**: the LM input is ``E_speech[sos], E_text(INS ⧺ EOP ⧺ X), E_speech[task_id]``
(§2.3). The flow and HiFT are conditioned exactly as in zero-shot (the voice's prompt tokens,
prompt mel and speaker embedding; §2.1), and min/max length count only X (§2.1 item 4).

voxflow's rules (§9): the instruction is tokenised with special-token markers read as plain text
(``<|endofprompt|>`` inside an instruction cannot end the prompt early: the same escape as user
text, spec §11); it is not normalised (the reference does not normalise it either, §2.1 item 2);
it is refused with a 400 when it is longer than `max_instruction_chars`, holds only whitespace,
or holds control characters other than tab and line breaks (multi-line style prompts, as OpenAI
clients send them, stay valid), lone surrogates or unassigned code points.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from voxflow.errors import InvalidRequestError
from voxflow.models.cosyvoice3.text import ENDOFPROMPT_ID, SYSTEM_PROMPT, CosyVoice3Tokenizer

INSTRUCT_SEPARATOR = " "
"""Between the system prompt's period and the instruction (§2.2: one space, its own token 220
before CJK, merged into an English first word)."""

INSTRUCT_PREFIX = SYSTEM_PROMPT + INSTRUCT_SEPARATOR
"""``"You are a helpful assistant. "`` (§2.2)."""

ALLOWED_CONTROLS = frozenset("\t\n\r")
"""Control characters an instruction may hold (multi-line prompts); every other Cc is refused."""

KNOWN_GOOD_INSTRUCTIONS: tuple[str, ...] = (
    # 17 dialects ("Please speak in <dialect>.")
    "请用广东话表达。", "请用东北话表达。", "请用甘肃话表达。", "请用贵州话表达。",
    "请用河南话表达。", "请用湖北话表达。", "请用湖南话表达。", "请用江西话表达。",
    "请用闽南话表达。", "请用宁夏话表达。", "请用山西话表达。", "请用陕西话表达。",
    "请用山东话表达。", "请用上海话表达。", "请用四川话表达。", "请用天津话表达。",
    "请用云南话表达。",
    # volume
    "Please say a sentence as loudly as possible.",
    "Please say a sentence in a very soft voice.",
    # rate: as slowly / as fast as possible
    "请用尽可能慢地语速说一句话。", "请用尽可能快地语速说一句话。",
    # emotion: very happy, very sad, very angry
    "请非常开心地说一句话。", "请非常伤心地说一句话。", "请非常生气地说一句话。",
    # styles: Peppa Pig; a robot
    "我想体验一下小猪佩奇风格，可以吗？", "你可以尝试用机器人的方式解答吗？",
)
"""The instructions of the reference's `instruct_list` (spec addendum §2.2), without the prefix
and EOP voxflow adds: the known-good ones (docs/api.md). Not every one works (reference issue
#841); others are accepted but were not trained on as far as anyone published (§11)."""


def check_instruction(text: str, max_chars: int) -> None:
    """Refuse an instruction the LM prompt cannot take (400, ``param: instructions``).

    Args:
        text: the request's `instructions`, non-empty.
        max_chars: the `max_instruction_chars` setting (code points).
    Raises:
        InvalidRequestError: code ``instructions_too_long`` (over `max_chars` code points), or
            ``invalid_value`` (only whitespace; a control character other than tab, CR, LF; a
            lone surrogate; an unassigned code point), the message naming the first offender's
            position and code point.
    """
    if len(text) > max_chars:
        raise InvalidRequestError(
            f"instructions are {len(text)} characters long; this model takes at most "
            f"{max_chars}.", param="instructions", code="instructions_too_long")
    if not text.strip():
        raise InvalidRequestError("instructions hold only whitespace; send a style prompt such "
                                  "as 'Speak slowly and warmly.' or leave the field out.",
                                  param="instructions", code="invalid_value")
    for i, ch in enumerate(text):
        kind = unicodedata.category(ch)
        if (kind == "Cc" and ch not in ALLOWED_CONTROLS) or kind in ("Cs", "Cn"):
            what = {"Cc": "a control character", "Cs": "a lone surrogate",
                    "Cn": "an unassigned code point"}[kind]
            raise InvalidRequestError(
                f"instructions hold {what} (U+{ord(ch):04X}) at character {i}; only printable "
                "text, tabs and line breaks are allowed.", param="instructions",
                code="invalid_value")


def instruct_prompt_ids(tokenizer: CosyVoice3Tokenizer, instruction: str) -> list[int]:
    """INS ⧺ EOP for the LM (§2.2, §2.3): the ids of ``"You are a helpful assistant. "`` +
    `instruction`, tokenised whole (so the space merges as the reference's tokeniser merges it),
    special-token markers read as text, then ``<|endofprompt|>`` (151646)."""
    return [*tokenizer.encode(INSTRUCT_PREFIX + instruction, specials=False), ENDOFPROMPT_ID]


class InstructPrompts:
    """`instruct_prompt_ids` memoised per instruction string (every segment of a request, and
    every request with the same instruction, share one prefix; §2.3)."""

    def __init__(self, tokenizer: CosyVoice3Tokenizer, size: int = 256) -> None:
        self._ids = lru_cache(maxsize=size)(
            lambda text: tuple(instruct_prompt_ids(tokenizer, text)))

    def __call__(self, instruction: str) -> tuple[int, ...]:
        return self._ids(instruction)
