"""voxflow.audio.stretch: time stretching with the pitch kept (Rubber Band via pedalboard), and
the split of a speed into the model's native part and the stretched rest."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from voxflow.audio.stretch import split_speed, time_stretch

RATE = 22_050


def sine(hz: float = 220.0, seconds: float = 2.0, rate: int = RATE) -> np.ndarray:
    """A sine at 0.5 with its second and third harmonics (voice-like), float32 (N,)."""
    t = np.arange(int(seconds * rate)) / rate
    x = 0.5 * np.sin(2 * np.pi * hz * t) + 0.15 * np.sin(4 * np.pi * hz * t)
    return (x + 0.05 * np.sin(6 * np.pi * hz * t)).astype(np.float32)


def dominant_hz(x: np.ndarray, rate: int = RATE) -> float:
    """Frequency of the strongest bin of the Hann-windowed spectrum of the middle half, Hz."""
    mid = x[x.size // 4 : 3 * x.size // 4]
    spectrum = np.abs(np.fft.rfft(mid * np.hanning(mid.size)))
    return float(np.argmax(spectrum) * rate / mid.size)


@pytest.mark.parametrize("factor", [0.25, 0.5, 0.8, 1.5, 2.0, 4.0])
def test_output_length_is_input_length_over_the_factor_exactly(factor):
    x = sine(seconds=1.2345)
    y = time_stretch(x, RATE, factor)
    assert y.dtype == np.float32 and y.ndim == 1
    assert y.size == round(x.size / factor)
    assert np.abs(y).max() <= 1.0


def test_factor_one_returns_the_input_itself_unprocessed():
    x = sine()
    assert time_stretch(x, RATE, 1.0) is x


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_a_220_hz_tone_stays_at_220_hz_stretched_by(factor):
    y = time_stretch(sine(), RATE, factor)
    assert dominant_hz(y) == pytest.approx(220.0, rel=0.02)


def test_the_stretched_tone_keeps_its_loudness():
    x = sine()
    y = time_stretch(x, RATE, 2.0)
    rms = float(np.sqrt(np.mean(np.square(y[y.size // 4 : 3 * y.size // 4]))))
    assert rms == pytest.approx(float(np.sqrt(np.mean(np.square(x)))), rel=0.2)


def test_the_same_input_gives_the_same_bytes_also_from_concurrent_threads():
    x = sine(seconds=1.0) + np.random.default_rng(0).normal(0, 0.05, RATE).astype(np.float32)
    first = time_stretch(x, RATE, 2.5).tobytes()
    assert time_stretch(x, RATE, 2.5).tobytes() == first
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: time_stretch(x, RATE, 2.5).tobytes(), range(8)))
    assert outs == [first] * 8


@pytest.mark.parametrize(("n", "factor", "m"), [(1, 4.0, 0), (100, 4.0, 25), (100, 0.25, 400),
                                                (0, 2.0, 0)])
def test_a_clip_too_short_to_stretch_is_only_cut_or_padded(n, factor, m):
    x = np.full(n, 0.25, np.float32)
    y = time_stretch(x, RATE, factor)
    assert y.size == m
    assert np.array_equal(y[: min(n, m)], x[: min(n, m)]) and not y[n:].any()


@pytest.mark.parametrize("factor", [0.0, -1.0, float("nan"), float("inf")])
def test_a_factor_that_is_not_a_positive_number_is_refused(factor):
    with pytest.raises(ValueError, match="factor"):
        time_stretch(sine(), RATE, factor)


def test_stereo_or_integer_audio_is_refused():
    with pytest.raises(ValueError, match="1-D"):
        time_stretch(np.zeros((2, 100), np.float32), RATE, 2.0)
    with pytest.raises(ValueError, match="floating"):
        time_stretch(np.zeros(100, np.int16), RATE, 2.0)


@pytest.mark.parametrize(("speed", "native", "stretch"), [
    (1.0, 1.0, 1.0), (0.8, 0.8, 1.0), (1.5, 1.5, 1.0),
    (4.0, 2.0, 2.0), (3.0, 2.0, 1.5), (0.25, 0.5, 0.5), (0.35, 0.5, 0.7),
])
def test_split_speed_renders_inside_the_range_and_stretches_the_rest(speed, native, stretch):
    got_native, got_stretch = split_speed(speed, 0.5, 2.0)
    assert got_native == native
    assert got_stretch == pytest.approx(stretch)
    assert got_native * got_stretch == pytest.approx(speed)
