"""File-like byte sinks that FFmpeg (through PyAV) writes containers into."""

from __future__ import annotations

import io


class FileSink(io.BytesIO):
    """Seekable in-memory file for whole-file output.

    Being seekable lets muxers go back and fill in their headers at the end (the mp3
    Xing/LAME frame with gapless info, FLAC STREAMINFO with the sample count and MD5).
    ``close()`` is a no-op so the bytes can still be read after the container closes.
    """

    def close(self) -> None:
        pass


class StreamSink:
    """Write-forward sink for streamed output; new bytes are collected with :meth:`take`.

    With ``pretend_seekable=False`` it has no usable seek, so FFmpeg writes a plain
    stream. With ``pretend_seekable=True`` it accepts seeks, so a muxer writes the
    header placeholders it only writes for seekable files (mp3: the Xing/LAME frame);
    any later write over bytes already received (the muxer's end-of-file header
    update) is dropped, because those bytes may already be on the wire.
    """

    def __init__(self, *, pretend_seekable: bool = False) -> None:
        self.pending = bytearray()  # received but not yet taken; may be patched in place
        self._seekable = pretend_seekable
        self._end = 0  # total bytes received
        self._pos = 0  # FFmpeg's write position

    def seekable(self) -> bool:
        return self._seekable

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if not self._seekable:
            raise io.UnsupportedOperation("stream output is not seekable")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._end}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def write(self, data: bytes) -> int:
        start, n = self._pos, len(data)
        self._pos += n
        if self._pos <= self._end:
            return n  # rewrite of bytes already received: dropped (see class docstring)
        if start > self._end:
            self.pending += bytes(start - self._end)  # seek past the end leaves zeros
            start = self._end
        self.pending += memoryview(data)[self._end - start :]
        self._end = self._pos
        return n

    def take(self) -> bytes:
        """Return and forget the bytes received since the last call."""
        out = bytes(self.pending)
        self.pending.clear()
        return out
