"""Fill in the encoder delay of the LAME tag in a streamed mp3's first frame.

For seekable output FFmpeg's mp3 muxer writes a Xing/LAME frame at the start and
completes it at the end (frame count, encoder delay, padding). A stream cannot be
rewritten, so the streamed frame keeps FFmpeg's placeholder, whose delay field is 0.
The delay is known as soon as the first packet comes out of the encoder, so we write
it (and the tag checksum) before the frame is sent. Decoders that honour the LAME tag
(FFmpeg, mpg123, ...) then drop the encoder's leading priming samples; the padding
at the end stays unknown (0), so a streamed mp3 decodes up to one mp3 frame longer
than its input instead of ~2 frames.

Layout (offsets from the LAME version string that follows the Xing/Info header):
0..8 version, 9 revision, 10 lowpass, 11..18 replay gain, 19 flags, 20 bitrate,
21..23 delay (12 bits) and padding (12 bits), 24..33 misc, 34..35 tag CRC.
"""

from __future__ import annotations

MP3_DECODER_DELAY = 529  # samples an mp3 decoder adds on top of the encoder delay

_ENCODERS = (b"LAME", b"Lavf", b"Lavc")
_XING_FLAG_SIZES = ((0x1, 4), (0x2, 4), (0x4, 100), (0x8, 4))  # frames, bytes, TOC, quality
_DELAY_AT = 21
_CRC_AT = 34
_CRC_SPAN = 190  # the tag CRC covers the first 190 bytes of the frame


def crc16_ansi(data: bytes) -> int:
    """CRC-16/ARC (poly 0x8005 reflected, init 0), as used for the LAME tag CRC."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def _id3v2_size(buf: bytearray) -> int:
    if len(buf) < 10 or buf[:3] != b"ID3":
        return 0
    size = (buf[6] << 21) | (buf[7] << 14) | (buf[8] << 7) | buf[9]
    footer = 10 if buf[5] & 0x10 else 0
    return 10 + size + footer


def _lame_tag_offset(buf: bytearray, frame: int) -> int | None:
    """Offset in ``buf`` of the LAME version string of the frame at ``frame``, if any."""
    head = bytes(buf[frame : frame + 40])
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    xing = max(head.find(b"Xing", 4), head.find(b"Info", 4))
    if xing < 0:
        return None
    at = frame + xing + 4
    flags = int.from_bytes(buf[at : at + 4], "big")
    at += 4 + sum(size for flag, size in _XING_FLAG_SIZES if flags & flag)
    if bytes(buf[at : at + 4]) not in _ENCODERS or len(buf) < at + _CRC_AT + 2:
        return None
    return at


def patch_encoder_delay(buf: bytearray, delay: int) -> bool:
    """Set the LAME-tag encoder delay of the first mp3 frame in ``buf``, in place.

    Args:
        buf: the start of an mp3 stream (optional ID3v2 tag, then the Xing/LAME frame).
        delay: encoder delay in samples, 0..4095 (LAME: 576).

    Returns:
        True if the tag was found and patched; False (``buf`` unchanged) otherwise.
    """
    frame = _id3v2_size(buf)
    tag = _lame_tag_offset(buf, frame)
    if tag is None or not 0 <= delay < 4096 or len(buf) < frame + _CRC_SPAN:
        return False
    field = tag + _DELAY_AT
    padding = int.from_bytes(buf[field : field + 3], "big") & 0xFFF
    buf[field : field + 3] = ((delay << 12) | padding).to_bytes(3, "big")
    # FFmpeg's convention: CRC over the first 190 frame bytes with the CRC field zeroed.
    buf[tag + _CRC_AT : tag + _CRC_AT + 2] = b"\0\0"
    crc = crc16_ansi(bytes(buf[frame : frame + _CRC_SPAN]))
    buf[tag + _CRC_AT : tag + _CRC_AT + 2] = crc.to_bytes(2, "big")
    return True
