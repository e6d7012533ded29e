"""CosyVoice3's fixed random buffers (spec §8, build item 2).

The reference draws these buffers at construction time; they are not in any state dict:

- flow ``rand_noise`` (1, 80, 15000) float32: the Euler solve's x₀, ``rand_noise[:, :, :T]``
  (spec §6). Seed 0, then ``randn(1, 80, 15000)`` on the CPU. The same for tiny and full size.
  15000 frames at 50 fps cap prompt + speech at 300 s.
- HiFT ``m_source.l_sin_gen.sine_waves`` (1, 7_200_000, 9) float32, uniform [0, 1): the NSF
  source's noise (spec §7), indexed from sample 0. 7.2 M samples at 24 kHz is another 300 s cap.
  At full size it follows the RNG order of the fixture README §6 (after the flow noise: the flow
  embedding and speaker projection inits, the F0 predictor's init, ``rand_ini``); replayed here
  draw by draw with a private generator and checked against the recorded sha256.
- HiFT ``rand_ini`` (1, 9) and ``uv`` (1, 7_200_000, 1) have no effect on the output (spec §7);
  they are replayed only to check the RNG order.
- Tiny HiFT: only the fixture's 48,000-sample prefix (``buf.sine_waves_prefix``) is known;
  `extend_sine_waves` continues it from a fixed-seed generator, and audio past the prefix is not
  parity-covered.

Nothing here touches the global RNG: every draw uses its own ``torch.Generator``.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import torch

# spec §8 / fixtures flow_tiny_meta.json and full_size_noise_buffers.json
NOISE_SEED = 0
RAND_NOISE_SHAPE = (1, 80, 15000)
RAND_NOISE_SHA256 = "584a26e6eaad944407a96c5999aaa5cd0a6a359309a841eade68bf805c072322"
SINE_WAVES_SHAPE = (1, 7_200_000, 9)
SINE_WAVES_SHA256 = "2f60f92217f65e9f2728d4e662f520432603d88e7a24f78666cc88bb76247f61"
RAND_INI_SHAPE = (1, 9)
RAND_INI_SHA256 = "7dd3ebf888575a2514d2ae7a19adadd351540458ca331fc9518a361f0dee9d01"
UV_SHAPE = (1, 7_200_000, 1)
UV_SHA256 = "d498fff51790510286a8d5dd79457f9240ebf4495a1b513e7a9ca4636ee6e18e"

MAX_MEL_FRAMES = RAND_NOISE_SHAPE[2]  # 300 s at 50 fps
MAX_SOURCE_SAMPLES = SINE_WAVES_SHAPE[1]  # 300 s at 24 kHz
TINY_SINE_PREFIX_SAMPLES = 48_000  # hift_tiny_fixtures `buf.sine_waves_prefix`, 2 s
TINY_SINE_EXTENSION_SEED = 2024  # ours (not the reference's stream): audio past the prefix

# Draws between the flow noise and `rand_ini` at full size (fixture README §6, items 2 and 3),
# as (kind, element count). Linear/conv weights use kaiming-uniform and biases uniform, one
# uniform draw per element; `nn.Embedding` draws normals.
_FULL_SIZE_INIT_DRAWS: tuple[tuple[str, int], ...] = (
    ("normal", 6561 * 80),  # flow input_embedding [6561, 80]
    ("uniform", 80 * 192),  # flow spk_embed_affine_layer.weight [80, 192]
    ("uniform", 80),  # ... .bias
    ("uniform", 512 * 80 * 4),  # hift f0_predictor.condnet.0 [512, 80, 4]
    ("uniform", 512),
    *((("uniform", 512 * 512 * 3), ("uniform", 512)) * 4),  # condnet.{2,4,6,8} [512, 512, 3]
    ("uniform", 512),  # f0_predictor.classifier.weight [1, 512]
    ("uniform", 1),  # ... .bias
)
_L_LINEAR_DRAWS = 9 + 1  # m_source.l_linear weight [1, 9] and bias [1], between sine_waves and uv


class NoiseDigestError(RuntimeError):
    """A replayed buffer does not have the reference's sha256: the RNG stream differs here."""


def tensor_sha256(tensor: torch.Tensor) -> str:
    """sha256 (hex) of a CPU tensor's raw little-endian bytes, as the fixtures record them."""
    data = tensor.detach().to("cpu").contiguous()
    return hashlib.sha256(data.view(torch.uint8).numpy().tobytes()).hexdigest()


def _check(name: str, tensor: torch.Tensor, expected: str) -> None:
    got = tensor_sha256(tensor)
    if got != expected:
        raise NoiseDigestError(
            f"{name} {tuple(tensor.shape)}: sha256 {got} differs from the reference's {expected}"
            " (spec §8); this torch build's CPU generator does not replay the reference stream"
        )


def _rand_noise_draw(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(RAND_NOISE_SHAPE, generator=generator, dtype=torch.float32)


def flow_rand_noise(*, verify: bool = True) -> torch.Tensor:
    """The flow's fixed noise ``rand_noise`` (spec §6, §8).

    Returns a fresh (1, 80, 15000) float32 CPU tensor: seed 0, then ``randn(1, 80, 15000)``,
    standard normal, indexed by mel frame from prompt frame 0. With ``verify`` (default) its
    sha256 is checked against `RAND_NOISE_SHA256` (~10 ms); raises `NoiseDigestError` if it
    differs.
    """
    noise = _rand_noise_draw(torch.Generator().manual_seed(NOISE_SEED))
    if verify:
        _check("rand_noise", noise, RAND_NOISE_SHA256)
    return noise


@dataclass(frozen=True)
class FullSizeBuffers:
    """The full-size model's random buffers, all float32 on the CPU (spec §8).

    ``rand_noise`` (1, 80, 15000) standard normal; ``rand_ini`` (1, 9) uniform [0, 1) with
    column 0 zeroed; ``sine_waves`` (1, 7_200_000, 9) uniform [0, 1); ``uv`` (1, 7_200_000, 1)
    uniform [0, 1), or None when not replayed.
    """

    rand_noise: torch.Tensor
    rand_ini: torch.Tensor
    sine_waves: torch.Tensor
    uv: torch.Tensor | None


def replay_full_size_buffers(*, with_uv: bool = False, verify: bool = True) -> FullSizeBuffers:
    """Replay the full-size reference RNG stream (fixture README §6) and check every digest.

    Takes about a second and 260 MB (290 MB with ``uv``). ``with_uv`` also replays ``uv``, which
    has no effect on the output (spec §7): only to check the whole order. Raises
    `NoiseDigestError` naming the first buffer whose sha256 differs (``verify``, the default).
    """
    gen = torch.Generator().manual_seed(NOISE_SEED)
    rand_noise = _rand_noise_draw(gen)
    for kind, count in _FULL_SIZE_INIT_DRAWS:
        if kind == "normal":
            torch.randn(count, generator=gen)
        else:
            torch.rand(count, generator=gen)
    rand_ini = torch.rand(RAND_INI_SHAPE, generator=gen)
    rand_ini[:, 0] = 0.0
    sine_waves = torch.rand(SINE_WAVES_SHAPE, generator=gen)
    uv: torch.Tensor | None = None
    if with_uv:
        torch.rand(_L_LINEAR_DRAWS, generator=gen)
        uv = torch.rand(UV_SHAPE, generator=gen)
    if verify:
        _check("rand_noise", rand_noise, RAND_NOISE_SHA256)
        _check("rand_ini", rand_ini, RAND_INI_SHA256)
        _check("sine_waves", sine_waves, SINE_WAVES_SHA256)
        if uv is not None:
            _check("uv", uv, UV_SHA256)
    return FullSizeBuffers(rand_noise=rand_noise, rand_ini=rand_ini, sine_waves=sine_waves, uv=uv)


@functools.cache
def full_size_sine_waves() -> torch.Tensor:
    """The full-size HiFT ``sine_waves`` (1, 7_200_000, 9) float32 CPU, uniform [0, 1) (spec §8).

    Replayed and verified once per process (about a second), then cached in memory (259 MB):
    every call returns the same tensor, which callers must not modify (copy it to a device
    with ``.to(device)``). Raises `NoiseDigestError` if the replay differs from the reference.
    """
    return replay_full_size_buffers().sine_waves


def extend_sine_waves(
    prefix: torch.Tensor, samples: int, *, seed: int = TINY_SINE_EXTENSION_SEED
) -> torch.Tensor:
    """A ``sine_waves`` buffer of ``samples`` samples that starts with a known ``prefix``.

    ``prefix`` is (1, N, H) float (the tiny HiFT's is the fixture's ``buf.sine_waves_prefix``,
    (1, 48000, 9), spec §8). Returns (1, samples, H) in the prefix's dtype and device: the prefix
    (cut to ``samples`` if longer), then uniform [0, 1) draws from a generator seeded with
    ``seed``. Samples from N on are **not** parity-covered: the reference's stream past the
    prefix is unknown. Raises ValueError on a prefix that is not (1, N, H) or ``samples`` < 1.
    """
    if prefix.dim() != 3 or prefix.shape[0] != 1:
        raise ValueError(f"sine_waves prefix must be (1, N, H), got {tuple(prefix.shape)}")
    if samples < 1:
        raise ValueError(f"samples must be positive, got {samples}")
    known = prefix.shape[1]
    if samples <= known:
        return prefix[:, :samples].clone()
    gen = torch.Generator().manual_seed(seed)
    rest = torch.rand((1, samples - known, prefix.shape[2]), generator=gen, dtype=torch.float32)
    return torch.cat([prefix, rest.to(dtype=prefix.dtype, device=prefix.device)], dim=1)
