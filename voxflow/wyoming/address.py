"""``--wyoming [HOST:]PORT``: where `voxflow serve` and `voxflow bench` reach the Wyoming server
(the ``wyoming:`` section itself is `voxflow.config.WyomingSettings`)."""

from __future__ import annotations

import argparse


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
