"""The engine's worker passes a segment's word timings on with its first part, and
RequestState moves a segment's word timings onto the response's time line (lead silence,
earlier segments, pauses) and sends them with the first chunk emitted after they arrive."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import KeyedStage, job, make_state

from voxflow.engine.worker import route
from voxflow.stages.outputs import Audio, Next, Parts, StreamedParts, WordTiming

RATE = 8000  # make_state's sample rate


def test_words_are_offset_by_silence_and_earlier_segments():
    state, sink = make_state()
    state.set_segment_plan({0: 0.5}, lead_silence_s=0.25)
    state.set_segment_count(2)
    # segment 1 arrives first: held until segment 0 is out
    state.deliver(1, np.zeros(RATE, np.float32), words=(WordTiming(0.1, 0.4, 6, 11),))
    state.deliver(0, np.zeros(RATE // 2, np.float32), part=0, final=False,
                  words=(WordTiming(0.0, 0.3, 0, 5),))
    first = sink.chunks[0].words
    assert [t for w in first for t in (w.start, w.end)] == pytest.approx([0.25, 0.55])
    state.deliver(0, np.zeros(RATE // 2, np.float32), part=1, final=True)
    words = [w for c in sink.chunks for w in c.words]
    # segment 1 starts after 0.25 lead + 1.0 audio + 0.5 pause
    assert [t for w in words for t in (w.start, w.end)] == pytest.approx([0.25, 0.55, 1.85, 2.15])
    assert [(w.text_start, w.text_end) for w in words] == [(0, 5), (6, 11)]
    assert sink.chunks[-1].is_last


def test_words_of_an_empty_part_wait_for_the_next_chunk_and_never_overlap():
    state, sink = make_state()
    state.set_segment_count(1)
    state.deliver(0, np.zeros(0, np.float32), part=0, final=False,
                  words=(WordTiming(0.0, 0.3, 0, 1), WordTiming(0.2, 0.5, 2, 3)))
    assert sink.chunks == []
    state.deliver(0, np.zeros(RATE, np.float32), part=1, final=True)
    words = sink.chunks[0].words
    assert [t for w in words for t in (w.start, w.end)] == pytest.approx([0.0, 0.3, 0.3, 0.5])


class Downstream:
    """A stage queue that keeps what is put on it (its stage passes nothing through)."""

    stage = KeyedStage()

    def __init__(self) -> None:
        self.jobs: list = []

    def put(self, job) -> None:
        self.jobs.append(job)


WORDS = (WordTiming(0.0, 0.2, 0, 5),)


@pytest.mark.parametrize("out", [
    Parts(["w0", "w1", "w2"], WORDS),
    StreamedParts(3, lambda: iter(["w0", "w1", "w2"]), WORDS),
])
def test_words_ride_with_the_first_part_only(out):
    state, _ = make_state()
    downstream = Downstream()
    route(KeyedStage(), job(state, 0, "segment"), out, downstream)
    assert [j.item.words for j in downstream.jobs] == [WORDS, None, None]
    assert [j.item.final for j in downstream.jobs] == [False, False, True]


def test_next_keeps_the_items_words_and_audio_delivers_them():
    state, sink = make_state()
    state.set_segment_count(1)
    downstream = Downstream()
    route(KeyedStage(), job(state, 0, "segment"), Next("decoded", WORDS), downstream)
    (passed,) = downstream.jobs
    assert passed.item.words == WORDS
    route(KeyedStage(), passed, Audio(np.zeros(RATE, np.float32)), None)
    (word,) = sink.chunks[0].words
    assert (word.start, word.end, word.text_start, word.text_end) == (0.0, 0.2, 0, 5)
