"""Text that reaches a request after it was submitted (issue 43 item 2: "bistream").

A WebSocket speech session sends its text in pieces. For a family that feeds one running
generation from them (`voxflow.models.base.ModelFamily.streams_text_in`: CosyVoice3), the session
submits one request that carries a `TextFeed` (`voxflow.stages.items.RequestInfo.text_feed`) and
pushes every later piece into it; the autoregressive stage takes the text between its steps and
parks the request (no compute, its decode state held) while the feed has nothing new.

Thread-safe: the session pushes on the event loop, the stage takes on its worker thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TextFeed:
    """Pieces of text in order, then an end. `push`/`end` from the producer; `take` from the
    consumer (the stage), which gets everything pushed since its last take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pieces: list[str] = []
        self._ended = False
        self._end_taken = False
        self.chars = 0  # characters pushed so far
        self.last_push = time.monotonic()  # when text (or the end) last arrived
        self._watchers: list[Callable[[], None]] = []
        self._rolled = False

    def push(self, text: str) -> None:
        """Append `text` (may be empty: nothing happens).

        Raises:
            ValueError: after `end`.
        """
        with self._lock:
            if self._ended:
                raise ValueError("text pushed after the end of the feed")
            if not text:
                return
            self._pieces.append(text)
            self.chars += len(text)
            self.last_push = time.monotonic()
        self._wake()

    def end(self) -> None:
        """No more text will come (idempotent)."""
        with self._lock:
            self._ended = True
            self.last_push = time.monotonic()
        self._wake()

    def watch(self, callback: Callable[[], None]) -> None:
        """Call `callback` (no lock held) each time text or the end arrives: the stage loop's
        wake-up for a request parked on this feed (`StageQueue.nudge`); added once."""
        with self._lock:
            if callback not in self._watchers:
                self._watchers.append(callback)

    def _wake(self) -> None:
        with self._lock:
            watchers = list(self._watchers)
        for callback in watchers:
            callback()

    def take(self) -> tuple[str, bool]:
        """(the text pushed since the last take, whether the end has now been seen)."""
        with self._lock:
            text, self._pieces = "".join(self._pieces), []
            self._end_taken = self._ended
            return text, self._ended

    def roll_over(self, unspoken: str) -> None:
        """The consumer's generation takes no more text (it reached the text it may take, the
        CosyVoice3 roll-over, `lm_stream.StreamState.roll_over`): `unspoken`, text it took but
        will not speak, goes back before what it has not taken, and `rolled` becomes True. The
        producer then `take`s everything not spoken (and whether the end came) for its next
        generation; pushes keep landing here until it does."""
        with self._lock:
            if unspoken:
                self._pieces.insert(0, unspoken)
            self._end_taken = False
            self._rolled = True

    @property
    def rolled(self) -> bool:
        """True once the consumer rolled over (`roll_over`)."""
        with self._lock:
            return self._rolled

    @property
    def has_news(self) -> bool:
        """True when a `take` would return text, or an end not yet taken."""
        with self._lock:
            return bool(self._pieces) or (self._ended and not self._end_taken)

    @property
    def ended(self) -> bool:
        with self._lock:
            return self._ended

    def idle_s(self) -> float:
        """Seconds since text (or the end) last arrived."""
        return time.monotonic() - self.last_push
