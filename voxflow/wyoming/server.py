"""The Wyoming server's life inside `voxflow serve`: started once the engine is ready (Home
Assistant gives up on a server whose ``info`` lists no installed voice), stopped before it.

`wyoming.server.AsyncTcpServer` accepts the connections; each gets a
`voxflow.wyoming.handler.VoxflowWyomingHandler` on the shared engine. With ``wyoming.zeroconf``
the server is announced as ``_wyoming._tcp.local.`` (`wyoming.zeroconf`, which needs the
`zeroconf` package).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from wyoming.server import AsyncTcpServer

from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.wyoming.handler import VoxflowWyomingHandler

log = logging.getLogger(__name__)


class WyomingServer:
    """The Wyoming listener of one `voxflow serve` process.

    Args:
        engine: the running engine, shared with HTTP.
        settings: the server's settings (the ``wyoming:`` section).
    """

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self._tcp = AsyncTcpServer(settings.wyoming.host, settings.wyoming.port)
        self.port: int | None = None
        self._zeroconf: Any = None  # the AsyncZeroconf announcing this server, if any

    async def start(self) -> None:
        """Listen (the port is known after this, also for ``port: 0``) and announce.

        Raises:
            OSError: the address cannot be bound (in use, not this machine's).
            RuntimeError: ``wyoming.zeroconf`` without the `zeroconf` package.
        """
        await self._tcp.start(partial(VoxflowWyomingHandler, engine=self.engine,
                                      settings=self.settings))
        server = self._tcp._server  # AsyncTcpServer keeps asyncio's server here
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        log.info("wyoming: listening on %s:%d", self.settings.wyoming.host, self.port)
        if self.settings.wyoming.zeroconf:
            await self._announce()

    async def stop(self) -> None:
        """Withdraw the announcement, stop listening and end every connection (their engine
        work is cancelled)."""
        if self._zeroconf is not None:
            aiozc, self._zeroconf = self._zeroconf, None
            await aiozc.async_unregister_all_services()
            await aiozc.async_close()
        await self._tcp.stop()

    async def _announce(self) -> None:
        try:
            from wyoming.zeroconf import HomeAssistantZeroconf
        except ImportError:
            raise RuntimeError("wyoming.zeroconf needs the zeroconf package: pip install "
                               "'voxflow[zeroconf]'") from None
        assert self.port is not None
        host = self.settings.wyoming.host
        zeroconf = HomeAssistantZeroconf(port=self.port, host=None if host in (
            "0.0.0.0", "::") else host)
        await zeroconf.register_server()
        self._zeroconf = zeroconf._aiozc  # HomeAssistantZeroconf has no unregister of its own
        log.info("wyoming: announced as %s._wyoming._tcp.local. (%s:%d)", zeroconf.name,
                 zeroconf.host, self.port)
