"""Fed (bistream) LM calls batched with each other and with ordinary decode rows (issue 43):
`lm_batch.forward_rows` gives each row its unbatched logits up to float rounding and the same
greedy tokens; on the engine a seeded fed session gives the same audio alone and beside three
other fed sessions; a parked row takes no call; cancelling a batched fed session frees it."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
pytest.importorskip("tiktoken")

from tests.unit.cosyvoice3_fixtures import tensors  # noqa: E402
from tests.unit.test_cosyvoice3_bistream_serving import (  # noqa: E402
    PIECES,
    _engine,
    _fed,
    _sha,
    _states_freed,
)
from voxflow.models.cosyvoice3.bistream import ENDOFPROMPT_ID, BistreamSchedule  # noqa: E402
from voxflow.models.cosyvoice3.lm import TINY_LM_CONFIG, CosyVoice3LM, KVCache  # noqa: E402
from voxflow.models.cosyvoice3.lm_batch import forward_rows  # noqa: E402
from voxflow.models.cosyvoice3.lm_bistream import BistreamDecoder, embed_call  # noqa: E402
from voxflow.models.cosyvoice3.sampling import GreedySampler  # noqa: E402

PROMPT = [5, 6, 7, ENDOFPROMPT_ID, 8, 9]


@pytest.fixture(scope="module")
def lm() -> CosyVoice3LM:
    model = CosyVoice3LM(TINY_LM_CONFIG)
    model.load_state_dict(tensors("lm_tiny_state_dict.safetensors.gz"), strict=True)
    return model.eval()


def _decoder(lm: CosyVoice3LM, text: list[int], prompt_tokens: list[int]) -> BistreamDecoder:
    schedule = BistreamSchedule(PROMPT, prompt_tokens, lm.speech_token_size)
    schedule.push(text)
    schedule.end()
    return BistreamDecoder(lm, schedule, GreedySampler())


TEXTS = [([11, 12, 13, 14, 15, 16, 17], [1, 2, 3]),
         ([21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31], [4] * 7),
         ([40, 41, 42], []),
         ([50, 51, 52, 53, 54, 55], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6])]


def test_batched_fed_rows_equal_each_row_alone(lm):
    alone = [_decoder(lm, *t) for t in TEXTS]
    together = [_decoder(lm, *t) for t in TEXTS]
    alone_logits: list[list[torch.Tensor]] = [[] for _ in TEXTS]
    for i, d in enumerate(alone):
        while (step := d.step()) is not None:
            alone_logits[i].append(step.logits)
    batched_logits: list[list[torch.Tensor]] = [[] for _ in TEXTS]
    while True:
        live = [(i, d, d.schedule.next_call()) for i, d in enumerate(together)]
        live = [(i, d, c) for i, d, c in live if c is not None]
        if not live:
            break
        rows = forward_rows(lm, [embed_call(lm, c)[0] for _, _, c in live],
                            [d.cache for _, d, _ in live])[0]
        for (i, d, c), row in zip(live, rows, strict=True):
            batched_logits[i].append(d.finish(c, row).logits)
    for i in range(len(TEXTS)):
        assert together[i].schedule.tokens == alone[i].schedule.tokens  # identical greedy
        assert together[i].schedule.stop == alone[i].schedule.stop
        assert len(batched_logits[i]) == len(alone_logits[i]) > 3
        for a, b in zip(alone_logits[i], batched_logits[i], strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
        assert together[i].cache.length == alone[i].cache.length


def test_fed_chunks_and_one_token_decode_rows_share_one_forward(lm):
    fed = _decoder(lm, [11, 12, 13, 14, 15, 16], [1, 2])
    plain_cache, plain_alone = KVCache(), KVCache()
    prefill = lm.prefill_embeds(torch.tensor([30, 31, 32]), torch.tensor(PROMPT),
                                torch.tensor([3, 4]))
    lm(prefill[None], plain_cache)
    lm(prefill[None], plain_alone)
    token = lm.embed_speech(torch.tensor([7]))  # [1, D]: a one-token decode row
    call = fed.schedule.next_call()
    assert call is not None and len(call.feed) > 1  # the fed row feeds a chunk
    rows = forward_rows(lm, [embed_call(lm, call)[0], token], [fed.cache, plain_cache])[0]
    reference = _decoder(lm, [11, 12, 13, 14, 15, 16], [1, 2])
    expected_fed = reference.step()
    expected_plain = lm(token[None], plain_alone)[0][0]
    assert expected_fed is not None
    torch.testing.assert_close(rows[0], expected_fed.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows[1], expected_plain, atol=1e-5, rtol=1e-5)
    assert fed.cache.length == len(call.feed) and plain_cache.length == plain_alone.length


def test_forward_rows_refuses_mismatched_or_empty_rows(lm):
    with pytest.raises(ValueError, match="2 input chunks for 1 caches"):
        forward_rows(lm, [torch.zeros(1, 64), torch.zeros(1, 64)], [KVCache()])
    with pytest.raises(ValueError, match="at least one position"):
        forward_rows(lm, [torch.zeros(0, lm.cfg.hidden_size)], [KVCache()])


def test_a_seeded_fed_session_sounds_the_same_alone_and_beside_three_others():
    async def session(engine, seed, text):
        feed, stream = _fed(engine, text[0], seed=seed)
        collected = asyncio.create_task(stream.collect())
        for piece in text[1:]:
            feed.push(piece)
            await asyncio.sleep(0.01)
        feed.end()
        return await collected

    async def main():
        engine = _engine()
        await engine.start()
        try:
            alone = await session(engine, 9, PIECES)
            crowd = await asyncio.gather(
                session(engine, 9, PIECES), session(engine, None, PIECES),
                session(engine, None, PIECES[2:]), session(engine, None, PIECES[:3]))
            return alone, crowd, await _states_freed(engine)
        finally:
            engine.stop()

    alone, crowd, freed = asyncio.run(main())
    sha, samples = _sha(alone)
    assert samples > 0 and samples % 960 == 0
    assert _sha(crowd[0]) == (sha, samples)
    assert all(_sha(c)[1] > 0 for c in crowd[1:])
    assert freed == [(0, 0), (0, 0), (0, 0)]


def test_cancelling_a_batched_fed_session_frees_its_state_and_spares_the_other():
    async def main():
        engine = _engine()
        await engine.start()
        try:
            feed_a, a = _fed(engine, "A long stream of text that keeps the model busy", seed=None)
            feed_b, b = _fed(engine, "Another stream, running beside the first one", seed=None)
            feed_a.push(" for a while, sentence after sentence, never ending on its own.")
            b_task = asyncio.create_task(b.collect())
            await asyncio.wait_for(a.__anext__(), 60)
            await a.aclose()  # cancelled while batched with b
            feed_b.push(" until it ends.")
            feed_b.end()
            return await b_task, await _states_freed(engine)
        finally:
            engine.stop()

    other, freed = asyncio.run(main())
    assert _sha(other)[1] > 0 and other[-1].is_last
    assert freed == [(0, 0), (0, 0), (0, 0)]


def test_a_parked_session_wakes_on_text_without_a_poll(monkeypatch):
    from voxflow.engine import ar_loop

    monkeypatch.setattr(ar_loop, "PARKED_MAX_WAIT_S", 600.0)  # only the nudge can wake it
    rounds = {"lm": 0}
    iterate = ar_loop.AutoregressiveLoop.iterate

    def counted(self):
        if self.stage.name == "lm":
            rounds["lm"] += 1
        return iterate(self)

    monkeypatch.setattr(ar_loop.AutoregressiveLoop, "iterate", counted)

    async def main():
        engine = _engine()
        await engine.start()
        try:
            feed, stream = _fed(engine, "Only a few")
            collected = asyncio.create_task(stream.collect())
            lm = engine.models["cosyvoice3"].queues[1].stage
            for _ in range(500):  # its first group's tokens, then it parks
                states = list(lm._live.values())
                if states and states[0].stream.schedule.waiting:
                    break
                await asyncio.sleep(0.01)
            parked = bool(states) and states[0].stream.schedule.waiting
            before = rounds["lm"]
            await asyncio.sleep(0.5)  # parked: the LM loop waits, it does not spin
            idle = rounds["lm"] - before
            feed.push(" words, then the rest of the sentence.")
            feed.end()
            return (parked, idle, await asyncio.wait_for(collected, 120),
                    await _states_freed(engine))
        finally:
            engine.stop()

    parked, idle, chunks, freed = asyncio.run(main())
    assert parked
    assert idle <= 1  # at most the round that was already waiting when the count began
    assert _sha(chunks)[1] > 0 and chunks[-1].is_last
    assert freed == [(0, 0), (0, 0), (0, 0)]
