"""Send one request and record its `Timeline`: when each piece of decoded audio arrived.

Timestamps are `time.perf_counter()` taken as each body read returns, before decoding, so the
client's own decoding cost is not charged to the server. A failed request is recorded with an
error kind rather than raised, so one bad request never stops a level:

=================  ==========================================================
kind               meaning
=================  ==========================================================
``http_<status>``  a non-200 answer (``http_429``: overloaded, ``http_504``...)
``timeout``        no answer or no progress within the request timeout
``connect``        the connection was refused or could not be made
``truncated``      the connection broke or closed mid-body
``decode``         the body is not valid audio of the expected format
``stream_error``   the server sent an error event inside an SSE stream
``no_audio``       a complete answer with zero samples (set by `level_stats`)
=================  ==========================================================
"""

from __future__ import annotations

import time
from typing import cast

import httpx
import numpy as np

from voxflow.bench.adapters import Adapter, HttpAdapter, WyomingAdapter
from voxflow.bench.decode import DecodeError, StreamError
from voxflow.bench.timeline import Result, Timeline
from voxflow.bench.wyoming_client import fetch_wyoming


def error_kind(exc: BaseException) -> str:
    """The error kind (see the module docstring) of an exception raised while fetching."""
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return "truncated"
    if isinstance(exc, DecodeError):
        return "decode"
    if isinstance(exc, StreamError):
        return "stream_error"
    raise exc


async def fetch(
    client: httpx.AsyncClient,
    adapter: Adapter,
    text: str,
    text_index: int,
    seed: int | None,
    timeout_s: float,
    keep_audio: bool = False,
) -> Result:
    """Send one request for `text` and read its whole body; never raises for a failed request.

    A Wyoming server (`WyomingAdapter`) gets one connection per request
    (`voxflow.bench.wyoming_client`); it takes no seed, and `client` is not used.
    """
    if isinstance(adapter, WyomingAdapter):
        return await fetch_wyoming(adapter.target, text, text_index, timeout_s, keep_audio)
    http = cast(HttpAdapter, adapter)  # every engine but wyoming speaks HTTP
    return await _fetch_http(client, http, text, text_index, seed, timeout_s, keep_audio)


async def _fetch_http(client: httpx.AsyncClient, adapter: HttpAdapter, text: str,
                      text_index: int, seed: int | None, timeout_s: float,
                      keep_audio: bool) -> Result:
    url, body = adapter.request(text, seed)
    pieces: list[np.ndarray] = []
    timeline = Timeline(text_index, sent=time.perf_counter())
    try:
        async with client.stream("POST", url, json=body, timeout=timeout_s,
                                 headers=adapter.target.headers) as response:
            if response.status_code != 200:
                await response.aread()
                timeline.error = f"http_{response.status_code}"
                return Result(timeline)
            decoder = adapter.decoder(response)
            async for data in response.aiter_raw():
                now = time.perf_counter()
                samples = decoder.feed(data)
                timeline.add(now, samples.size)
                if keep_audio and samples.size:
                    pieces.append(samples)
            tail = decoder.finish()
            timeline.add(time.perf_counter(), tail.size)
            if keep_audio and tail.size:
                pieces.append(tail)
            timeline.sample_rate = decoder.sample_rate
    except (httpx.HTTPError, DecodeError, StreamError) as exc:
        timeline.error = error_kind(exc)
    finally:
        timeline.done = time.perf_counter()
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    return Result(timeline, audio if keep_audio else None)
