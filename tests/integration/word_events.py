"""Shared by the word-timestamp tests of each model: the input they speak, the words it
holds, the SSE request that asks for their timings, and the checks every answer must pass."""

from __future__ import annotations

import json

import httpx

TEXT = "  Dr. Smith paid $5.50 on 3/4.\n\nThe quick brown fox jumps over the lazy dog."
WORDS = ["Dr.", "Smith", "paid", "$5.50", "on", "3/4", "The", "quick", "brown", "fox", "jumps",
         "over", "the", "lazy", "dog"]


def sse_events(url: str, model: str, voice: str, **body) -> list[dict]:
    """The `data:` events of `POST /v1/audio/speech` for `TEXT` as pcm SSE with timestamps."""
    payload = {"model": model, "voice": voice, "input": TEXT, "response_format": "pcm",
               "stream_format": "sse", "timestamps": True, **body}
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=payload, timeout=120) as r:
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    return [json.loads(line[6:]) for line in lines]


def check_words(words: list[dict], text: str, duration: float) -> None:
    """`words` are `WORDS`, each indexing `text`, in order in time and in the text, the last
    ending inside the `duration` seconds of audio."""
    assert [w["word"] for w in words] == WORDS
    end = 0.0
    for w in words:
        assert text[w["text_start"] : w["text_end"]] == w["word"]
        assert end <= w["start"] <= w["end"]
        end = w["end"]
    assert words[-1]["end"] <= duration + 1e-3
    spans = [(w["text_start"], w["text_end"]) for w in words]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
