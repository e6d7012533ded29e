"""CosyVoice3 prompt features (spec §4 "Prompt features", build item 3), in torch.

Three front ends turn a prompt recording into what a voice file holds (spec §9.5):

- `matcha_mel` — 24 kHz Matcha-TTS mel (the flow's ``prompt_feat`` and HiFT's input domain):
  n_fft = win = 1920, hop 480, periodic Hann, 720-sample reflect pad each side, no centring,
  magnitude √(re² + im² + 1e-9), 80 Slaney mels over 0–12 kHz, ln(max(x, 1e-5)).
  `prompt_feat` is the same (frames, 80) as the flow takes it.
- `kaldi_fbank` — 16 kHz Kaldi fbank, 80 bins (the speaker encoder CAM++'s input, after
  `speaker_fbank` removes the mean over time): 25 ms / 10 ms frames cut at the edges, DC removed,
  preemphasis 0.97, povey window, 512-point power spectrum, Kaldi's mel bank 20 Hz–8 kHz,
  ln(max(x, float32 eps)); dither 0; the wave is float in [−1, 1], not int16-scaled.
- `whisper_log_mel` — 16 kHz Whisper 128-bin log-mel (the S3 speech tokenizer's input): n_fft 400,
  hop 160, periodic Hann, centred with reflect padding, last frame dropped, power, Slaney mels,
  log10(max(x, 1e-10)), floored at max − 8, then (x + 4)/4.

Mel filters are built here (`slaney_mel_filters`, librosa's construction in float64, cast to
float32), so only torch and numpy are needed.

Parity (fixtures `frontend_fixtures.safetensors`, float32 on the CPU): the Matcha mel is within
1e-5 of the reference. The fbank and Whisper mel reach the spec's 1e-5 wherever the reference's
own float32 rounding allows: in cells of very low energy (near-DC fbank bins, a few Whisper
cells) the reference's float32 FFT result differs from the exact (float64) value by up to 1.6e-4
(fbank) and 2.5e-5 (Whisper), and an FFT on another CPU rounds differently; see the tests for the
bounds measured.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

# spec §4: 24 kHz Matcha mel (the CosyVoice3 yaml's feat_extractor)
MEL_SAMPLE_RATE = 24000
MEL_N_FFT = 1920
MEL_HOP = 480  # one mel frame = 480 samples = 20 ms (50 fps)
MEL_BINS = 80
MEL_FMIN = 0.0
MEL_FMAX = 12000.0
MEL_MAG_EPS = 1e-9
MEL_LOG_FLOOR = 1e-5
# spec §4: 16 kHz Kaldi fbank (torchaudio.compliance.kaldi.fbank defaults, 80 bins, dither 0)
FBANK_SAMPLE_RATE = 16000
FBANK_WINDOW = 400  # 25 ms
FBANK_SHIFT = 160  # 10 ms
FBANK_N_FFT = 512  # the window rounded up to a power of two
FBANK_BINS = 80
FBANK_LOW_HZ = 20.0
FBANK_HIGH_HZ = 8000.0  # Nyquist
FBANK_PREEMPHASIS = 0.97
FBANK_POVEY_POWER = 0.85
FBANK_LOG_FLOOR = float(torch.finfo(torch.float32).eps)
# spec §4: 16 kHz Whisper log-mel (openai-whisper audio.py, n_mels 128)
WHISPER_SAMPLE_RATE = 16000
WHISPER_N_FFT = 400
WHISPER_HOP = 160
WHISPER_BINS = 128
WHISPER_LOG_FLOOR = 1e-10
WHISPER_DYNAMIC_RANGE = 8.0


def _as_batch(wave: torch.Tensor, name: str) -> torch.Tensor:
    if wave.dim() == 1:
        wave = wave.unsqueeze(0)
    if wave.dim() != 2:
        raise ValueError(f"{name}: wave must be (N,) or (B, N), got {tuple(wave.shape)}")
    if not wave.is_floating_point():
        raise ValueError(f"{name}: wave must be float in [-1, 1], got {wave.dtype}")
    return wave


def _hz_to_slaney_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    logstep = math.log(6.4) / 27.0
    mel = hz / f_sp
    log_part = hz >= min_log_hz
    mel[log_part] = min_log_hz / f_sp + np.log(hz[log_part] / min_log_hz) / logstep
    return mel


def _slaney_mel_to_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = math.log(6.4) / 27.0
    hz = f_sp * mel
    log_part = mel >= min_log_mel
    hz[log_part] = min_log_hz * np.exp(logstep * (mel[log_part] - min_log_mel))
    return hz


@functools.cache
def _slaney_mel_filters_np(
    sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float
) -> npt.NDArray[np.float32]:
    fft_hz = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    edges = np.array([fmin, fmax], dtype=np.float64)
    lo, hi = _hz_to_slaney_mel(edges.copy())
    mel_hz = _slaney_mel_to_hz(np.linspace(lo, hi, n_mels + 2))
    widths = np.diff(mel_hz)
    ramps = mel_hz[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (mel_hz[2:] - mel_hz[:-2]))[:, None]  # Slaney area normalisation
    return weights.astype(np.float32)


def slaney_mel_filters(
    sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None
) -> torch.Tensor:
    """Slaney-style triangular mel filters, area-normalised (librosa's ``filters.mel`` default).

    Returns (n_mels, n_fft // 2 + 1) float32 on the CPU, rows over frequency bins 0…sr/2.
    Built in float64 then cast; ``fmax`` None means sample_rate / 2. Cached; a fresh tensor
    each call.
    """
    top = sample_rate / 2 if fmax is None else fmax
    return torch.from_numpy(
        _slaney_mel_filters_np(sample_rate, n_fft, n_mels, float(fmin), float(top)).copy()
    )


def matcha_mel(wave: torch.Tensor) -> torch.Tensor:
    """24 kHz Matcha-TTS log-mel (spec §4 "Prompt mel"; reference ``matcha/utils/audio.py``).

    ``wave``: (N,) or (B, N) float at 24 kHz in [−1, 1] (N ≥ 721 for the reflect pad). Returns
    (B, 80, N // 480) in the wave's dtype and device: natural-log magnitude mel, 50 fps.
    Raises ValueError on another shape or an integer wave.
    """
    wave = _as_batch(wave, "matcha_mel")
    pad = (MEL_N_FFT - MEL_HOP) // 2  # 720
    padded = F.pad(wave.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    window = torch.hann_window(MEL_N_FFT, dtype=wave.dtype, device=wave.device)
    spec = torch.stft(
        padded,
        MEL_N_FFT,
        hop_length=MEL_HOP,
        win_length=MEL_N_FFT,
        window=window,
        center=False,
        onesided=True,
        return_complex=True,
    )
    spec = torch.view_as_real(spec)
    magnitude = torch.sqrt(spec.pow(2).sum(-1) + MEL_MAG_EPS)
    filters = slaney_mel_filters(MEL_SAMPLE_RATE, MEL_N_FFT, MEL_BINS, MEL_FMIN, MEL_FMAX)
    filters = filters.to(device=wave.device, dtype=wave.dtype)
    # one (80, F) product per row: a batched matmul picks its kernel by the batch size on some
    # CPUs (Intel Xeon, torch 2.13: rows 3.6e-7 off their lone call), and a row must not
    # depend on its batch
    mel = torch.stack([filters @ row for row in magnitude])
    return torch.log(torch.clamp(mel, min=MEL_LOG_FLOOR))


def prompt_feat(wave: torch.Tensor) -> torch.Tensor:
    """The flow's prompt mel (spec §4, §9.5): `matcha_mel` as (B, frames, 80), frames = N // 480.

    ``wave``: (N,) or (B, N) float at 24 kHz. Same errors as `matcha_mel`.
    """
    return matcha_mel(wave).transpose(1, 2)


@functools.cache
def _kaldi_mel_banks() -> torch.Tensor:
    # Kaldi's mel scale 1127·ln(1 + f/700); triangles evenly spaced in mel between 20 Hz and
    # 8 kHz, over the 256 non-Nyquist bins (a zero column is appended for bin 256). Built in
    # float32 as torchaudio does; the mel of each bin uses a correctly rounded float32 log.
    def mel(hz: float) -> float:
        return 1127.0 * math.log(1.0 + hz / 700.0)

    low, high = mel(FBANK_LOW_HZ), mel(FBANK_HIGH_HZ)
    delta = (high - low) / (FBANK_BINS + 1)
    index = torch.arange(FBANK_BINS).unsqueeze(1)
    left = low + index * delta
    center = low + (index + 1.0) * delta
    right = low + (index + 2.0) * delta
    bin_hz = (FBANK_SAMPLE_RATE / FBANK_N_FFT) * torch.arange(FBANK_N_FFT // 2)
    ratio = 1.0 + bin_hz / 700.0
    bin_mel = (1127.0 * ratio.double().log().float()).unsqueeze(0)
    rising = (bin_mel - left) / (center - left)
    falling = (right - bin_mel) / (right - center)
    banks = torch.clamp(torch.minimum(rising, falling), min=0.0)
    return F.pad(banks, (0, 1))


def kaldi_mel_banks() -> torch.Tensor:
    """Kaldi's 80 triangular mel filters for 16 kHz / 512-point FFT, 20 Hz–8 kHz (spec §4).

    Returns (80, 257) float32 on the CPU (unnormalised triangles of height 1; the Nyquist column
    is zero). A fresh tensor each call.
    """
    return _kaldi_mel_banks().clone()


def kaldi_fbank(wave: torch.Tensor) -> torch.Tensor:
    """80-bin Kaldi fbank of a 16 kHz wave (spec §4 "Speaker"; torchaudio.compliance.kaldi.fbank
    with ``num_mel_bins=80, dither=0, sample_frequency=16000``, other options default).

    ``wave``: (N,) or (1, N) float at 16 kHz in [−1, 1] (not int16-scaled), N ≥ 400. Returns
    (1 + (N − 400) // 160, 80) natural-log mel energies in the wave's dtype. Raises ValueError on
    a batch of more than one wave, an integer wave, or N < 400.
    """
    wave = _as_batch(wave, "kaldi_fbank")
    if wave.shape[0] != 1:
        raise ValueError(f"kaldi_fbank: one wave at a time, got a batch of {wave.shape[0]}")
    samples = wave[0]
    if samples.numel() < FBANK_WINDOW:
        raise ValueError(
            f"kaldi_fbank: need at least {FBANK_WINDOW} samples, got {samples.numel()}"
        )
    count = 1 + (samples.numel() - FBANK_WINDOW) // FBANK_SHIFT
    frames = samples.contiguous().as_strided((count, FBANK_WINDOW), (FBANK_SHIFT, 1))
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)  # x[-1] := x[0]
    frames = frames - FBANK_PREEMPHASIS * previous
    window = torch.hann_window(
        FBANK_WINDOW, periodic=False, dtype=wave.dtype, device=wave.device
    ).pow(FBANK_POVEY_POWER)
    frames = F.pad(frames * window, (0, FBANK_N_FFT - FBANK_WINDOW))
    power = torch.fft.rfft(frames).abs().pow(2.0)
    energies = torch.mm(power, _kaldi_mel_banks().to(device=wave.device, dtype=wave.dtype).T)
    floor = torch.tensor(FBANK_LOG_FLOOR, dtype=wave.dtype, device=wave.device)
    return torch.maximum(energies, floor).log()


def speaker_fbank(wave: torch.Tensor) -> torch.Tensor:
    """The speaker encoder's input (spec §4): `kaldi_fbank` minus its mean over time.

    ``wave``: (N,) or (1, N) float at 16 kHz. Returns (frames, 80). Same errors as `kaldi_fbank`.
    """
    fbank = kaldi_fbank(wave)
    return fbank - fbank.mean(dim=0, keepdim=True)


def whisper_log_mel(wave: torch.Tensor) -> torch.Tensor:
    """128-bin Whisper log-mel of a 16 kHz wave (spec §4 "Speech tokens"; openai-whisper
    ``log_mel_spectrogram(wave, n_mels=128)``), the S3 tokenizer's input.

    ``wave``: (N,) or (B, N) float at 16 kHz in [−1, 1] (N ≥ 201). Returns (B, 128, N // 160) in
    the wave's dtype: log10 power mel, floored at its maximum − 8 over the whole batch, mapped by
    (x + 4) / 4. Raises ValueError on another shape or an integer wave.
    """
    wave = _as_batch(wave, "whisper_log_mel")
    window = torch.hann_window(WHISPER_N_FFT, dtype=wave.dtype, device=wave.device)
    spec = torch.stft(wave, WHISPER_N_FFT, WHISPER_HOP, window=window, return_complex=True)
    power = spec[..., :-1].abs() ** 2
    filters = slaney_mel_filters(WHISPER_SAMPLE_RATE, WHISPER_N_FFT, WHISPER_BINS)
    mel = filters.to(device=wave.device, dtype=wave.dtype) @ power
    log_mel = torch.clamp(mel, min=WHISPER_LOG_FLOOR).log10()
    log_mel = torch.maximum(log_mel, log_mel.max() - WHISPER_DYNAMIC_RANGE)
    return (log_mel + 4.0) / 4.0


def align_prompt(feat: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Trim a prompt so 2 mel frames match each speech token (spec §4 "Align").

    ``feat``: (frames, 80) or (1, frames, 80) prompt mel; ``tokens``: (P,) or (1, P) speech
    tokens. With L = min(frames // 2, P), returns (feat's first 2L frames, tokens' first L),
    each keeping its input layout. Raises ValueError if the time axes cannot be found.
    """
    frame_axis = feat.dim() - 2
    token_axis = tokens.dim() - 1
    if frame_axis not in (0, 1) or token_axis not in (0, 1):
        raise ValueError(
            f"align_prompt: feat (frames, 80) or (1, frames, 80) and tokens (P,) or (1, P), "
            f"got {tuple(feat.shape)} and {tuple(tokens.shape)}"
        )
    length = min(feat.shape[frame_axis] // 2, tokens.shape[token_axis])
    return feat.narrow(frame_axis, 0, 2 * length), tokens.narrow(token_axis, 0, length)
