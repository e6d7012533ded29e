"""The 44-byte RIFF/WAVE header for 16-bit PCM mono."""

from __future__ import annotations

import struct

WAV_HEADER_BYTES = 44
UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF and data size of a WAV streamed before its length is known

_BYTES_PER_SAMPLE = 2  # 16-bit mono
_MAX_DATA_BYTES = 0xFFFFFFFF - 36


def wav_header(sample_rate: int, data_bytes: int | None) -> bytes:
    """Return the 44-byte header of a 16-bit PCM mono WAV file.

    Args:
        sample_rate: Hz.
        data_bytes: size of the sample data that follows, in bytes; ``None`` for a
            stream of unknown length, which sets both the RIFF and the data chunk size
            to 0xFFFFFFFF.

    Raises:
        ValueError: ``data_bytes`` is negative, odd, or too large for a WAV file (4 GiB).
    """
    if data_bytes is None:
        riff_size = data_size = UNKNOWN_SIZE
    else:
        if data_bytes < 0 or data_bytes % _BYTES_PER_SAMPLE or data_bytes > _MAX_DATA_BYTES:
            raise ValueError(f"invalid WAV data size: {data_bytes} bytes")
        riff_size, data_size = 36 + data_bytes, data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,  # fmt chunk size
        1,  # WAVE_FORMAT_PCM
        1,  # channels
        sample_rate,
        sample_rate * _BYTES_PER_SAMPLE,  # byte rate
        _BYTES_PER_SAMPLE,  # block align
        16,  # bits per sample
        b"data",
        data_size,
    )
