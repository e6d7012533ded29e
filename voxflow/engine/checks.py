"""The checks of a speech request's own fields, in one place for every entry point.

`Engine.prepare` runs them for every request (HTTP and CLI alike), then checks what needs the
loaded models (model, voice, language) and parses the input. `voxflow speak` runs them before
loading a model, so a bad `--speed` fails at once; both give the same error. The HTTP schema
(`voxflow.server.schemas`) only checks JSON types.
"""

from __future__ import annotations

from voxflow.errors import InvalidRequestError, clip

SPEED_MIN, SPEED_MAX = 0.25, 4.0
"""The OpenAI speech API's range of `speed` (4x slower to 4x faster)."""
SEED_MAX = 2**63 - 1
"""The largest `seed` (a signed 64-bit integer, as vLLM-Omni and M* take it)."""


def check_input(text: str, max_input_chars: int | None = None) -> None:
    """The input has something besides whitespace and at most `max_input_chars` characters.

    Raises:
        InvalidRequestError: param "input", code "empty_input" or "input_too_long".
    """
    if not text.strip():
        raise InvalidRequestError(
            "input must not be empty or only whitespace.", param="input", code="empty_input"
        )
    if max_input_chars is not None and len(text) > max_input_chars:
        raise InvalidRequestError(
            f"input is {len(text)} characters; the limit is {max_input_chars}.",
            param="input",
            code="input_too_long",
        )


def check_speed(speed: float) -> None:
    """`speed` is within SPEED_MIN..SPEED_MAX.

    Raises:
        InvalidRequestError: param "speed", code "speed_out_of_range".
    """
    if not SPEED_MIN <= speed <= SPEED_MAX:
        raise InvalidRequestError(
            f"speed must be between {SPEED_MIN} and {SPEED_MAX}, got {speed}.",
            param="speed",
            code="speed_out_of_range",
        )


def check_seed(seed: int | None) -> None:
    """`seed` is None or an integer in 0..SEED_MAX.

    Raises:
        InvalidRequestError: param "seed", code "invalid_value".
    """
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise InvalidRequestError(
            f"seed must be an integer from 0 to 2**63-1, got {clip(str(seed))}.", param="seed",
            code="invalid_value",
        )
