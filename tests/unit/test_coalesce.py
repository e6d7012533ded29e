"""Joining a stream's audio chunks into pieces of a minimum length (the Ray Serve path)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from voxflow.engine.request import AudioChunk, TimedWord
from voxflow.server.coalesce import coalesced, join_chunks


def chunk(index: int, n: int, last: bool = False, words: tuple[TimedWord, ...] = ()
          ) -> AudioChunk:
    samples = np.arange(n, dtype=np.float32) + 1000 * index
    return AudioChunk(samples, 16000, "r1", index, last, words)


async def _feed(chunks: list[AudioChunk]) -> AsyncIterator[AudioChunk]:
    for c in chunks:
        yield c


def run(chunks: list[AudioChunk], min_samples: int) -> list[AudioChunk]:
    async def collect() -> list[AudioChunk]:
        return [c async for c in coalesced(_feed(chunks), min_samples)]
    return asyncio.run(collect())


def test_short_chunks_are_joined_to_the_minimum_and_the_last_may_be_shorter():
    # 100 ms at 16 kHz = 1600 samples; chunks of 500 join by fours (2000 >= 1600)
    src = [chunk(i, 500) for i in range(9)] + [chunk(9, 300, last=True)]
    out = run(src, 1600)
    assert [len(c.samples) for c in out] == [2000, 2000, 800]
    assert [c.index for c in out] == [0, 4, 8]
    assert [c.is_last for c in out] == [False, False, True]
    joined = np.concatenate([c.samples for c in out])
    assert np.array_equal(joined, np.concatenate([c.samples for c in src]))


def test_long_chunks_pass_as_they_are_and_zero_passes_everything():
    src = [chunk(0, 2000), chunk(1, 1700), chunk(2, 10, last=True)]
    assert [len(c.samples) for c in run(src, 1600)] == [2000, 1700, 10]
    small = [chunk(i, 5) for i in range(4)] + [chunk(4, 5, last=True)]
    assert [c.index for c in run(small, 0)] == [0, 1, 2, 3, 4]


def test_words_stay_in_order_with_the_piece_that_holds_them():
    w1, w2 = TimedWord(0.0, 0.2, 0, 5), TimedWord(0.2, 0.4, 6, 11)
    out = run([chunk(0, 800, words=(w1,)), chunk(1, 800, words=(w2,)),
               chunk(2, 100, last=True)], 1600)
    assert [c.words for c in out] == [(w1, w2), ()]


def test_a_stream_that_ends_early_flushes_what_it_holds():
    out = run([chunk(0, 500), chunk(1, 500)], 1600)  # closed before its last chunk
    assert [(len(c.samples), c.is_last) for c in out] == [(1000, False)]


def test_join_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        join_chunks([])
