"""Settings fields several families share, declared once: segment caps and the native speed
range. Each family's settings model uses these factories for its own defaults, and calls
`check_first_segment` in its model validator."""

from __future__ import annotations

from typing import Any

from pydantic import Field


def max_segment_chars(default: int = 300, note: str = "") -> Any:
    """`max_segment_chars`: segments are sentences, long ones cut to at most this many
    characters (20..2000); `note` adds what else the family does to a segment."""
    return Field(
        default, ge=20, le=2000,
        description="Segments are sentences, and pieces of long sentences at most this many "
        "characters" + (f"; {note}" if note else "") + ".",
    )


def first_segment_chars(default: int | None = 120) -> Any:
    """`first_segment_chars`: a shorter cap on a request's first segment (time to first
    audio), None = no cap; at most `max_segment_chars` (`check_first_segment`)."""
    return Field(
        default, ge=10,
        description="Shorter cap on a request's first segment, for time to first audio; "
        "null = no cap. At most `max_segment_chars`.",
    )


def native_speed_min(default: float = 1.0) -> Any:
    """`native_speed_min` (0.25..1): the lowest speed the model's own length scale renders;
    slower speeds are time-stretched (`voxflow.audio.stretch`)."""
    return Field(
        default, ge=0.25, le=1.0,
        description="Lowest speed the model's own length scale renders (docs/api.md, Speed); "
        "slower speeds are time-stretched with the pitch kept.",
    )


def native_speed_max(default: float = 1.0) -> Any:
    """`native_speed_max` (1..4): the highest speed the model's own length scale renders;
    faster speeds are time-stretched."""
    return Field(
        default, ge=1.0, le=4.0,
        description="Highest speed the model's own length scale renders; faster speeds are "
        "time-stretched with the pitch kept.",
    )


def check_first_segment(first: int | None, maximum: int) -> None:
    """Raises ValueError when the first-segment cap exceeds `max_segment_chars`."""
    if first is not None and first > maximum:
        raise ValueError("first_segment_chars must not exceed max_segment_chars")
