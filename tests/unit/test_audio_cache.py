"""The audio cache's LRU (eviction by bytes, oversize entries, accounting, voice and lexicon
drops) and its key (every keyed field changes it; every request field is decided)."""

from __future__ import annotations

import dataclasses

import pytest

from voxflow.engine.request import SpeechRequest
from voxflow.server.audio_cache import (
    KEYED_FIELDS,
    UNKEYED_FIELDS,
    AudioCache,
    CachedResponse,
    CacheKey,
)
from voxflow.server.schemas import SpeechBody
from voxflow.text.document import SpeechDocument, TextRun


def key(**changes) -> CacheKey:
    base = CacheKey(model="piper", voice="joe", voice_version=0,
                    document=SpeechDocument((TextRun("Hello."),)), raw_input=None, speed=1.0,
                    seed=1, response_format="wav", sample_rate=22050, mode="whole",
                    timestamps=False, instructions=None, lexicon=None)
    return dataclasses.replace(base, **changes)


def entry(n: int) -> CachedResponse:
    return CachedResponse(b"x" * n, "audio/wav")


def test_least_recently_used_goes_first_when_the_bytes_overflow():
    cache = AudioCache(max_bytes=100, max_entry_bytes=60)
    a, b, c = key(seed=1), key(seed=2), key(seed=3)
    assert cache.put(a, entry(40)) and cache.put(b, entry(40))
    assert cache.get(a) is not None  # a is now the most recent: b goes first
    assert cache.put(c, entry(30))
    assert (cache.get(b), cache.nbytes, len(cache), cache.evictions) == (None, 70, 2, 1)
    assert cache.get(a).body == b"x" * 40 and cache.get(c).body == b"x" * 30


def test_an_oversize_entry_is_not_stored_and_replacing_counts_bytes_once():
    cache = AudioCache(max_bytes=100, max_entry_bytes=50)
    assert not cache.put(key(), entry(51))
    assert (cache.nbytes, len(cache)) == (0, 0)
    assert cache.put(key(), entry(50)) and cache.put(key(), entry(20))
    assert (cache.nbytes, len(cache)) == (20, 1)
    assert not AudioCache(max_bytes=0, max_entry_bytes=1).put(key(), entry(1))


def test_hits_and_misses_are_counted_per_model():
    cache = AudioCache(100, 50)
    cache.get(key())
    cache.put(key(), entry(5))
    cache.get(key())
    cache.get(key(model="kokoro"))
    assert (cache.hits, cache.misses) == ({"piper": 1}, {"piper": 1, "kokoro": 1})


def test_dropping_a_voice_forgets_its_entries_and_refuses_keys_built_before():
    cache = AudioCache(100, 50)
    old = key(voice="alice", model="cosyvoice3")
    cache.put(old, entry(10))
    cache.put(key(), entry(10))
    assert cache.drop_voice("cosyvoice3", "alice") == 1
    assert (cache.nbytes, len(cache)) == (10, 1)
    assert not cache.put(old, entry(10))  # made while the voice was being deleted
    new = key(voice="alice", model="cosyvoice3",
              voice_version=cache.voice_version("cosyvoice3", "alice"))
    assert new != old and cache.put(new, entry(10))


def test_dropping_a_lexicon_forgets_the_entries_read_with_it():
    cache = AudioCache(100, 50)
    cache.put(key(lexicon="names"), entry(10))
    cache.put(key(lexicon=None), entry(10))
    assert cache.drop_lexicon("names") == 1 and len(cache) == 1


@pytest.mark.parametrize(("name", "other"), [
    ("model", "kokoro"), ("voice", "amy"), ("voice_version", 1),
    ("document", SpeechDocument((TextRun("Goodbye."),))), ("raw_input", "Hello."),
    ("speed", 1.25), ("seed", 2), ("response_format", "mp3"), ("sample_rate", 16000),
    ("mode", "stream"), ("timestamps", True), ("instructions", "softly"), ("lexicon", "v2"),
])
def test_each_keyed_field_changes_the_key(name, other):
    assert getattr(key(), name) != other
    assert key(**{name: other}) != key() and hash(key(**{name: other})) != hash(key())


def test_every_keyed_field_is_covered_above():
    assert {f.name for f in dataclasses.fields(CacheKey)} == {
        "model", "voice", "voice_version", "document", "raw_input", "speed", "seed",
        "response_format", "sample_rate", "mode", "timestamps", "instructions", "lexicon"}


def test_every_speech_request_field_is_keyed_or_said_not_to_be():
    """Fails when a field is added to the speech body or the engine request without deciding
    whether it changes the response's bytes (KEYED_FIELDS) or not (UNKEYED_FIELDS)."""
    fields = set(SpeechBody.model_fields) | {f.name for f in dataclasses.fields(SpeechRequest)}
    assert fields == set(KEYED_FIELDS) | set(UNKEYED_FIELDS)
    assert not set(KEYED_FIELDS) & set(UNKEYED_FIELDS)
    keyed = {f.name for f in dataclasses.fields(CacheKey)}
    assert set(KEYED_FIELDS.values()) <= keyed
