"""CosyVoice3 token2wav loop parity with the reference trace (spec §1 build item 10, §9.7).

The tiny flow and HiFT (strict loads, HiFT `sine_waves` = `buf.sine_waves_prefix`) run the
scripted 40 LM tokens of `token2wav_tiny_meta.json` through `Token2WavSegment` with the tiny hops
(5, up to 20, ×2) and the flow fixture's prompt (P = 7): the filtered tokens are exact, the flow
and HiFT calls (token counts, offsets, hops, streaming and finalize flags, mel frames, samples)
equal the reference trace, and every accumulated mel and audio piece is within 1e-4 of
`token2wav_tiny_fixtures.safetensors` with exact lengths; stream, non-stream and speed 1.5.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from cosyvoice3_fixtures import meta, tensors, tiny_flow, tiny_hift, tiny_prompt  # noqa: E402

from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig  # noqa: E402
from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator  # noqa: E402
from voxflow.models.cosyvoice3.token2wav import (  # noqa: E402
    FlowPrompt,
    HopSchedule,
    Token2WavConfig,
    Token2WavSegment,
    resample_mel,
)

AUDIO = 1e-4  # spec §1: 10-step solves, the vocoder and end-to-end audio
SAMPLES_PER_FRAME = 480


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())


@pytest.fixture(scope="module")
def fx() -> dict[str, Any]:
    return tensors("token2wav_tiny_fixtures.safetensors")


@pytest.fixture(scope="module")
def trace() -> dict[str, Any]:
    out: dict[str, Any] = meta("token2wav_tiny_meta.json")
    return out


@pytest.fixture(scope="module")
def flow() -> CausalMaskedDiffWithDiT:
    return tiny_flow()


@pytest.fixture(scope="module")
def hift() -> CausalHiFTGenerator:
    return tiny_hift()


@pytest.fixture(scope="module")
def prompt() -> FlowPrompt:
    return tiny_prompt()


class Run:
    """One segment driven token by token; pieces and acc_mel snapshots per call."""

    def __init__(self, segment: Token2WavSegment, tokens: list[int]) -> None:
        self.segment = segment
        self.pieces: list[Any] = []
        self.acc_mels: list[Any] = []
        for token in tokens:
            self._take(segment.push(token))
        self._take(segment.finish())
        self.speech = torch.cat(self.pieces, dim=-1)

    def _take(self, pieces: list[Any]) -> None:
        for piece in pieces:
            self.pieces.append(piece)
            assert self.segment.acc_mel is not None
            self.acc_mels.append(self.segment.acc_mel.clone())


def run(flow: Any, hift: Any, prompt: FlowPrompt, tokens: list[int], **kw: Any) -> Run:
    return Run(Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), **kw), tokens)


MODES = {  # fixture prefix -> Token2WavSegment arguments
    "stream": {"mode": "streaming"},
    "nonstream": {"mode": "offline"},
    "nonstream_speed1.5": {"mode": "streaming", "speed": 1.5},  # speed ≠ 1 goes offline
}


@pytest.fixture(scope="module")
def runs(flow: Any, hift: Any, prompt: FlowPrompt, trace: dict[str, Any]) -> dict[str, Run]:
    return {name: run(flow, hift, prompt, trace["script_tokens"], **kw)
            for name, kw in MODES.items()}


# ---- the reference trace ----


@pytest.mark.parametrize("name", list(MODES))
def test_tokens_after_the_silent_filter_are_exact(runs: dict[str, Run], fx: dict[str, Any],
                                                  name: str) -> None:
    tokens = runs[name].segment.tokens
    assert tokens == fx[f"{name}.tokens_after_filter"].tolist()
    assert len(tokens) == 37  # 40 scripted, the 6th-8th silent tokens of the run dropped


@pytest.mark.parametrize("name", list(MODES))
def test_calls_equal_the_reference_trace(runs: dict[str, Run], trace: dict[str, Any],
                                         name: str) -> None:
    assert [c.as_reference() for c in runs[name].segment.calls] == trace[name]


def test_stream_hops_offsets_and_flags(runs: dict[str, Run]) -> None:
    calls = runs["stream"].segment.calls
    # first hop 5 + pad 3 (P = 7), then 10; 37 tokens never meet 18 + 20 + 3, so the flush.
    assert [(c.n_tokens, c.token_offset, c.hop) for c in calls] == [
        (11, 0, 8), (21, 8, 10), (37, 18, None)]
    assert [(c.stream, c.finalize) for c in calls] == [(True, False), (True, False),
                                                       (False, True)]
    assert [c.acc_mel_frames for c in calls] == [16, 36, 74]
    assert [c.emitted for c in calls] == [3840, 9600, 22080]
    # HiFT holds 8 frames back until the final call.
    assert [c.speech_offset_after for c in calls] == [480 * 8, 480 * 28, 480 * 74]
    assert runs["stream"].segment.offset == 18


def test_speed_resamples_74_frames_to_49(runs: dict[str, Run]) -> None:
    (call,) = runs["nonstream_speed1.5"].segment.calls
    assert (call.acc_mel_frames, call.vocoded_frames, call.emitted) == (74, 49, 49 * 480)
    assert runs["nonstream_speed1.5"].segment.mode == "offline"


@pytest.mark.parametrize("name", list(MODES))
def test_audio_and_acc_mel_match_the_reference(runs: dict[str, Run], fx: dict[str, Any],
                                               trace: dict[str, Any], name: str) -> None:
    r = runs[name]
    assert len(r.pieces) == len(trace[name])
    for i, (piece, acc) in enumerate(zip(r.pieces, r.acc_mels, strict=True)):
        ref_speech, ref_mel = fx[f"{name}.chunk{i}.speech"], fx[f"{name}.chunk{i}.acc_mel"]
        assert piece.shape == ref_speech.shape and piece.dtype == torch.float32
        assert acc.shape == ref_mel.shape
        assert max_diff(acc, ref_mel) < AUDIO
        assert max_diff(piece, ref_speech) < AUDIO
    assert r.speech.shape == fx[f"{name}.speech"].shape
    assert max_diff(r.speech, fx[f"{name}.speech"]) < AUDIO


def test_stream_and_offline_differ_as_the_reference_does(runs: dict[str, Run]) -> None:
    """The streamed chunk attention changes the audio (reference: up to 0.024), so the two
    parity checks above are not the same check."""
    assert max_diff(runs["stream"].speech, runs["nonstream"].speech) > 1e-3


# ---- the actual model calls ----


def test_flow_and_hift_are_called_as_the_trace_says(flow: Any, hift: Any, prompt: FlowPrompt,
                                                    trace: dict[str, Any],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment plans each flow call (conditioning on n tokens), solves it (the decoder's
    Euler loop, eagerly here; the served stage batches it, `FlowBucketRunner`) and vocodes."""
    seen: list[tuple[Any, ...]] = []
    planned: list[tuple[int, bool]] = []
    conditioning, decoder_forward = flow.conditioning, flow.decoder.forward
    hift_decode = hift.decode

    def conditioning_spy(token: Any, *args: Any) -> Any:
        planned.append((token.shape[1], args[-1]))
        return conditioning(token, *args)

    def decoder_spy(mu: Any, *args: Any, streaming: bool, **kw: Any) -> Any:
        out = decoder_forward(mu, *args, streaming=streaming, **kw)
        n, finalize = planned.pop(0)
        frames = out.shape[-1] - 2 * prompt.tokens
        seen.append(("flow", n, streaming, finalize, frames))
        return out

    def hift_spy(mel: Any, source: Any, finalize: bool = True) -> Any:
        out = hift_decode(mel, source, finalize=finalize)
        seen.append(("hift", mel.shape[-1], finalize, out.shape[-1]))
        return out

    monkeypatch.setattr(flow, "conditioning", conditioning_spy)
    monkeypatch.setattr(flow.decoder, "forward", decoder_spy)
    monkeypatch.setattr(hift, "decode", hift_spy)
    run(flow, hift, prompt, trace["script_tokens"], mode="streaming")
    # HiFT's decoder gets a streamed call's mel without the F0's 3 lookahead frames; these
    # streams are too short for a window (`hift.DECODER_CONTEXT_FRAMES`): it starts at frame 0.
    assert seen == [
        ("flow", 11, True, False, 16), ("hift", 13, False, 480 * 8),
        ("flow", 21, True, False, 36), ("hift", 33, False, 480 * 28),
        ("flow", 37, False, True, 74), ("hift", 74, True, 480 * 74),
    ]
    seen.clear()
    run(flow, hift, prompt, trace["script_tokens"], mode="offline", speed=1.5)
    assert seen == [("flow", 37, False, True, 74), ("hift", 49, True, 480 * 49)]


# ---- per-request state ----


def test_each_segment_starts_from_the_first_hop(flow: Any, hift: Any, prompt: FlowPrompt,
                                                trace: dict[str, Any],
                                                runs: dict[str, Run]) -> None:
    """The reference keeps the grown hop (20) for the next request; here the second segment on
    the same models repeats the first one's calls and audio bit for bit."""
    again = run(flow, hift, prompt, trace["script_tokens"], mode="streaming")
    assert again.segment.calls == runs["stream"].segment.calls
    assert torch.equal(again.speech, runs["stream"].speech)


def test_pushing_all_tokens_at_once_gives_the_same_calls(flow: Any, hift: Any,
                                                         prompt: FlowPrompt,
                                                         trace: dict[str, Any],
                                                         runs: dict[str, Run]) -> None:
    """Arrival timing does not matter: triggers fire in order on the token prefix."""
    segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny())
    pieces = segment.push(trace["script_tokens"])
    assert len(pieces) == 2  # both streamed chunks are due at once
    pieces += segment.finish()
    assert segment.calls == runs["stream"].segment.calls
    assert torch.equal(torch.cat(pieces, dim=-1), runs["stream"].speech)


def test_offline_push_calls_no_model_and_the_filter_can_be_off(flow: Any, hift: Any,
                                                               prompt: FlowPrompt,
                                                               trace: dict[str, Any]) -> None:
    segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), mode="offline",
                               filter_silent=False)
    assert segment.push(trace["script_tokens"]) == []
    assert segment.tokens == trace["script_tokens"] and segment.calls == []


def test_an_empty_segment_is_silence(flow: Any, hift: Any, prompt: FlowPrompt) -> None:
    for mode in ("streaming", "offline"):
        segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), mode=mode)
        (piece,) = segment.finish()
        assert piece.shape == (1, 0) and segment.calls == []


def test_stop_ids_and_negative_ids_are_refused(flow: Any, hift: Any, prompt: FlowPrompt) -> None:
    segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), mode="offline")
    for bad in (81, 137, -1):  # tiny S = 81: every id >= S is a stop id
        with pytest.raises(ValueError, match="outside"):
            segment.push(bad)
    segment.push(80)
    assert segment.tokens == [80]


def test_a_finished_segment_refuses_more(flow: Any, hift: Any, prompt: FlowPrompt) -> None:
    segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), mode="offline")
    segment.finish()
    with pytest.raises(RuntimeError):
        segment.push(3)
    with pytest.raises(RuntimeError):
        segment.finish()


# ---- hop schedule and settings (spec §9.3, §9.7) ----


def hops(schedule: HopSchedule, n: int) -> list[int]:
    return [schedule.advance() for _ in range(n)]


def test_tiny_schedule() -> None:
    s = HopSchedule(Token2WavConfig.tiny(), prompt_tokens=7)
    assert s.pad == 3 and not s.due(10) and s.due(11)
    assert hops(s, 5) == [8, 10, 20, 20, 20]
    assert s.offset == 78


@pytest.mark.parametrize("prompt_tokens", range(0, 101))
def test_full_size_schedule_first_audio_needs_28_to_52_tokens(prompt_tokens: int) -> None:
    s = HopSchedule(Token2WavConfig(), prompt_tokens)
    first = next(n for n in range(200) if s.due(n))
    assert 28 <= first <= 52
    assert (prompt_tokens + first - 3) % 25 == 0  # P + offset chunk-aligned after the first hop
    assert hops(s, 4)[1:] == [50, 100, 100]


def test_hop_must_be_half_the_flow_chunk(flow: Any, hift: Any, prompt: FlowPrompt) -> None:
    with pytest.raises(ValueError, match="static_chunk_size"):
        Token2WavSegment(flow, hift, prompt, Token2WavConfig())  # 25 vs the tiny chunk 10
    with torch.device("meta"):  # full size: chunk 50 frames = 2 x hop 25
        full = CausalMaskedDiffWithDiT(FlowConfig(), noise=torch.zeros(1, 80, 1))
    Token2WavConfig().check_flow(full)
    with pytest.raises(ValueError, match="static_chunk_size"):
        Token2WavConfig.tiny().check_flow(full)


@pytest.mark.parametrize("kw", [{"token_hop_len": 0}, {"token_max_hop_len": 10},
                                {"stream_scale_factor": 0}])
def test_bad_hop_settings(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Token2WavConfig(**kw)


def test_bad_mode_and_speed(flow: Any, hift: Any, prompt: FlowPrompt) -> None:
    with pytest.raises(ValueError):
        Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), mode="stream")  # type: ignore[arg-type]
    for speed in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), speed=speed)


def test_prompt_shapes_are_checked(prompt: FlowPrompt) -> None:
    with pytest.raises(ValueError, match="2P"):
        FlowPrompt(prompt.prompt_token, prompt.prompt_feat[:, :-1], prompt.embedding)


# ---- speed resample (spec §9.7 item 5) ----


def test_resample_mel_is_the_spec_formula() -> None:
    """Output frame i reads source position (i + 1/2)·T/n − 1/2, clamped at 0, linearly."""
    mel = torch.randn(1, 80, 74, generator=torch.Generator().manual_seed(0))
    for speed in (1.5, 0.7, 3.0):
        out = resample_mel(mel, speed)
        t = mel.shape[-1]
        n = int(t / speed)
        assert out.shape == (1, 80, n)
        pos = ((torch.arange(n, dtype=torch.float64) + 0.5) * t / n - 0.5).clamp(min=0)
        lo = pos.floor().long().clamp(max=t - 1)
        hi = (lo + 1).clamp(max=t - 1)
        w = (pos - lo).float()
        ref = mel[:, :, lo] * (1 - w) + mel[:, :, hi] * w
        assert max_diff(out, ref) < 1e-4  # torch forms the fp32 positions in its own order
    assert resample_mel(mel, 1.0) is mel
    assert resample_mel(mel[:, :, :1], 2.0).shape == (1, 80, 0)


# ---- the settled-frame flow cache (`flow_settled_cache`) ----


def test_a_cached_segment_gives_the_uncached_pieces_and_frees_its_cache(
    flow: Any, hift: Any, prompt: FlowPrompt, trace: dict[str, Any]
) -> None:
    # 45 tokens (1.8 s: the tiny sine-wave prefix holds 2 s): chunks of 8, 10 and 20 tokens,
    # then the final full-attention call.
    tokens = (trace["script_tokens"] * 2)[:45]
    plain = run(flow, hift, prompt, tokens)
    segment = Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), flow_cache=True)
    held: list[int] = []
    pieces = []
    for token in tokens:
        pieces += segment.push(token)
        held.append(segment.cache_bytes)
    settled = segment.flow_cache.settled
    assert settled == 2 * (prompt.tokens + segment.offset)  # every streamed frame is cached
    assert max(held) == segment.flow_cache.nbytes > 0
    pieces += segment.finish()
    assert segment.cache_bytes == 0  # the final call recomputes all frames and drops the cache
    assert len(segment.calls) == 4
    assert ([c.as_reference() for c in segment.calls]
            == [c.as_reference() for c in plain.segment.calls])
    assert [p.shape for p in pieces] == [p.shape for p in plain.pieces]
    for piece, ref in zip(pieces, plain.pieces, strict=True):
        assert max_diff(piece, ref) <= 1e-5


def test_offline_segments_never_cache(flow: Any, hift: Any, prompt: FlowPrompt) -> None:
    assert Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), mode="offline",
                            flow_cache=True).flow_cache is None
    assert Token2WavSegment(flow, hift, prompt, Token2WavConfig.tiny(), speed=1.5,
                            flow_cache=True).flow_cache is None
