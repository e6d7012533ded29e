"""The server's resident memory (RSS), read from its ``/metrics`` or from its process id.

voxflow's ``/metrics`` carries prometheus_client's process collector
(``process_resident_memory_bytes``, read by the server from ``/proc/self/stat`` on Linux), so a
running server can be measured from outside with no access to its process. A server started by
the bench can also be measured by pid (psutil), which also works for servers without that
metric.
"""

from __future__ import annotations

import math
from typing import Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

RSS_METRIC = "process_resident_memory_bytes"


def parse_rss(metrics_text: str) -> float | None:
    """The value of ``process_resident_memory_bytes`` in a Prometheus text exposition, read by
    prometheus_client's parser.

    Args:
        metrics_text: the body of ``GET /metrics`` (text format 0.0.4).
    Returns:
        Bytes (float, as Prometheus writes it, e.g. ``7.11e+08``), or None when the metric is
        absent, its value is not a finite number >= 0, or the body is not an exposition.
    """
    try:
        values = [sample.value for family in text_string_to_metric_families(metrics_text)
                  for sample in family.samples if sample.name == RSS_METRIC and not sample.labels]
    except ValueError:
        return None
    return values[0] if values and math.isfinite(values[0]) and values[0] >= 0 else None


class RssSource(Protocol):
    """Where RSS samples come from; `describe` names it in the report."""

    def describe(self) -> str: ...

    async def read(self) -> float | None:
        """The server's RSS in bytes now, or None when it cannot be read (server gone)."""
        ...


class MetricsRss:
    """RSS from the server's ``GET {url}/metrics``."""

    def __init__(self, client: httpx.AsyncClient, url: str):
        self._client, self._url = client, url.rstrip("/")

    def describe(self) -> str:
        return f"{self._url}/metrics {RSS_METRIC}"

    async def read(self) -> float | None:
        try:
            response = await self._client.get(f"{self._url}/metrics", timeout=10)
        except httpx.HTTPError:
            return None
        return parse_rss(response.text) if response.status_code == 200 else None


class PidRss:
    """RSS of process `pid` and all its descendants (a server started through ``sh -c``)."""

    def __init__(self, pid: int):
        self.pid = pid

    def describe(self) -> str:
        return f"pid {self.pid} and its children (psutil)"

    async def read(self) -> float | None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        total = 0
        for proc in processes:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return float(total)


async def pick_source(client: httpx.AsyncClient, url: str, pid: int | None) -> RssSource | None:
    """`PidRss` when a pid is given, else `MetricsRss` when the server exports the metric.

    Returns:
        None when no pid is given and ``/metrics`` has no RSS.
    """
    if pid is not None:
        return PidRss(pid)
    source = MetricsRss(client, url)
    return source if await source.read() is not None else None
