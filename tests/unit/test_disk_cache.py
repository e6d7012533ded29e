"""The audio cache's disk tier (`voxflow.server.disk_cache`): files bounded in bytes, least
recently used out first; the index rebuilt after a restart; damaged files deleted, never
served; voice and lexicon drops; a failed write stores nothing and warns once; an unusable
folder at start-up; and the two tiers together in `AudioCache` (write-through, promotion,
metrics)."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from voxflow.config import ConfigError, load_settings
from voxflow.server import cache_file, disk_cache
from voxflow.server.app import install_audio_cache
from voxflow.server.audio_cache import AudioCache, AudioCacheCollector, CachedResponse, CacheKey
from voxflow.server.cache_writer import BackgroundWriter
from voxflow.server.disk_cache import DiskCache, DiskCacheError
from voxflow.text.document import SpeechDocument, TextRun

GEN = "g1"


def key(**changes) -> CacheKey:
    base = CacheKey(model="piper", voice="joe", voice_version=0,
                    document=SpeechDocument((TextRun("Hello."),), source="Hello."),
                    raw_input=None, speed=1.0, seed=1, response_format="wav",
                    sample_rate=22050, mode="whole", timestamps=False, instructions=None,
                    lexicon=None)
    return dataclasses.replace(base, **changes)


def entry(n: int, fill: bytes = b"x") -> CachedResponse:
    return CachedResponse(fill * n, "audio/wav", {"X-Sample-Rate": "22050"}, n / 1000)


def file_of(k: CacheKey) -> str:
    return cache_file.file_name(cache_file.canonical_key(k))


def size_of(k: CacheKey, e: CachedResponse) -> int:
    """The bytes of `e`'s file under `k`: what the disk tier counts."""
    return len(cache_file.encode(cache_file.canonical_key(k), GEN, e))


def files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def age(directory: Path, k: CacheKey, seconds_ago: float) -> None:
    """Set `k`'s file's modification time (the order a restart rebuilds the index in)."""
    t = time.time() - seconds_ago
    os.utime(directory / file_of(k), (t, t))


# ---- the file format ---------------------------------------------------------------------
def test_the_canonical_key_leaves_out_the_voice_version_and_the_input_as_sent():
    a = key(voice_version=3, document=SpeechDocument((TextRun("Hello."),), source="Hello. "))
    assert cache_file.canonical_key(a) == cache_file.canonical_key(key())
    assert cache_file.canonical_key(key(speed=1)) == cache_file.canonical_key(key(speed=1.0))


@pytest.mark.parametrize(("name", "other"), [
    ("model", "kokoro"), ("voice", "amy"), ("document", SpeechDocument((TextRun("Bye."),))),
    ("raw_input", "Hello."), ("speed", 1.25), ("seed", 2), ("seed", None),
    ("response_format", "mp3"), ("sample_rate", 16000), ("mode", "stream"),
    ("timestamps", True), ("instructions", "softly"), ("lexicon", "v2"),
])
def test_each_keyed_field_but_the_voice_version_names_another_file(name, other):
    assert file_of(key(**{name: other})) != file_of(key())


def test_a_file_reads_back_whole_and_a_changed_byte_is_refused():
    data = cache_file.encode(cache_file.canonical_key(key()), GEN, entry(100))
    header, back = cache_file.decode(data)
    assert back == entry(100) and header.generation == GEN and header.body_bytes == 100
    flipped = data[:-1] + b"y"
    with pytest.raises(cache_file.CacheFileError, match="checksum"):
        cache_file.decode(flipped)
    with pytest.raises(cache_file.CacheFileError, match="99 bytes"):
        cache_file.decode(data[:-1])
    with pytest.raises(cache_file.CacheFileError, match="not a voxflow cache file"):
        cache_file.decode(b"RIFF" + data[4:])


# ---- one tier ----------------------------------------------------------------------------
def test_least_recently_used_files_go_first_when_the_bytes_overflow(tmp_path):
    a, b, c = key(seed=1), key(seed=2), key(seed=3)
    one = size_of(a, entry(400))  # the three files are the same size
    disk = DiskCache(tmp_path, max_bytes=2 * one + 10, max_entry_bytes=1000, generation=GEN)
    assert disk.put(a, entry(400)) and disk.put(b, entry(400))
    assert disk.get(a) == entry(400)  # a is now the most recent: b goes first
    assert disk.put(c, entry(400))
    assert files(tmp_path) == {file_of(a), file_of(c)}
    assert (disk.nbytes, len(disk), disk.evictions) == (2 * one, 2, 1)
    assert disk.nbytes == sum(p.stat().st_size for p in tmp_path.iterdir())
    assert disk.get(b) is None
    assert disk.put(a, entry(100))  # replaced: counted once
    assert disk.nbytes == one + size_of(a, entry(100)) and len(disk) == 2


def test_an_entry_over_the_bound_is_not_written(tmp_path):
    disk = DiskCache(tmp_path, max_bytes=10_000, max_entry_bytes=500, generation=GEN)
    assert not disk.put(key(), entry(501))
    assert (files(tmp_path), disk.nbytes) == (set(), 0)


def test_a_restart_rebuilds_the_index_from_the_files_in_their_use_order(tmp_path):
    a, b, c = key(seed=1), key(seed=2), key(seed=3)
    one = size_of(a, entry(300))
    disk = DiskCache(tmp_path, max_bytes=10 * one, max_entry_bytes=1000, generation=GEN)
    assert disk.put(a, entry(300, b"a")) and disk.put(b, entry(300, b"b"))
    age(tmp_path, a, 10)
    age(tmp_path, b, 20)  # b is the least recently used now
    again = DiskCache(tmp_path, max_bytes=2 * one, max_entry_bytes=1000, generation=GEN)
    assert (len(again), again.nbytes, again.dropped) == (2, 2 * one, 0)
    assert again.put(c, entry(300, b"c"))
    assert files(tmp_path) == {file_of(a), file_of(c)}
    assert again.get(a) == entry(300, b"a")  # the same body, media type, headers and length


def test_a_restart_with_a_smaller_bound_evicts_down_to_it(tmp_path):
    one = size_of(key(), entry(300))
    disk = DiskCache(tmp_path, max_bytes=10 * one, max_entry_bytes=1000, generation=GEN)
    for seed in range(4):
        assert disk.put(key(seed=seed), entry(300))
        age(tmp_path, key(seed=seed), 100 - seed)
    smaller = DiskCache(tmp_path, max_bytes=2 * one, max_entry_bytes=1000, generation=GEN)
    assert files(tmp_path) == {file_of(key(seed=2)), file_of(key(seed=3))}
    assert (len(smaller), smaller.nbytes, smaller.evictions) == (2, 2 * one, 2)


def test_damaged_files_are_deleted_at_start_up_and_other_files_are_left_alone(tmp_path, caplog):
    disk = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    for seed in range(4):
        assert disk.put(key(seed=seed), entry(200))
    truncated = tmp_path / file_of(key(seed=0))
    truncated.write_bytes(truncated.read_bytes()[:-1])  # a torn write
    (tmp_path / file_of(key(seed=1))).write_bytes(b"not a cache file")
    (tmp_path / file_of(key(seed=9))).write_bytes((tmp_path / file_of(key(seed=2))).read_bytes())
    (tmp_path / ".abc.123.tmp").write_bytes(b"half")  # a crashed write's temporary file
    (tmp_path / "notes.txt").write_text("the operator's")
    with caplog.at_level(logging.WARNING, logger="voxflow"):
        again = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    # seed 9's file holds seed 2's key: its name is not its key's
    assert files(tmp_path) == {file_of(key(seed=2)), file_of(key(seed=3)), "notes.txt"}
    assert (len(again), again.dropped) == (2, 3)
    assert "3 damaged file(s) deleted" in caplog.text
    assert again.get(key(seed=0)) is None and again.get(key(seed=9)) is None


def test_a_damaged_body_is_deleted_when_read_and_never_served(tmp_path):
    disk = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    assert disk.put(key(), entry(200))
    path = tmp_path / file_of(key())
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # same length: passes the start-up check, not the checksum
    path.write_bytes(bytes(data))
    again = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    assert len(again) == 1
    assert again.get(key()) is None
    assert (files(tmp_path), len(again), again.nbytes, again.dropped) == (set(), 0, 0, 1)


def test_a_file_holding_another_key_is_a_miss_not_its_audio(tmp_path):
    disk = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    assert disk.put(key(seed=1), entry(200, b"1")) and disk.put(key(seed=2), entry(200, b"2"))
    os.replace(tmp_path / file_of(key(seed=1)), tmp_path / file_of(key(seed=2)))
    assert disk.get(key(seed=2)) is None  # the header's key is seed 1's
    assert disk.dropped == 1 and file_of(key(seed=2)) not in files(tmp_path)


def test_files_of_another_version_or_model_configuration_are_deleted(tmp_path):
    assert DiskCache(tmp_path, 100_000, 1000, generation="old").put(key(), entry(200))
    disk = DiskCache(tmp_path, 100_000, 1000, generation="new")
    assert (len(disk), files(tmp_path), disk.dropped) == (0, set(), 0)
    settings = load_settings(None, {})
    other = load_settings(None, {"models.0.name": "p"})
    assert disk_cache.generation(settings.models) == disk_cache.generation(settings.models)
    assert disk_cache.generation(settings.models) != disk_cache.generation(other.models)


def test_a_dropped_voice_or_lexicon_deletes_its_files_only(tmp_path):
    disk = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    alice, joe, spelled = key(voice="alice"), key(), key(lexicon="names")
    for k in (alice, joe, spelled):
        assert disk.put(k, entry(100))
    assert disk.drop_voice("piper", "alice") == 1
    assert disk.drop_lexicon("names") == 1
    assert files(tmp_path) == {file_of(joe)}
    assert (len(disk), disk.nbytes) == (1, size_of(joe, entry(100)))
    assert not disk.put(alice, entry(100), current=lambda _k: False)  # deleted while written
    assert files(tmp_path) == {file_of(joe)}


def test_a_failed_write_stores_nothing_and_warns_once_until_one_succeeds(tmp_path, monkeypatch,
                                                                         caplog):
    disk = DiskCache(tmp_path, max_bytes=100_000, max_entry_bytes=1000, generation=GEN)
    real = disk_cache.write_atomic

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_cache, "write_atomic", full)
    with caplog.at_level(logging.WARNING, logger="voxflow"):
        assert not disk.put(key(seed=1), entry(100))
        assert not disk.put(key(seed=2), entry(100))
        monkeypatch.setattr(disk_cache, "write_atomic", real)
        assert disk.put(key(seed=3), entry(100))
        monkeypatch.setattr(disk_cache, "write_atomic", full)
        assert not disk.put(key(seed=4), entry(100))
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) == 2 and "No space left on device" in warnings[0].getMessage()
    assert (disk.write_failures, len(disk), files(tmp_path)) == (3, 1, {file_of(key(seed=3))})


def test_an_unusable_folder_at_start_up_is_an_error_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(DiskCacheError, match="a-file/cache cannot be used"):
        DiskCache(blocker / "cache", 100_000, 1000, GEN)
    settings = load_settings(None, {"cache.disk_directory": str(blocker / "cache")})
    with pytest.raises(ConfigError, match="^cache.disk_directory: .*a-file/cache cannot be used"):
        install_audio_cache(settings, engine=None)  # type: ignore[arg-type]


# ---- the two tiers -----------------------------------------------------------------------
def two_tiers(directory: Path, memory_bytes: int = 10_000) -> AudioCache:
    return AudioCache(memory_bytes, 1000, DiskCache(directory, 100_000, 1000, GEN))


def test_a_key_the_disk_index_does_not_hold_is_a_miss_without_a_worker_thread(tmp_path,
                                                                           monkeypatch):
    cache = two_tiers(tmp_path)
    hops = []

    async def to_thread(fn, *args):
        hops.append(fn)
        return fn(*args)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    assert asyncio.run(cache.fetch(key())) is None
    assert hops == [] and cache.misses == {"piper": 1}
    assert cache.put(key(), entry(300)) and cache.flush()
    cache.close()
    again = two_tiers(tmp_path)
    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    assert asyncio.run(again.fetch(key())) == entry(300)
    assert len(hops) == 1  # the file is read off the loop


def test_every_stored_entry_is_written_and_a_new_cache_answers_from_disk(tmp_path):
    cache = two_tiers(tmp_path)
    assert cache.put(key(), entry(300))
    assert cache.flush() and files(tmp_path) == {file_of(key())}
    cache.close()
    again = two_tiers(tmp_path)  # a restart
    assert len(again) == 0 and again.disk is not None and len(again.disk) == 1
    assert asyncio.run(again.fetch(key())) == entry(300)
    assert (again.hits, again.disk_hits, again.misses) == ({"piper": 1}, {"piper": 1}, {})
    assert (len(again), again.nbytes) == (1, 300)  # promoted to memory
    assert again.get(key()) == entry(300)  # from memory now
    assert (again.hits, again.disk_hits) == ({"piper": 2}, {"piper": 1})
    assert again.get(key(seed=5)) is None and again.misses == {"piper": 1}
    again.close()


def test_memory_evictions_stay_on_disk_and_memory_of_zero_still_writes(tmp_path):
    cache = two_tiers(tmp_path, memory_bytes=500)
    assert cache.put(key(seed=1), entry(300)) and cache.put(key(seed=2), entry(300))
    assert cache.flush() and cache.evictions == 1 and len(cache) == 1
    assert cache.get(key(seed=1)) == entry(300) and cache.disk_hits == {"piper": 1}
    cache.close()
    nothing_in_memory = two_tiers(tmp_path / "zero", memory_bytes=0)
    assert nothing_in_memory.put(key(), entry(300)) and nothing_in_memory.flush()
    assert len(nothing_in_memory) == 0 and files(tmp_path / "zero") == {file_of(key())}
    nothing_in_memory.close()


def test_dropping_a_voice_or_lexicon_empties_both_tiers(tmp_path):
    cache = two_tiers(tmp_path)
    alice = key(model="cosyvoice3", voice="alice")
    for k in (alice, key(), key(lexicon="names")):
        assert cache.put(k, entry(100))
    assert cache.flush() and len(files(tmp_path)) == 3
    assert cache.drop_voice("cosyvoice3", "alice") == 1
    assert cache.drop_lexicon("names") == 1
    assert files(tmp_path) == {file_of(key())} and len(cache) == 1
    assert not cache.put(alice, entry(100))  # built before the delete
    assert cache.flush() and files(tmp_path) == {file_of(key())}
    cache.close()


def test_a_write_queued_before_a_voice_delete_is_undone(tmp_path):
    disk = DiskCache(tmp_path, 100_000, 1000, GEN)
    cache = AudioCache(10_000, 1000, disk)
    alice = key(model="cosyvoice3", voice="alice")
    # the delete lands between the write of the file and its entry in the index
    real_put = disk.put

    def put_then_delete(k, e, current):
        cache.drop_voice("cosyvoice3", "alice")
        return real_put(k, e, current)

    disk.put = put_then_delete  # type: ignore[method-assign]
    assert cache.put(alice, entry(100)) and cache.flush()
    assert files(tmp_path) == set() and len(disk) == 0
    cache.close()


def test_the_metrics_count_each_tier(tmp_path):
    cache = two_tiers(tmp_path, memory_bytes=400)
    registry = CollectorRegistry()
    registry.register(AudioCacheCollector(cache))
    assert cache.put(key(seed=1), entry(300)) and cache.put(key(seed=2), entry(300))
    cache.flush()
    cache.get(key(seed=1))  # from disk (memory evicted it)
    cache.get(key(seed=1))  # from memory
    cache.get(key(seed=3))

    def value(name, labels=None):
        return registry.get_sample_value(name, labels or {})

    on_disk = size_of(key(seed=1), entry(300)) + size_of(key(seed=2), entry(300))
    assert value("voxflow_audio_cache_hits_total", {"model": "piper"}) == 2
    assert value("voxflow_audio_cache_disk_hits_total", {"model": "piper"}) == 1
    assert value("voxflow_audio_cache_misses_total", {"model": "piper"}) == 1
    assert value("voxflow_audio_cache_bytes") == 300
    assert value("voxflow_audio_cache_disk_bytes") == on_disk
    assert value("voxflow_audio_cache_disk_entries") == 2
    assert value("voxflow_audio_cache_disk_max_bytes") == 100_000
    assert value("voxflow_audio_cache_disk_write_failures_total") == 0
    assert value("voxflow_audio_cache_disk_dropped_total") == 0
    cache.close()
    memory_only = CollectorRegistry()
    memory_only.register(AudioCacheCollector(AudioCache(100, 50)))
    assert memory_only.get_sample_value("voxflow_audio_cache_disk_bytes") is None


def test_the_writer_skips_entries_past_its_pending_bound_and_close_writes_the_rest():
    written: list[int | None] = []
    skipped: list[int] = []
    writer = BackgroundWriter(lambda k, e: (time.sleep(0.05), written.append(k.seed)),
                              max_pending_bytes=250, on_skipped=lambda: skipped.append(1))
    assert writer.submit(key(seed=1), entry(100)) and writer.submit(key(seed=2), entry(100))
    assert not writer.submit(key(seed=3), entry(100))  # 300 > 250 bytes waiting
    assert writer.close(timeout_s=5)
    assert (written, skipped) == ([1, 2], [1])
    assert not writer.submit(key(seed=4), entry(1)) and skipped == [1, 1]  # closed
