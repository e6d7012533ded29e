"""The real joe voice through the real server, checked by ASR: word error rate and isolation."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import jiwer
import numpy as np
import pytest
from conftest import data_file

from voxflow.eval.normalize import normalize_for_wer

pytestmark = pytest.mark.integration


def speak_pcm(url: str, text: str, **extra) -> np.ndarray:
    """POST /v1/audio/speech as 16-bit PCM at the voice's own rate (the model's audio as made,
    not resampled); returns float32 samples at 22,050 Hz."""
    body = {"model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
            "sample_rate": "native", **extra}
    r = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["x-sample-rate"] == "22050"
    return np.frombuffer(r.content, dtype="<i2").astype(np.float32) / 32767.0


def test_word_error_rate_over_sentences_file(joe_server, transcribe):
    lines = data_file("sentences.txt").read_text().splitlines()
    sentences = [s.strip() for s in lines if s.strip()]
    assert len(sentences) == 30
    with ThreadPoolExecutor(4) as pool:
        clips = list(pool.map(lambda s: speak_pcm(joe_server.url, s, seed=7), sentences))
    hypotheses = [normalize_for_wer(transcribe(c, 22050)) for c in clips]
    references = [normalize_for_wer(s) for s in sentences]
    wer = jiwer.wer(references, hypotheses)
    print(f"\nWER over {len(sentences)} sentences of sentences.txt: {wer:.4f}")
    for ref, hyp in zip(references, hypotheses, strict=True):
        if ref != hyp:
            print(f"  ref: {ref}\n  hyp: {hyp}")
    assert wer <= 0.05


def test_sixteen_concurrent_requests_each_get_their_own_audio(joe_server, transcribe):
    # Sixteen different sentences at once: each transcript must match its own text far better
    # than any other request's text, so audio crossing between requests cannot pass.
    lines = data_file("sentences.txt").read_text().splitlines()
    texts = [s.strip() for s in lines if s.strip()][:16]
    with ThreadPoolExecutor(16) as pool:
        clips = list(pool.map(lambda t: speak_pcm(joe_server.url, t), texts))
    references = [normalize_for_wer(t) for t in texts]
    for i, clip in enumerate(clips):
        heard = normalize_for_wer(transcribe(clip, 22050))
        own = jiwer.wer(references[i], heard)
        nearest_other = min(jiwer.wer(r, heard) for j, r in enumerate(references) if j != i)
        assert own <= 0.25, f"{texts[i]!r} was heard as {heard!r}"
        assert nearest_other > 0.6, f"{texts[i]!r} sounds like another request: {heard!r}"
