"""Names and HTTP content types of the audio formats voxflow can produce."""

from __future__ import annotations

FORMATS: tuple[str, ...] = ("wav", "pcm", "flac", "mp3", "opus", "aac")

_CONTENT_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",  # raw 16-bit little-endian mono, no header
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",  # Opus in an Ogg container (RFC 7845)
    "aac": "audio/aac",  # AAC-LC in an ADTS stream
}


def check_format(fmt: str) -> str:
    """Return ``fmt`` unchanged if it is one of :data:`FORMATS`.

    Matching is exact (lower case, no surrounding spaces).

    Raises:
        ValueError: ``fmt`` is not a supported format; the message names it and lists
            the supported ones.
    """
    if isinstance(fmt, str) and fmt in FORMATS:
        return fmt
    raise ValueError(f"unsupported audio format {fmt!r}; supported formats: {', '.join(FORMATS)}")


def content_type(fmt: str, sample_rate: int | None = None) -> str:
    """Return the HTTP ``Content-Type`` for ``fmt`` (e.g. ``"audio/wav"``, ``"audio/mpeg"``);
    ``pcm`` with a ``sample_rate`` (Hz) says it, as ``audio/pcm;rate=24000`` (raw PCM has no
    header to carry it; the parameter as RFC 2586 names it for ``audio/L16``).

    Raises:
        ValueError: ``fmt`` is not one of :data:`FORMATS`.
    """
    media = _CONTENT_TYPES[check_format(fmt)]
    if fmt == "pcm" and sample_rate is not None:
        return f"{media};rate={sample_rate}"
    return media
