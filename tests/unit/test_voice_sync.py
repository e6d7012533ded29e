"""Saved voices shared between replicas (voxflow/server/voice_sync.py, issue 45) with an
in-memory store standing in for Ray's KV store: records whole or refused, creation and deletion
reaching every replica, the compare-and-set of two replicas at once, a replica started later,
voices on disk published at start-up, a held voice replaced only once released, a store out of
reach. The first tests use a fake family; the last ones two tiny CosyVoice3 families, each with
its own folder, as two replicas."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from voxflow.errors import ConflictError, VoiceStoreError
from voxflow.server.voice_sync import (
    CHANGES_KEY,
    RecordError,
    SharedVoices,
    VoiceSync,
    decode_record,
    encode_record,
    gen_key,
    parse_key,
    refresh_if_unknown,
)


class FakeStore:
    """A dict with Ray's KV semantics; `fail` makes every call raise, `calls` counts them."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.fail = False
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.fail:
            raise ConnectionError("GCS unreachable")

    def get(self, key: str) -> bytes | None:
        self._call()
        return self.data.get(key)

    def put(self, key: str, value: bytes, *, overwrite: bool) -> bool:
        self._call()
        if key in self.data and not overwrite:
            return False
        self.data[key] = value
        return True

    def keys(self, prefix: str) -> list[str]:
        self._call()
        return [k for k in self.data if k.startswith(prefix)]


class FakeFamily:
    """A replica's saved voices: name -> bytes served, files on a dict 'disk'."""

    def __init__(self, disk: dict[str, bytes] | None = None) -> None:
        self.disk = dict(disk or {})
        self.served: dict[str, bytes] = dict(self.disk)
        self.held: set[str] = set()
        self.retired: set[str] = set()
        self.voice_publisher: Any = None

    # what create_voice does: write, publish (refusal removes the file), serve
    def create(self, name: str, data: bytes) -> None:
        self.disk[name] = data
        if self.voice_publisher is not None:
            try:
                self.voice_publisher(name, data)
            except BaseException:
                del self.disk[name]
                raise
        self.served[name] = data

    def shared_voice_files(self) -> dict[str, bytes]:
        return {n: self.disk[n] for n in self.served if n in self.disk}

    def shared_name(self, voice_id: str) -> str | None:
        return voice_id if voice_id in self.served else None

    def shared_voice_id(self, name: str) -> str:
        return name

    def check_deletable(self, voice_id: str) -> None:
        pass

    def prepare_shared_voice(self, name: str, data: bytes) -> bytes:
        if data.startswith(b"BAD"):
            raise ValueError("not a voice of this model")
        self.disk[name] = data
        return data

    def forget_shared_file(self, name: str) -> None:
        self.disk.pop(name, None)

    def serve_shared_voice(self, name: str, voice: bytes) -> bool:
        if name in self.served:
            del self.served[name]
            if name in self.held:
                self.retired.add(name)
        if name in self.retired:
            return False
        self.served[name] = voice
        return True

    def drop_shared_voice(self, name: str) -> bool:
        return self.served.pop(name, None) is not None


def replica(store: FakeStore, family: FakeFamily, changed: list | None = None) -> VoiceSync:
    sync = VoiceSync(store, {"cv": family}, run_on_loop=lambda call: call(),
                     on_voice_changed=(lambda m, v: changed.append((m, v)))
                     if changed is not None else None)
    sync.attach()
    sync.sync_once()  # start-up
    return sync


def test_a_record_is_whole_or_refused():
    data = b"voice bytes" * 100
    record = decode_record(encode_record(data))
    assert record is not None and record.data == data
    assert record.sha256 == hashlib.sha256(data).hexdigest()
    assert decode_record(encode_record(None)).deleted
    value = encode_record(data)
    with pytest.raises(RecordError, match="bytes where the header says"):
        decode_record(value[:-1])  # cut short
    with pytest.raises(RecordError, match="sha256"):
        decode_record(value[:-1] + b"X")  # same size, other bytes
    with pytest.raises(RecordError, match="not a voice record"):
        decode_record(b"garbage")
    assert parse_key(gen_key("a/b", "alice", 7)) == ("a/b", "alice", 7)
    assert parse_key(CHANGES_KEY) is None


def test_created_voice_reaches_the_other_replica_and_a_delete_removes_it():
    store = FakeStore()
    a_family, b_family = FakeFamily(), FakeFamily()
    changed: list = []
    a, b = replica(store, a_family), replica(store, b_family, changed)
    a_family.create("alice", b"alice-1")
    assert "alice" not in b_family.served
    assert b.sync_once() == 1
    assert b_family.served["alice"] == b"alice-1" and b_family.disk["alice"] == b"alice-1"
    assert a.sync_once() == 0  # its own change: nothing to apply
    # the poll reads one key while nothing changes
    before = store.calls
    assert b.sync_once() == 0 and store.calls == before + 1
    a.publish_delete("cv", "alice")
    a_family.served.pop("alice")
    assert b.sync_once() == 1
    assert "alice" not in b_family.served and "alice" not in b_family.disk
    assert changed == [("cv", "alice"), ("cv", "alice")]
    # created again after the delete: a new generation, served again
    a_family.create("alice", b"alice-2")
    b.sync_once()
    assert b_family.served["alice"] == b"alice-2"
    # superseded generations keep their key but not their bytes
    assert len(store.data[gen_key("cv", "alice", 1)]) < 50


def test_a_name_taken_on_another_replica_is_a_409_and_leaves_nothing_behind():
    store = FakeStore()
    a_family, b_family = FakeFamily(), FakeFamily()
    replica(store, a_family), replica(store, b_family)
    a_family.create("bob", b"bob-a")
    with pytest.raises(ConflictError) as info:
        b_family.create("bob", b"bob-b")  # before b's pass saw a's
    assert info.value.status == 409 and info.value.code == "voice_exists"
    assert "bob" not in b_family.disk and "bob" not in b_family.served


def test_two_replicas_claiming_one_generation_at_once_one_wins():
    store = FakeStore()
    a_family, b_family = FakeFamily(), FakeFamily()
    a, b = replica(store, a_family), replica(store, b_family)
    a_family.create("eve", b"eve")
    b.sync_once()
    # both delete at once: both read generation 1, b writes 2 first
    real_keys = store.keys
    store.keys = lambda prefix: [k for k in real_keys(prefix) if not k.endswith("2")]
    b.publish_delete("cv", "eve")
    with pytest.raises(ConflictError) as info:
        a.publish_delete("cv", "eve")
    assert info.value.code == "voice_changed"


def test_a_cut_or_foreign_record_is_never_served():
    store = FakeStore()
    a_family, b_family = FakeFamily(), FakeFamily()
    a, b = replica(store, a_family), replica(store, b_family)
    a_family.create("cut", b"whole bytes")
    key = gen_key("cv", "cut", 1)
    store.data[key] = store.data[key][:-3]  # as if written half
    a_family.create("foreign", b"BAD voice")  # bytes of another model
    b.sync_once()
    assert "cut" not in b_family.served and "cut" not in b_family.disk
    assert "foreign" not in b_family.served
    a.publish_delete("cv", "cut")  # the next change of the name replaces it
    a_family.served.pop("cut")
    a_family.create("cut", b"whole again")
    b.sync_once()
    assert b_family.served["cut"] == b"whole again"


def test_a_replica_started_later_loads_every_voice_and_no_deleted_one():
    store = FakeStore()
    a_family = FakeFamily()
    a = replica(store, a_family)
    a_family.create("one", b"1")
    a_family.create("two", b"2")
    a.publish_delete("cv", "two")
    late = FakeFamily(disk={"two": b"2"})  # its disk still has the deleted voice
    replica(store, late)
    assert late.served == {"one": b"1"} and "two" not in late.disk


def test_voices_on_disk_the_store_never_saw_are_published_at_start_up():
    store = FakeStore()
    first = FakeFamily(disk={"kept": b"k"})
    replica(store, first)
    second = FakeFamily(disk={"kept": b"other bytes"})  # the store's copy wins
    replica(store, second)
    assert second.served == {"kept": b"k"} and second.disk == {"kept": b"k"}


def test_a_held_voice_is_replaced_only_once_released():
    store = FakeStore()
    a_family, b_family = FakeFamily(), FakeFamily()
    a, b = replica(store, a_family), replica(store, b_family)
    a_family.create("held", b"v1")
    b.sync_once()
    b_family.held.add("held")  # a request on b speaks with it
    a.publish_delete("cv", "held")
    a_family.served.pop("held")
    a_family.create("held", b"v2")  # deleted and created again between two passes
    assert b.sync_once() == 0
    assert "held" not in b_family.served and "held" in b_family.retired
    b_family.held.discard("held")
    b_family.retired.discard("held")  # the request ended
    assert b.sync_once() == 1 and b_family.served["held"] == b"v2"


def test_a_store_out_of_reach_refuses_changes_and_keeps_serving():
    store = FakeStore()
    a_family, b_family = FakeFamily(), FakeFamily()
    a, b = replica(store, a_family), replica(store, b_family)
    a_family.create("kept", b"k")
    b.sync_once()
    store.fail = True
    with pytest.raises(VoiceStoreError) as info:
        a_family.create("new", b"n")
    assert info.value.status == 503 and info.value.code == "voice_store_unavailable"
    assert "new" not in a_family.disk
    with pytest.raises(VoiceStoreError):
        a.publish_delete("cv", "kept")
    with pytest.raises(ConnectionError):
        b.sync_once()
    assert b_family.served == {"kept": b"k"}
    asyncio.run(b.refresh())  # logged, not raised
    store.fail = False
    a_family.create("new", b"n")
    b.sync_once()
    assert set(b_family.served) == {"kept", "new"}


def test_refresh_runs_only_for_a_voice_the_replica_does_not_know():
    store = FakeStore()
    family = FakeFamily()
    sync = replica(store, family)

    class Served:
        def __init__(self, fam):
            self.family = fam

    fam_view = type("F", (), {"voices": {"known": object()}})()
    engine = type("E", (), {})()
    engine.models = {"cv": Served(fam_view)}
    engine.aliases = type("A", (), {"models": {}, "voice_table": lambda self, m: {"al": "x"}})()
    state = type("S", (), {"voice_sync": sync, "engine": engine})()
    for voice, runs in (("known", False), ("al", False), ("unknown", True)):
        before = store.calls
        asyncio.run(refresh_if_unknown(state, "cv", voice))
        assert (store.calls > before) == runs, voice
    state.voice_sync = None
    asyncio.run(refresh_if_unknown(state, "cv", "unknown"))  # the plain server: nothing


# ---- two tiny CosyVoice3 families as two replicas ---------------------------------------------

def test_two_cosyvoice3_replicas_share_a_voice(tmp_path: Path):
    pytest.importorskip("torch")
    pytest.importorskip("tiktoken")
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from cosyvoice3_fixtures import FIXTURES

    from voxflow.models.cloning import VoiceUpload
    from voxflow.models.cosyvoice3.model import CosyVoice3Family
    from voxflow.models.cosyvoice3.settings import CosyVoice3Settings
    from voxflow.models.cosyvoice3.voice_admin import tensor_bytes
    from voxflow.models.cosyvoice3.voices import tiny_voice

    def family(folder: str) -> CosyVoice3Family:
        return CosyVoice3Family("cv", CosyVoice3Settings(saved_voices_dir=tmp_path / folder))

    voice = tiny_voice(FIXTURES)
    features = tensor_bytes(voice.tensors(), voice.metadata())
    store = FakeStore()
    a_family, b_family = family("a"), family("b")
    assert isinstance(a_family, SharedVoices)
    a = VoiceSync(store, {"cv": a_family}, run_on_loop=lambda call: call())
    b = VoiceSync(store, {"cv": b_family}, run_on_loop=lambda call: call())
    for sync in (a, b):
        sync.attach()
        sync.sync_once()
    vid = a_family.create_voice(VoiceUpload("alice", features=features, language="en"))
    assert vid == "random-alice" and vid not in b_family.voices
    b.sync_once()
    assert vid in b_family.voices and b_family.saved_voice_ids() == [vid]
    assert b_family.voices[vid].language == "en"
    assert (tmp_path / "b" / "alice.safetensors").read_bytes() == \
        (tmp_path / "a" / "alice.safetensors").read_bytes()
    assert b_family.flow_prompt(vid).tokens == 7
    # a request on b holds it while a deletes it: b retires it, the request keeps it
    release = b_family.hold_voice(vid)
    a_family.check_deletable(vid)
    a.publish_delete("cv", "alice")
    a_family.delete_voice(vid)
    b.sync_once()
    assert vid not in b_family.voices and vid in b_family.voice_models
    assert not (tmp_path / "b" / "alice.safetensors").exists()
    release()
    assert vid not in b_family.voice_models
    # a replica started later, its folder holding a voice the store never saw: published
    c_family = family("c")
    c_family.create_voice(VoiceUpload("carol", features=features))
    c = VoiceSync(store, {"cv": family("c")}, run_on_loop=lambda call: call())
    c.sync_once()
    b.sync_once()
    assert "random-carol" in b_family.voices and "random-alice" not in b_family.voices
