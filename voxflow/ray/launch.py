"""``voxflow serve --ray``: deploy the app on Ray Serve and stay up until interrupted.

Joins the Ray cluster of ``ray.address`` (or ``RAY_ADDRESS``), or starts a Ray instance on this
machine for this process, starts Serve's HTTP proxy on ``server.host``:``server.port`` and
deploys `voxflow.ray.app.application`. Ctrl-C or SIGTERM deletes the application (and stops the
local Ray instance when this process started it). docs/scale-out.md.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from types import FrameType

from voxflow.config import Settings
from voxflow.ray.proxy import CALLBACK, CALLBACK_ENV
from voxflow.ray.settings import ray_settings

log = logging.getLogger(__name__)

INSTALL_HINT = ("voxflow serve --ray needs Ray Serve, which is not installed: "
                "pip install 'voxflow[ray]' (in a checkout: pip install -e '.[ray]')")
"""The message of `RayMissingError`."""

SERVE_ENV = {
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
}
"""Ray Serve's own timers, slowed from Ray's defaults (0.1 s and 100 ms): the controller's
reconcile loop and the replicas' and proxy's export of Ray's own metrics (voxflow's are on
``/metrics``). On a 2-core machine they cut the CPU seconds Ray's processes take during a
40-request run at concurrency 8 from 3.3 to 2.4 (controller 0.74 -> 0.31 s, GCS 0.46 -> 0.23 s;
idle, the controller 1.08 -> 0.56 s per 30 s): docs/scale-out.md, "Overhead of the Ray path".
A lost replica is noticed at most 0.4 s later. Set in the environment before Ray starts (values
already there win); a cluster started with ``ray start`` needs them at that start."""


class RayMissingError(RuntimeError):
    """The ``ray`` extra is not installed (the message says how to install it)."""


def check_ray_installed() -> None:
    """Raises RayMissingError unless Ray Serve can be imported (before any model loads)."""
    try:
        import ray.serve  # noqa: F401
    except ImportError as exc:
        raise RayMissingError(INSTALL_HINT) from exc


def joins_cluster(settings: Settings) -> bool:
    """Whether ``serve --ray`` joins a running cluster (``ray.address`` or ``RAY_ADDRESS``)
    rather than starting a Ray instance of its own on this machine."""
    return bool(ray_settings(settings).address or os.environ.get("RAY_ADDRESS"))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def serve_on_ray(settings: Settings) -> None:
    """Deploy `settings` on Ray Serve and block until Ctrl-C or SIGTERM.

    Raises:
        RayMissingError: the ``ray`` extra is not installed.
        ConfigError: the ``ray:`` settings do not fit the engine's (`application`).
        ConnectionError: ``ray.address`` names no reachable cluster (Ray's own error).
    """
    check_ray_installed()
    import ray
    from ray import serve

    from voxflow.ray.app import APP_NAME, application

    # Ray's proxy reads its middlewares from the environment when it starts: set here, it
    # reaches a local Ray instance; a cluster's head needs it at `ray start` (docs/scale-out.md)
    os.environ.setdefault(CALLBACK_ENV, CALLBACK)
    for name, value in SERVE_ENV.items():
        os.environ.setdefault(name, value)
    app = application(settings)  # raises ConfigError before any Ray process starts
    local = not joins_cluster(settings)
    # "local": a Ray instance of this process, as documented, even where a `ray start` cluster
    # runs on this machine (address None would join it, through its address file)
    ray.init(address="local" if local else ray_settings(settings).address,
             include_dashboard=False if local else None)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        serve.start(http_options={"host": settings.server.host, "port": settings.server.port})
        serve.run(app, name=APP_NAME, route_prefix="/")
        log.info("serving on http://%s:%d through Ray Serve (%s)", settings.server.host,
                 settings.server.port, "local Ray" if local else "cluster")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        try:
            serve.delete(APP_NAME)
        finally:
            if local:
                serve.shutdown()
            ray.shutdown()


__all__ = ["INSTALL_HINT", "SERVE_ENV", "RayMissingError", "check_ray_installed", "joins_cluster",
           "serve_on_ray"]
