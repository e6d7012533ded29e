"""Settings of the Wyoming server (the ``wyoming:`` section of a voxflow config)."""

from __future__ import annotations

import argparse

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PORT = 10200
"""Home Assistant's convention for Wyoming services (wyoming-piper's default)."""


class WyomingSettings(BaseModel):
    """Where and whether `voxflow serve` answers Home Assistant's Wyoming protocol."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        False, description="Serve the Wyoming protocol beside HTTP (`voxflow serve --wyoming`)."
    )
    host: str = Field(
        "127.0.0.1",
        description="Address the Wyoming server binds to. Wyoming has no authentication: "
        "another address than loopback lets anyone who reaches it use the voices (the server "
        "warns).",
    )
    port: int = Field(
        DEFAULT_PORT, ge=0, le=65535,
        description="TCP port of the Wyoming server (10200 is Home Assistant's convention; 0 "
        "picks a free one).",
    )
    max_event_bytes: int = Field(
        65_536, ge=1024, le=16 * 1024 * 1024,
        description="Largest data or payload part of one client event, in bytes; a larger one "
        "is answered with an `error` event and the connection closed.",
    )
    zeroconf: bool = Field(
        False, description="Announce the server on the local network as "
        "`_wyoming._tcp.local.` (needs `pip install 'voxflow[zeroconf]'`), so Home Assistant "
        "finds it; withdrawn when the server stops."
    )


def wyoming_address(value: str) -> tuple[str | None, int]:
    """``--wyoming``: ``PORT`` or ``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host or None,
    port)."""
    host, sep, port = value.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not [HOST:]PORT") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port {number} is outside 0..65535")
    return (host.strip("[]") or None) if sep else None, number
