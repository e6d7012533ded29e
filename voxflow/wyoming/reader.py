"""A guard between a client's socket and the `wyoming` library's event reader.

`wyoming.event.async_read_event` reads a JSON header line, then ``data_length`` bytes of JSON
merged into ``data``, then ``payload_length`` bytes of payload. It trusts both lengths (a
client could make it wait for, and hold, gigabytes) and answers a malformed line by ending the
connection as if the client had left. `GuardedReader` stands in for the stream it reads: it
checks each header line and the data part before the library sees them and raises
`WyomingProtocolError` instead, so the server can say what was wrong in an ``error`` event
before it closes. The framing itself stays the library's.
"""

from __future__ import annotations

import asyncio
import json

from voxflow.errors import InvalidRequestError


class WyomingProtocolError(InvalidRequestError):
    """A client event that is not valid Wyoming, or too large (a 400 in voxflow's terms)."""


class GuardedReader:
    """The reads `async_read_event` makes (`readline`, `readexactly`), checked.

    Args:
        reader: the connection's stream.
        max_event_bytes: the largest header line, data part or payload accepted, in bytes.
    """

    def __init__(self, reader: asyncio.StreamReader, max_event_bytes: int) -> None:
        self._reader = reader
        self._max = max_event_bytes
        self._data_next = False  # the next readexactly is the data part (JSON)

    async def readline(self) -> bytes:
        """One header line, checked: a JSON object with a string ``type``, an object ``data``
        if any, ``data_length`` and ``payload_length`` whole numbers of at most the limit.

        Raises:
            WyomingProtocolError: anything else (code ``invalid_event`` or
                ``event_too_large``).
        """
        try:
            line = await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            line = exc.partial  # the last line before the end of the stream (or b"")
        except asyncio.LimitOverrunError:
            raise _too_large("an event's header line") from None
        if not line:
            return line
        if len(line) > self._max:
            raise _too_large("an event's header line")
        try:
            header = json.loads(line)
        except ValueError:
            raise _invalid("an event's header line is not JSON") from None
        if not isinstance(header, dict) or not isinstance(header.get("type"), str):
            raise _invalid('an event header must be a JSON object with a string "type"')
        if not isinstance(header.get("data", {}), dict):
            raise _invalid('an event\'s "data" must be a JSON object')
        for key in ("data_length", "payload_length"):
            size = header.get(key)
            if size is None:
                continue
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise _invalid(f'"{key}" must be a whole number of bytes')
            if size > self._max:
                raise _too_large(f"an event's {key.split('_')[0]} ({size} bytes)")
        self._data_next = bool(header.get("data_length"))
        return line

    async def readexactly(self, n: int) -> bytes:
        """`n` bytes of the event being read; its data part must be a JSON object.

        Raises:
            WyomingProtocolError: the data part is not a JSON object (``invalid_event``).
            asyncio.IncompleteReadError: the client left mid-event.
        """
        if n > self._max:  # the header was checked; a second guard costs nothing
            raise _too_large(f"an event part ({n} bytes)")
        part = await self._reader.readexactly(n)
        if self._data_next:
            self._data_next = False
            try:
                ok = isinstance(json.loads(part), dict)
            except ValueError:
                ok = False
            if not ok:
                raise _invalid("an event's data part is not a JSON object")
        return part


def _invalid(what: str) -> WyomingProtocolError:
    return WyomingProtocolError(f"Malformed Wyoming event: {what}.", param=None,
                                code="invalid_event")


def _too_large(what: str) -> WyomingProtocolError:
    return WyomingProtocolError(f"Wyoming event too large: {what} is over the server's "
                                "wyoming.max_event_bytes.", param=None, code="event_too_large")
