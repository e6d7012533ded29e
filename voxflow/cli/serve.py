"""`voxflow serve`: validate the settings, log their summary, run the HTTP server (or, with
``--ray``, deploy the same app on Ray Serve: `voxflow.ray.launch`)."""

from __future__ import annotations

import argparse
import ipaddress
import logging

from voxflow.cli.common import CliError, load_cli_settings
from voxflow.cli.startup_summary import log_settings
from voxflow.config import Settings
from voxflow.logging_setup import configure_logging
from voxflow.wyoming.address import wyoming_address

log = logging.getLogger(__name__)


def add_serve(commands, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser(
        "serve", parents=[common], help="run the HTTP server (OpenAI-compatible speech API)",
        description="Load the settings, start the engine and serve the HTTP API.",
    )
    p.add_argument("--host", help="bind address (server.host)")
    p.add_argument("--port", type=int, help="TCP port (server.port)")
    p.add_argument(
        "--wyoming", metavar="[HOST:]PORT", type=wyoming_address,
        help="also serve Home Assistant's Wyoming protocol there (wyoming.enabled, "
        "wyoming.host, wyoming.port; host 127.0.0.1 unless given)",
    )
    p.add_argument(
        "--ray", action="store_true",
        help="serve through Ray Serve: replicas of the app, one engine each, autoscaled by "
        "the ray: settings (needs the ray extra; docs/scale-out.md)",
    )
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP server until interrupted."""
    flags = {"server.host": args.host, "server.port": args.port}
    if getattr(args, "wyoming", None) is not None:
        host, port = args.wyoming
        flags.update({"wyoming.enabled": True, "wyoming.host": host, "wyoming.port": port})
    settings = load_cli_settings(args, after={k: v for k, v in flags.items() if v is not None})
    configure_logging(settings.server.log_level)
    log_settings(log, settings)  # a summary; every setting at DEBUG (API keys as **********)
    warn_if_open(settings.server.host, bool(settings.server.api_keys))
    if args.ray:
        if settings.wyoming.enabled:
            raise CliError("--ray does not serve Wyoming (each replica would bind its port): "
                           "run a plain `voxflow serve --wyoming` beside the cluster")
        return _serve_on_ray(settings)
    _check_port_free(settings.server.host, settings.server.port)
    if settings.wyoming.enabled:
        warn_if_wyoming_open(settings.wyoming.host)
        if settings.wyoming.port:
            _check_port_free(settings.wyoming.host, settings.wyoming.port)

    from voxflow.server import shutdown
    from voxflow.server.app import create_app

    # SIGTERM/SIGINT: drain (server.drain_timeout_s), then exit 0; a second signal exits at once
    shutdown.serve_app(
        create_app(settings),
        drain_timeout_s=settings.server.drain_timeout_s,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        # voxflow.access logs each speech request (voxflow.server.request_id); uvicorn's own
        # access line would be a second, poorer line per request
        access_log=False,
        # asyncio and h11 whatever else is installed: the Ray extra pulls in uvloop and
        # httptools, and uvicorn's "auto" would then serve (and benchmark) on another event
        # loop and HTTP parser than a runtime-only install (`make serve`) runs
        loop="asyncio",
        http="h11",
        # X-Forwarded-For from these addresses only (the access log's client)
        proxy_headers=bool(settings.server.trusted_proxies),
        forwarded_allow_ips=list(settings.server.trusted_proxies) or None,
    )
    return 0


def _serve_on_ray(settings: Settings) -> int:
    """`voxflow serve --ray` (`voxflow.ray.launch`): a clear error without the ray extra."""
    from voxflow.ray.launch import (
        RayMissingError,
        check_ray_installed,
        joins_cluster,
        serve_on_ray,
    )

    try:
        check_ray_installed()
    except RayMissingError as exc:
        raise CliError(str(exc)) from None
    if not joins_cluster(settings):  # a cluster's proxy may already listen there
        _check_port_free(settings.server.host, settings.server.port)
    try:
        serve_on_ray(settings)
    except ConnectionError as exc:  # ray.address names no reachable cluster
        raise CliError(f"cannot join the Ray cluster: {exc}") from None
    return 0


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (127.0.0.0/8, ::1, ``localhost``): only this
    machine can connect. A name other than ``localhost`` counts as reachable from outside."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_wyoming_open(host: str) -> None:
    """Log a WARNING when the Wyoming server listens beyond this machine: the protocol has no
    authentication."""
    if is_loopback(host):
        return
    log.warning(
        "wyoming: listening on %s: the Wyoming protocol has no authentication, so anyone who "
        "can reach this address can use the voices (bind wyoming.host to 127.0.0.1, or keep "
        "the port behind a firewall)", host)


def warn_if_open(host: str, has_keys: bool) -> None:
    """Log a WARNING when the server will listen beyond this machine without API keys."""
    if has_keys or is_loopback(host):
        return
    log.warning(
        "listening on %s without API keys: anyone who can reach this address can use the API "
        "(and delete saved voices); set server.api_keys, server.api_keys_file or "
        "VOXFLOW_API_KEYS (docs/api.md, API keys)", host,
    )


def _check_port_free(host: str, port: int) -> None:
    """Fail before loading any model when the address is taken (uvicorn would only find out
    after the models loaded and warmed up, and exit with its own status 3)."""
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
