"""Predicted working set of a Kokoro run, for the process's memory gate (`voxflow.memory_gate`).

Kokoro's iSTFTNet decoder runs over the whole segment (its instance norms span it, so it
cannot be windowed); its resblocks hold several
(1, 128, 4800 per second) activations and ConvInteger's im2col buffers at once. Measured on
the int8 graph, one thread, each run starting from an empty arena (`benchmarks/working_sets.py`,
voice jm_kumo, English sentences of `benchmarks/data/sentences.txt`): peaks of 65, 116, 189
and 179 MiB for 40, 79, 93 and 100 tokens at speed 1 (26 MiB per second of audio; random
token ids, which the duration predictor gives shorter sounds, measured 1.15 MiB per token);
at speed 0.6, 118, 225, 310 and 233 MiB. So 2 MiB per token, divided by the speed the graph
renders at (the decoder's activations follow the audio's length).
"""

from __future__ import annotations

MIB = 1 << 20
BYTES_PER_TOKEN = 2 * MIB
"""Peak bytes of a run per token of its segment at speed 1."""
BASE_BYTES = 4 * MIB
"""Peak bytes of a run with no token (the text encoder's and the padding's share)."""


def run_bytes(tokens: int, speed: float) -> int:
    """Predicted peak bytes of one run over `tokens` ids rendered at `speed` (> 0)."""
    return BASE_BYTES + int(BYTES_PER_TOKEN * tokens / speed)
