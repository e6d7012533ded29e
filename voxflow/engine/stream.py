"""`SpeechStream`: the async iterator of `AudioChunk`s that `Engine.submit` returns.

It holds the request's place in `Admission` and its deadline. Iterating admits the request
(waiting for an in-flight slot if needed) and then calls `start` (the engine queues the text for
the front end), then yields chunks as worker threads hand them over. Closing it early (`aclose`,
or the consumer going away) cancels the request: its queued segments are dropped. However it
ends, it releases its admission once and calls `on_end` once with its outcome.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from voxflow.engine.admission import Admission
from voxflow.engine.request import AudioChunk, RequestState
from voxflow.errors import RequestTimeoutError


class SpeechStream:
    """Async iterator over one request's chunks; use ``async with`` or call `aclose()`.

    Args:
        state: the request's state (its sink feeds `queue`).
        queue: where the sink puts (chunk, error) pairs, on the event loop.
        timeout_s: seconds from now until the request times out.
        admission: where the request was reserved (`Admission.reserve`).
        start: called once the request holds a slot (queues its first item).
        on_end: called once when the stream ends, with "ok", "error", "timeout" or
            "cancelled".
        internal: a warm-up request, kept out of request metrics.
    Raises (from iteration):
        RequestTimeoutError: past the engine's request timeout (504).
        VoxflowError: the request failed in a stage (its own error, e.g. nothing to speak).
    """

    def __init__(
        self,
        state: RequestState,
        queue: asyncio.Queue,
        timeout_s: float,
        admission: Admission,
        start: Callable[[], None],
        on_end: Callable[[SpeechStream, str], None],
        internal: bool = False,
    ):
        self._admission = admission
        self._start = start
        self._on_end = on_end
        self.state = state
        self._queue = queue
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self.internal = internal  # warm-up: kept out of request metrics
        self.admitted = False  # holds an in-flight slot
        self._closed = False
        self._done = False

    @property
    def request_id(self) -> str:
        return self.state.id

    @property
    def sample_rate(self) -> int:
        """Hz of every chunk this stream yields."""
        return self.state.sample_rate

    def __aiter__(self) -> SpeechStream:
        return self

    async def __aenter__(self) -> SpeechStream:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def __anext__(self) -> AudioChunk:
        if self._done or self._closed:
            raise StopAsyncIteration
        try:
            if not self.admitted:
                await self._wait(self._admit())
            chunk, error = await self._wait(self._queue.get())
            if self._closed:  # woken by aclose() from another task
                raise StopAsyncIteration
        except TimeoutError:
            self._finish("timeout")
            raise RequestTimeoutError(self._timeout_s) from None
        if error is not None:
            self._finish("error")
            raise error
        assert chunk is not None
        if chunk.is_last:
            self._finish("ok")
        return chunk

    async def _admit(self) -> None:
        """Wait for a slot, then start the request (a stream closed meanwhile starts nothing)."""
        if await self._admission.acquire(lambda: self._done):
            self.admitted = True
            self._start()

    async def _wait(self, awaitable):
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise TimeoutError
        return await asyncio.wait_for(awaitable, remaining)

    async def collect(self) -> list[AudioChunk]:
        """Consume the whole stream; returns every chunk in order."""
        async with self:
            return [chunk async for chunk in self]

    @property
    def closed(self) -> bool:
        """True once `aclose()` was called (client gone, or the consumer stopped early)."""
        return self._closed

    @property
    def done(self) -> bool:
        """True once the stream ended: last chunk, error, timeout or close."""
        return self._done

    def _finish(self, status: str) -> None:
        if self._done:
            return
        self._done = True
        if status != "ok":
            self.state.cancel()
        self._admission.release(self.admitted)
        self._on_end(self, status)

    async def aclose(self) -> None:
        """Stop early: cancels the request unless it already ended (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self._done:
            self._finish("cancelled")
            self._queue.put_nowait((None, None))  # wake a consumer waiting for the next chunk
