"""What a model family implements to take saved voices (``/v1/audio/voices``, issue 11).

A family that clones voices (CosyVoice3 today; not Piper or Kokoro) creates a voice from an
upload, deletes the voices it saved (never its built-in ones), and lets each speech request
hold the voice it uses (`hold_voice`) until the request ends, so deleting a voice never pulls it
from under a request already admitted (docs/api.md, "Saved voices").

Threads: `create_voice` may run in a worker thread (it decodes audio and runs models);
`delete_voice` and `hold_voice` run on the event loop thread, where `Engine.submit` checks the
voice, so a request admitted with a voice always holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class VoiceUpload:
    """One ``POST /v1/audio/voices`` form, already size-checked.

    Exactly one of `audio` (a recording, with `text` its transcript) and `features` (a
    precomputed prompt-feature file) is set; the route checks that.
    """

    name: str
    audio: bytes | None = None
    text: str | None = None
    features: bytes | None = None
    language: str | None = None


@runtime_checkable
class VoiceCloning(Protocol):
    """A family whose voices can be created and deleted through the API."""

    def create_voice(self, upload: VoiceUpload) -> str:
        """Build, save and serve a voice; returns the voice id it is served under.

        Raises:
            InvalidRequestError: bad name, unusable audio or feature file, missing models (400).
            ConflictError: a voice by that name exists or is still in use (409).
        """
        ...

    def delete_voice(self, voice_id: str) -> None:
        """Remove a saved voice from disk and from the served voices.

        Requests that hold it (`hold_voice`) finish with it; new ones are refused.

        Raises:
            VoiceNotFoundError: no voice by that id (404).
            VoiceForbiddenError: a built-in or the default voice (403).
        """
        ...

    def hold_voice(self, voice_id: str) -> Callable[[], None]:
        """Keep `voice_id`'s features loaded until the returned callback is called (once)."""
        ...

    def saved_voice_ids(self) -> list[str]:
        """The ids of the voices created through the API (deletable), sorted."""
        ...


__all__ = ["VoiceCloning", "VoiceUpload"]
