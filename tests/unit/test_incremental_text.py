"""`SentenceBuffer`: text arriving in pieces is given out sentence by sentence with the front
end's boundaries, each character once and with its offsets; clauses after a quiet wait; long
sentences cut under the limit; nothing lost whatever the pieces."""

from __future__ import annotations

import pytest

from voxflow.text.incremental import SentenceBuffer, TextSpan, speakable
from voxflow.text.segment import cut_within, last_pause_end

TEXT = ("Hello there. I met Dr. Smith today, and he said hi! Prices rose 3.5% in the U.S. "
        "last year. Then we went home")


def feed(buffer: SentenceBuffer, pieces: list[str]) -> list[TextSpan]:
    out: list[TextSpan] = []
    for piece in pieces:
        out += buffer.add(piece)
    return out


def test_a_sentence_is_given_out_once_the_next_one_begins():
    buffer = SentenceBuffer(4096)
    assert buffer.add("Hello there.") == []  # "Hello there.com"? not known yet
    assert buffer.add(" I") == [TextSpan("Hello there.", 0, 12)]
    assert buffer.pending == " I"


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_pieces_of_any_size_give_the_same_sentences_with_their_offsets(size):
    buffer = SentenceBuffer(4096)
    pieces = [TEXT[i:i + size] for i in range(0, len(TEXT), size)]
    spans = feed(buffer, pieces) + buffer.take_all()
    assert [s.text for s in spans] == [
        "Hello there.", "I met Dr. Smith today, and he said hi!",
        "Prices rose 3.5% in the U.S. last year.", "Then we went home"]
    assert all(TEXT[s.start:s.end] == s.text for s in spans)
    assert buffer.pending == "" and buffer.received_chars == len(TEXT)


def test_a_quiet_wait_takes_up_to_the_last_clause_and_keeps_the_rest():
    buffer = SentenceBuffer(4096)
    buffer.add("Well, I think, maybe")
    assert buffer.take_clause() == [TextSpan("Well, I think,", 0, 14)]
    assert buffer.pending == " maybe"
    assert buffer.take_clause() == []  # no punctuation: wait for more
    buffer.add(" so.")
    assert buffer.take_clause() == [TextSpan("maybe so.", 15, 24)]


def test_a_sentence_over_the_limit_is_cut_at_a_clause_or_space():
    buffer = SentenceBuffer(30)
    spans = buffer.add("one two three four five, six seven eight nine ten eleven twelve")
    assert [s.text for s in spans] == ["one two three four five,", "six seven eight nine ten"]
    assert all(len(s.text) <= 30 for s in spans)
    assert buffer.pending == " eleven twelve"


def test_a_paragraph_break_ends_a_sentence_and_symbols_stay_with_a_neighbour():
    buffer = SentenceBuffer(4096)
    assert [s.text for s in buffer.add("A list\n\nNext")] == ["A list"]
    spans = buffer.take_all()
    assert [s.text for s in spans] == ["Next"]
    buffer.add("Done. 🙂 ")
    assert [s.text for s in buffer.take_all()] == ["Done. 🙂"]
    assert not speakable(TextSpan("🙂🎉", 0, 2)) and speakable(TextSpan("a", 0, 1))


def test_the_helpers_from_the_front_end():
    assert last_pause_end("Hello world") is None
    assert last_pause_end("Hello, world") == 6
    assert last_pause_end("Done!") == 5
    assert last_pause_end("... ") is None  # nothing speakable before it
    assert cut_within("alpha beta gamma", 12) == 10
    with pytest.raises(ValueError, match="longer than limit"):
        cut_within("short", 10)
    with pytest.raises(ValueError, match="max_chars"):
        SentenceBuffer(0)
