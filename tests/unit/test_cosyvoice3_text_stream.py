"""Text ids for text that arrives in pieces (spec addendum §9 "Bistream input", §10.4): the
committed ids equal the whole text's tokenisation whatever the chunking (random splits of
random text: words, spaces and line breaks, punctuation, digits, contractions, CJK, emoji), and
`TextFeed` hands over each piece once, then the end."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("tiktoken")

from voxflow.models.cosyvoice3.text import default_tokenizer  # noqa: E402
from voxflow.models.cosyvoice3.text_stream import IncrementalTokenizer  # noqa: E402
from voxflow.stages.text_feed import TextFeed  # noqa: E402

ALPHABET = [*"ab cd'sEF 12.,!?\n\t\r", "  ", "é", "中文", "日本", "–", "'re", "'S", "😀",
            "\u00a0", "\u3000", "Hello", " world"]


def test_committed_ids_equal_the_whole_texts_whatever_the_chunking():
    tok = default_tokenizer()
    for seed in range(2000):
        rng = random.Random(seed)
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 30)))
        inc, ids, at = IncrementalTokenizer(tok), [], 0
        while at < len(text):
            n = rng.randrange(1, 6)
            ids += inc.push(text[at : at + n])
            at += n
        ids += inc.finish()
        assert ids == tok.encode_ordinary(text), (seed, text)


def test_a_word_split_across_pieces_is_held_until_it_is_complete():
    tok = default_tokenizer()
    inc = IncrementalTokenizer(tok)
    assert inc.push("Hello wor") == tok.encode_ordinary("Hello") and inc.held == " wor"
    assert inc.push("ld") == [] and inc.held == " world"
    assert inc.push("\n ") == tok.encode_ordinary(" world")  # the run of spaces is held
    assert inc.push("\nNext") == tok.encode_ordinary("\n \n")  # one pre-token, not two
    assert inc.finish() == tok.encode_ordinary("Next")
    whole = tok.encode_ordinary("Hello world\n \nNext")
    inc = IncrementalTokenizer(tok)
    assert [*inc.push("Hello world\n "), *inc.push("\nNext"), *inc.finish()] == whole
    assert tok.encode_ordinary("<|endofprompt|>") != [151646]  # markers are text here


def test_a_text_feed_hands_each_piece_over_once_then_the_end():
    feed = TextFeed()
    assert not feed.has_news and feed.take() == ("", False)
    feed.push("Hello ")
    feed.push("")
    feed.push("there.")
    assert feed.has_news and feed.chars == 12
    assert feed.take() == ("Hello there.", False) and not feed.has_news
    feed.end()
    assert feed.has_news and feed.take() == ("", True) and not feed.has_news and feed.ended
    with pytest.raises(ValueError, match="after the end"):
        feed.push("more")
    assert feed.idle_s() >= 0
