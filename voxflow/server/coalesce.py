"""Join a request's audio chunks into pieces of a minimum length before they are encoded.

Used where each piece sent has a cost of its own: behind Ray Serve every body message of a
streamed response is one hop from the replica to the proxy, and that overhead grows with the
number of messages (`voxflow.ray`, ``ray.min_stream_chunk_ms``). The plain server sends each
engine chunk as it comes (``min_samples`` 0).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np

from voxflow.engine.request import AudioChunk


def join_chunks(chunks: list[AudioChunk]) -> AudioChunk:
    """One chunk holding `chunks` (in order, at least one) back to back: their samples
    concatenated, their words in order, the first one's index, the last one's `is_last`.

    Raises:
        ValueError: `chunks` is empty.
    """
    if not chunks:
        raise ValueError("nothing to join")
    if len(chunks) == 1:
        return chunks[0]
    first, last = chunks[0], chunks[-1]
    return AudioChunk(
        samples=np.concatenate([c.samples for c in chunks]),
        sample_rate=first.sample_rate,
        request_id=first.request_id,
        index=first.index,
        is_last=last.is_last,
        words=tuple(word for c in chunks for word in c.words),
    )


async def coalesced(chunks: AsyncIterator[AudioChunk], min_samples: int
                    ) -> AsyncIterator[AudioChunk]:
    """`chunks` joined so each yielded chunk holds at least `min_samples` samples, except the
    last one (the request's final chunk, or whatever was pending when `chunks` ended early).

    A chunk is held only while the pending audio is shorter than `min_samples`, so the first
    audio leaves as soon as that much exists. ``min_samples <= 0`` passes chunks through.
    Errors of `chunks` propagate after nothing more is yielded (the pending audio is dropped:
    the response is cut at an error either way).
    """
    pending: list[AudioChunk] = []
    held = 0
    async for chunk in chunks:
        pending.append(chunk)
        held += len(chunk.samples)
        if held >= min_samples or chunk.is_last:
            yield join_chunks(pending)
            pending, held = [], 0
    if pending:
        yield join_chunks(pending)


__all__ = ["coalesced", "join_chunks"]
