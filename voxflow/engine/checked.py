"""A speech request checked and parsed by `Engine.check`, ready for `Engine.submit`.

The HTTP route checks a request first (every 4xx it can earn, before any work), decides from
the result whether its audio can come from the audio cache (`voxflow.server.audio_cache`),
and only on a miss submits it: `Engine.submit(request, checked=...)` takes this result, so
nothing is resolved or parsed twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxflow.engine.request import SpeechRequest
from voxflow.models.base import ModelFamily
from voxflow.text.document import SpeechDocument


@dataclass(frozen=True)
class CheckedRequest:
    """One request as the engine will run it.

    Attributes:
        request: the request with its model and voice aliases resolved and its instructions
            dropped where its model does not follow them (None then).
        family: the loaded family serving `request.model`.
        document: the parsed input, its language decided (`Engine.prepare`).
        fixed_audio: whether its audio is a pure function of the request
            (`ModelFamily.fixed_audio`, and seeded requests only while they run alone,
            ``engine.isolate_seeded``): the same request gives the same bytes.
        lexicon: the name of the pronunciation lexicon `document` was read with (the
            request's, else its voice's or model's default), None for none.
    """

    request: SpeechRequest
    family: ModelFamily
    document: SpeechDocument
    fixed_audio: bool
    lexicon: str | None = None


__all__ = ["CheckedRequest"]
