"""`SpeechStream`: the async iterator of `AudioChunk`s that `Engine.submit` returns.

It holds the request's place in `Admission` and its deadline. Iterating admits the request
(waiting for an in-flight slot if needed) and then calls `start` (the engine queues the text for
the front end), then yields chunks as worker threads hand them over. Closing it early (`aclose`,
or the consumer going away) cancels the request: its queued segments are dropped. However it
ends, it releases its admission once and calls `on_end` once with its outcome.

Reading: a chunk counts as read by the listener once its consumer comes back for the next
one (it has sent the chunk on: `RequestState.mark_read`), which lets the scheduler hold a
request whose client stopped reading (rule 9). A consumer away longer than `stall_s` after
taking a chunk (blocked sending it to a client that reads nothing) stalls the stream: the
request is cancelled ("stalled"), its chunks dropped, the stall logged, and the consumer's
next call raises `ClientStalledError`. A request whose synthesis is held for its listener
(`RequestState.backlogged`) parks: it gives its in-flight slot to others
(`Admission.park`) and waits for one again once its consumer reads it below the limit. The
request timeout counts synthesis, not reading: the time the consumer spends away is added to
it, and a chunk already made is handed over whatever the clock says.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from voxflow.engine.admission import PARKED, SLOT, WAITING, Admission
from voxflow.engine.request import AudioChunk, RequestState
from voxflow.errors import ClientStalledError, RequestTimeoutError
from voxflow.memory_gate import WorkingSetGate

log = logging.getLogger(__name__)


class SpeechStream:
    """Async iterator over one request's chunks; use ``async with`` or call `aclose()`.

    Args:
        state: the request's state (its sink feeds `queue`).
        queue: where the sink puts (chunk, error) pairs, on the event loop.
        timeout_s: seconds from now until the request times out.
        admission: where the request was reserved (`Admission.reserve`).
        start: called once the request holds a slot (queues its first item).
        on_end: called once when the stream ends, with "ok", "error", "timeout",
            "cancelled" or "stalled".
        internal: a warm-up request, kept out of request metrics.
        stall_s: seconds a consumer may stay away after taking a chunk before the stream
            stalls (module docstring); None: never.
        gate: the memory gate its queued chunks' bytes are counted in while they wait for
            the consumer (`WorkingSetGate.add_buffered`); None: not counted.
    Raises (from iteration):
        RequestTimeoutError: past the engine's request timeout (504).
        ClientStalledError: the stream stalled (408; module docstring).
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
        stall_s: float | None = None,
        gate: WorkingSetGate | None = None,
    ):
        self._admission = admission
        self._start = start
        self._on_end = on_end
        self.state = state
        self._queue = queue
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self.internal = internal  # warm-up: kept out of request metrics
        self.admitted = False  # was given an in-flight slot
        self._holds = WAITING  # what it holds in `admission` (`Admission.release`)
        self._resuming: asyncio.Task | None = None  # parked, waiting for a slot again
        self._away_since: float | None = None  # monotonic time the consumer took a chunk
        self._closed = False
        self._done = False
        self._stall_s = stall_s
        self._stall_timer: asyncio.TimerHandle | None = None
        self._unread = 0  # samples of the chunk last taken, read once the consumer returns
        self._stalled = False
        self._gate = gate
        self._queued_bytes = 0  # of the chunks in `queue`, counted in `gate`

    @property
    def request_id(self) -> str:
        return self.state.id

    @property
    def stall_s(self) -> float | None:
        """Seconds a consumer may stay away after taking a chunk (None: no limit)."""
        return self._stall_s

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
        self._consumer_back()
        if self._stalled:
            raise ClientStalledError(self._stall_s or 0.0)
        if self._done or self._closed:
            raise StopAsyncIteration
        try:
            if not self.admitted:
                await self._wait(self._admit())
            if self._queue.empty():
                chunk, error = await self._wait(self._queue.get())
            else:  # made already: no deadline to miss
                chunk, error = self._queue.get_nowait()
            if chunk is not None:
                self._unqueued(chunk.samples.nbytes)
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
        else:
            self._consumer_away(chunk.samples.size)
        return chunk

    def arrive(self, chunk: AudioChunk | None, error: BaseException | None) -> None:
        """A chunk (or the request's error) from the engine's sink, on the event loop: queued
        for the consumer; a request now `backlogged` parks (module docstring)."""
        self._queue.put_nowait((chunk, error))
        if chunk is not None and self._gate is not None and not self._done:
            self._queued_bytes += chunk.samples.nbytes
            self._gate.add_buffered(chunk.samples.nbytes)
        if (chunk is not None and self._holds == SLOT and not self._done
                and self.state.backlogged):
            self._admission.park()
            self._holds = PARKED
            self.state.set_parked(True)

    def _unqueued(self, nbytes: int) -> None:
        """`nbytes` of queued audio left the queue (taken, or dropped at the end)."""
        nbytes = min(nbytes, self._queued_bytes)
        if nbytes and self._gate is not None:
            self._queued_bytes -= nbytes
            self._gate.add_buffered(-nbytes)

    def _consumer_back(self) -> None:
        """The consumer asks for the next chunk: the one it took is read (`mark_read`), the
        time it was away is added to the deadline, and a parked request no longer backlogged
        waits for a slot again (`_resume`)."""
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if self._away_since is not None:
            self._deadline += time.monotonic() - self._away_since
            self._away_since = None
        if self._unread:
            self.state.mark_read(self._unread)
            self._unread = 0
        if (self._holds == PARKED and self._resuming is None and not self._done
                and not self.state.backlogged):
            self._resuming = asyncio.get_running_loop().create_task(self._resume())

    async def _resume(self) -> None:
        """Wait for an in-flight slot for the parked request; holding it, synthesis goes on."""
        try:
            if await self._admission.resume(lambda: self._done):
                self._holds = SLOT
                self.state.set_parked(False)
        finally:
            self._resuming = None

    def _consumer_away(self, samples: int) -> None:
        """The consumer took a chunk of `samples`: it stalls unless back within `stall_s`."""
        self._unread = samples
        self._away_since = time.monotonic()
        if self._stall_s is not None:
            self._stall_timer = asyncio.get_running_loop().call_later(
                self._stall_s, self._stall)

    def _stall(self) -> None:
        """The consumer stayed away `stall_s`: cancel the request and drop its chunks."""
        self._stall_timer = None
        if self._done or self._closed:
            return
        self._stalled = True
        log.warning("request %s: the client read nothing for %g s (%.1f s of audio sent, "
                    "%.1f s made); cancelled", self.request_id, self._stall_s,
                    self.state.read_samples / self.sample_rate,
                    self.state.audio_samples / self.sample_rate)
        self._finish("stalled")
        while not self._queue.empty():  # the chunks made ahead: nobody will take them
            self._queue.get_nowait()

    async def _admit(self) -> None:
        """Wait for a slot, then start the request (a stream closed meanwhile starts nothing)."""
        if await self._admission.acquire(lambda: self._done):
            self.admitted = True
            self._holds = SLOT
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
        if self._resuming is not None:
            self._resuming.cancel()
        if status != "ok":  # what is still queued will not be taken
            self._unqueued(self._queued_bytes)
        self._admission.release(self._holds)
        self._on_end(self, status)

    async def aclose(self) -> None:
        """Stop early: cancels the request unless it already ended (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if not self._done:
            self._finish("cancelled")
            self._queue.put_nowait((None, None))  # wake a consumer waiting for the next chunk
