"""Issue 39: ``wyoming.zeroconf`` announces the Wyoming server as ``_wyoming._tcp.local.`` (what
Home Assistant's zeroconf discovery looks for), seen from another process over mDNS, and
withdraws it when the server stops."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

pytest.importorskip("zeroconf")

from voxflow.config import load_settings  # noqa: E402
from voxflow.wyoming.server import WyomingServer  # noqa: E402

LOOKUP = """
import json, sys
from zeroconf import Zeroconf, ServiceInfo
zc = Zeroconf()
info = ServiceInfo("_wyoming._tcp.local.", sys.argv[1])
found = info.request(zc, 3000)
print(json.dumps({"found": found, "port": info.port, "addresses": info.parsed_addresses()}))
zc.close()
"""


def lookup(name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", LOOKUP, name], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return json.loads(out)


def test_the_server_is_announced_while_it_runs_and_withdrawn_after():
    settings = load_settings(None, overrides={"wyoming.enabled": True, "wyoming.port": 0,
                                              "wyoming.zeroconf": True})

    async def scenario():
        server = WyomingServer(engine=None, settings=settings)  # type: ignore[arg-type]
        await server.start()
        from wyoming.zeroconf import _get_mac_address

        name = f"{_get_mac_address()}._wyoming._tcp.local."
        seen = await asyncio.to_thread(lookup, name)
        await server.stop()
        after = await asyncio.to_thread(lookup, name)
        return server.port, seen, after

    port, seen, after = asyncio.run(scenario())
    assert seen == {"found": True, "port": port, "addresses": ["127.0.0.1"]}
    assert after["found"] is False
