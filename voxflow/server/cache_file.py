"""One file of the audio cache's disk tier: a cached response with its full key, checked when
read back (`voxflow.server.disk_cache`).

A file is named ``<sha256 of the canonical key>.vfc`` and holds, in order:

- `MAGIC` (8 bytes, the format's version in it);
- the header's length in bytes, 4 bytes unsigned big-endian;
- the header, UTF-8 JSON: ``key`` (the canonical key, `canonical_key`), ``generation`` (what
  else the bytes depend on: the voxflow version and the served models' settings, so an upgrade
  or a changed model never answers from old files), ``media_type``, ``headers``, ``audio_s``,
  ``body_bytes`` (the body's length) and ``sha256`` (the body's digest, hex);
- the body.

The canonical key is the `CacheKey` as sorted, compact JSON, without ``voice_version`` (a count
kept by one process: a deleted voice's files are deleted with it, `AudioCache.drop_voice`) and
without the document's ``source`` (not part of what a document says). Two keys share a file
name only when their canonical keys are equal (or sha256 collides); the key is compared whole
on every read all the same, so a collision is a miss, never another request's audio.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from voxflow.server.cache_entry import CachedResponse, CacheKey

MAGIC = b"VXFCACH1"
SUFFIX = ".vfc"
_LENGTH = struct.Struct(">I")
PREFIX_BYTES = len(MAGIC) + _LENGTH.size
MAX_HEADER_BYTES = 1 << 20
"""A header longer than this is refused as damaged (a key holds at most a request's input)."""


class CacheFileError(ValueError):
    """Bytes that are not a whole, valid cache file (the message says what is wrong)."""


def _plain(value: Any) -> Any:
    """`value` as JSON-ready data: a dataclass as its compared fields, a tuple as a list."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.compare}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def canonical_key(key: CacheKey) -> str:
    """`key` as sorted, compact JSON, without ``voice_version`` (module docstring); ``speed``
    as a float, so 1 and 1.0 name one file."""
    fields = _plain(key)
    del fields["voice_version"]
    fields["speed"] = float(fields["speed"])
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def file_name(canonical: str) -> str:
    """The file name of a canonical key: its sha256 in hex plus `SUFFIX`."""
    return hashlib.sha256(canonical.encode()).hexdigest() + SUFFIX


@dataclass(frozen=True)
class Header:
    """A cache file's header (module docstring).

    Attributes:
        key: the canonical key.
        generation: what else the bytes depend on (`voxflow.server.disk_cache.generation`).
        media_type, headers, audio_s: the `CachedResponse`'s.
        body_bytes: the body's length.
        sha256: the body's sha256, hex.
    """

    key: str
    generation: str
    media_type: str
    headers: dict[str, str]
    audio_s: float
    body_bytes: int
    sha256: str

    @property
    def fields(self) -> dict[str, Any]:
        """The key's fields (model, voice, lexicon, ...), parsed from `key`."""
        return json.loads(self.key)


def encode(canonical: str, generation: str, entry: CachedResponse) -> bytes:
    """The bytes of the file of `entry` under the canonical key `canonical`."""
    header = json.dumps({
        "key": canonical, "generation": generation, "media_type": entry.media_type,
        "headers": entry.headers, "audio_s": entry.audio_s, "body_bytes": len(entry.body),
        "sha256": hashlib.sha256(entry.body).hexdigest()}, ensure_ascii=False).encode()
    return MAGIC + _LENGTH.pack(len(header)) + header + entry.body


def header_length(prefix: bytes) -> int:
    """The header's length from a file's first `PREFIX_BYTES` bytes.

    Raises:
        CacheFileError: short, not a cache file (another magic), or a header over
            `MAX_HEADER_BYTES`.
    """
    if len(prefix) < PREFIX_BYTES or not prefix.startswith(MAGIC):
        raise CacheFileError("not a voxflow cache file (or another version)")
    (length,) = _LENGTH.unpack_from(prefix, len(MAGIC))
    if length > MAX_HEADER_BYTES:
        raise CacheFileError(f"header of {length} bytes")
    return length


def decode_header(raw: bytes) -> Header:
    """The header from its JSON bytes.

    Raises:
        CacheFileError: not JSON, or a field missing or of the wrong type.
    """
    try:
        data = json.loads(raw)
        header = Header(str(data["key"]), str(data["generation"]), str(data["media_type"]),
                        {str(k): str(v) for k, v in data["headers"].items()},
                        float(data["audio_s"]), int(data["body_bytes"]), str(data["sha256"]))
        json.loads(header.key)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CacheFileError(f"unreadable header: {type(exc).__name__}: {exc}") from None
    if header.body_bytes < 0:
        raise CacheFileError(f"body of {header.body_bytes} bytes")
    return header


def decode(data: bytes) -> tuple[Header, CachedResponse]:
    """A whole file's header and response.

    Raises:
        CacheFileError: damaged: the prefix or header is unreadable, the file is shorter or
            longer than the header says, or the body's sha256 differs.
    """
    length = header_length(data[:PREFIX_BYTES])
    header = decode_header(data[PREFIX_BYTES:PREFIX_BYTES + length])
    body = data[PREFIX_BYTES + length:]
    if len(body) != header.body_bytes:
        raise CacheFileError(f"body of {len(body)} bytes, header says {header.body_bytes}")
    if hashlib.sha256(body).hexdigest() != header.sha256:
        raise CacheFileError("body checksum differs")
    return header, CachedResponse(body, header.media_type, header.headers, header.audio_s)


__all__ = ["MAGIC", "PREFIX_BYTES", "SUFFIX", "CacheFileError", "Header", "canonical_key",
           "decode", "decode_header", "encode", "file_name", "header_length"]
