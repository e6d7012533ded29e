"""A pronunciation lexicon with Kokoro's English through the real server (configs/multi.yaml):
Whisper hears its phoneme entry and its respelling, as test_lexicons_api.py hears them for
Piper (issue 44)."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from voxflow.eval.normalize import normalize_for_wer

pytestmark = pytest.mark.integration

RATE = 24000
TABLE = "tˈeɪbəl"  # espeak-ng's IPA for "table"
ENTRIES = {"entries": [{"word": "Zorbleck", "phonemes": TABLE},
                       {"word": "colour", "respelling": "purple"}]}
TEXT = "Put the book on the Zorbleck. My favourite colour is red."


def heard(url: str, transcribe, **extra) -> str:
    """What Whisper hears of `TEXT` read by Kokoro's jm_kumo, normalized."""
    response = httpx.post(f"{url}/v1/audio/speech", timeout=300, json={
        "model": "kokoro", "voice": "jm_kumo", "input": TEXT, "response_format": "pcm",
        "sample_rate": "native", "seed": 7, **extra})
    assert response.status_code == 200, response.text
    audio = np.frombuffer(response.content, dtype="<i2").astype(np.float32) / 32767.0
    return normalize_for_wer(transcribe(audio, RATE))


@pytest.mark.slow  # Whisper, and Kokoro
def test_whisper_hears_the_entries_with_kokoro(multi_server, transcribe):
    url = multi_server.url
    # multi_server is the session's: the lexicon goes into the run's own data folder, and away
    saved = httpx.put(f"{url}/v1/audio/lexicons/kokoro-house", content=json.dumps(ENTRIES),
                      headers={"content-type": "application/json"}, timeout=30)
    assert saved.status_code == 200, saved.text
    try:
        plain = heard(url, transcribe)
        words = heard(url, transcribe, lexicon="kokoro-house")
    finally:
        httpx.delete(f"{url}/v1/audio/lexicons/kokoro-house", timeout=30)
    print(f"\nwithout the lexicon: {plain}\nwith it: {words}")
    assert "purple" not in plain and "table" not in plain, plain
    # the phoneme entry is its own segment: Kokoro ends the segment before it on "the", which
    # Whisper has heard as "there" ("put the book on there table"), so the word alone is checked
    assert "table" in words.split(), words
    assert "purple" in words and "colour" not in words and "color" not in words, words
