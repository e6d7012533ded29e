"""The sample rate a response is delivered at.

OpenAI's ``pcm`` is 24 kHz, 16-bit, mono, and the clients that ask for it (Pipecat's
``OpenAITTSService``, LiveKit's OpenAI plugin, the OpenAI Agents SDK) label the bytes 24 kHz
without reading any header; audio at another rate would play fast or slow with no error. So
``pcm`` is delivered at :data:`OPENAI_PCM_RATE_HZ` unless the request asks otherwise, whatever
the model's own rate; every other format carries its rate in its header and is delivered at
the model's rate (resampled only where the codec cannot take it, see
:func:`voxflow.audio.avcodec.codec_rate`).

A request may ask for a rate with voxflow's ``sample_rate`` extension: an int from
:data:`MIN_RATE_HZ` to :data:`MAX_RATE_HZ` that the format's encoder takes
(:func:`format_rates`), or ``"native"`` for the model's own rate. Resampling is soxr's "HQ"
(:mod:`voxflow.audio.resample`), the same library and quality as the codec fallback; chunked
and whole resampling give the same samples, so a seeded request gives the same bytes streamed
or not.
"""

from __future__ import annotations

from functools import cache

OPENAI_PCM_RATE_HZ = 24_000
"""The rate of OpenAI's ``pcm`` (its API reference: "24kHz (16-bit signed, low-endian)")."""

MIN_RATE_HZ = 8_000
MAX_RATE_HZ = 48_000
NATIVE = "native"

RequestedRate = int | str | None
"""What a request asks for: an int (Hz), ``"native"``, or None (the format's default)."""

_CODEC_FORMATS = ("mp3", "aac", "opus")  # fixed rate tables; flac, wav, pcm take any rate


@cache
def format_rates(fmt: str) -> tuple[int, ...] | None:
    """The rates (Hz, ascending, within :data:`MIN_RATE_HZ`..:data:`MAX_RATE_HZ`) the encoder of
    `fmt` takes, or None when it takes any rate (``pcm``, ``wav``, ``flac``).

    From FFmpeg's codec tables through PyAV: mp3 (libmp3lame) 8, 11.025, 12, 16, 22.05, 24,
    32, 44.1, 48 kHz; aac the same; opus (libopus) 8, 12, 16, 24, 48 kHz.
    """
    if fmt not in _CODEC_FORMATS:
        return None
    import av  # PyAV: only for the compressed formats

    from voxflow.audio.avcodec import AV_SPECS

    rates = av.codec.Codec(AV_SPECS[fmt].codec, "w").audio_rates or ()
    return tuple(sorted(r for r in rates if MIN_RATE_HZ <= r <= MAX_RATE_HZ)) or None


def check_requested_rate(fmt: str, requested: object) -> RequestedRate:
    """Return `requested` if `fmt` can be delivered at it.

    Args:
        fmt: one of :data:`voxflow.audio.formats.FORMATS`.
        requested: None, ``"native"``, or an int in Hz (a bool is not an int here).
    Raises:
        ValueError: anything else; an int outside 8,000..48,000; a rate the format's encoder
            does not take (the message lists the ones it does).
    """
    if requested is None or requested == NATIVE:
        return requested
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise ValueError(f'sample_rate must be an integer (Hz) or "{NATIVE}"')
    if not MIN_RATE_HZ <= requested <= MAX_RATE_HZ:
        raise ValueError(
            f"{requested} Hz is outside {MIN_RATE_HZ} to {MAX_RATE_HZ}; "
            f'or send "{NATIVE}" for the model\'s own rate'
        )
    rates = format_rates(fmt)
    if rates is not None and requested not in rates:
        listed = ", ".join(str(r) for r in rates)
        raise ValueError(f"{fmt} cannot be encoded at {requested} Hz; it takes {listed}")
    return requested


def delivered_rate(fmt: str, native_hz: int, requested: RequestedRate = None) -> int:
    """The rate (Hz) a response in `fmt` is delivered at, for audio made at `native_hz`.

    `requested` (already checked by :func:`check_requested_rate`): an int is delivered as
    asked; None is :data:`OPENAI_PCM_RATE_HZ` for ``pcm`` and the model's rate otherwise;
    ``"native"`` (and None outside ``pcm``) is `native_hz` where the encoder takes it, else
    the codec's fallback rate (opus: 48 kHz).
    """
    if isinstance(requested, int):
        return requested
    if requested is None and fmt == "pcm":
        return OPENAI_PCM_RATE_HZ
    if fmt in _CODEC_FORMATS:
        from voxflow.audio.avcodec import codec_rate

        return codec_rate(fmt, native_hz)
    return native_hz
