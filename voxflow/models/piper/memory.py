"""Predicted working sets of Piper's runs, for the process's memory gate (`voxflow.memory_gate`).

Measured on voice joe (22,050 Hz, hop 256), one thread, the arena shrunk after every run so
each run starts from none (`benchmarks/working_sets.py`): a decoder
window's peak is about 0.22 MiB per decoder frame (190 frames 42 MiB, 344: 78, 437: 98,
506: 109), the HiFi-GAN's upsampled activations; the encoder's (text encoder, duration
predictor, prior noise) about 0.035 MiB per phoneme id (645 ids: 22 MiB). The duration
predictor gives joe 2.0-2.4 frames per phoneme id at speed 1.
"""

from __future__ import annotations

MIB = 1 << 20
DECODER_BYTES_PER_FRAME = int(0.22 * MIB)
"""Peak bytes of a decoder (or flow + decoder) run per latent frame it decodes."""
ENCODER_BYTES_PER_PHONEME = int(0.035 * MIB)
"""Peak bytes of an encoder run per phoneme id (padded rows count whole)."""
FRAMES_PER_PHONEME = 2.4
"""Latent frames per phoneme id at speed 1 (the upper end measured on joe)."""


def encoder_bytes(rows: int, longest: int) -> int:
    """Predicted peak of encoding `rows` segments padded to `longest` phoneme ids."""
    return ENCODER_BYTES_PER_PHONEME * rows * longest


def decode_bytes(frames: int) -> int:
    """Predicted peak of decoding `frames` latent frames at once (one window or segment)."""
    return DECODER_BYTES_PER_FRAME * frames


def segment_frames(phonemes: int, speed: float) -> int:
    """Predicted latent frames of a segment of `phonemes` ids rendered at `speed` (> 0)."""
    return int(FRAMES_PER_PHONEME * phonemes / speed) + 1
