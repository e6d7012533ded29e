"""Saved voices shared by every replica of a deployment (issue 45; docs/scale-out.md).

Under Ray Serve each replica has its own engine, memory and disk. A `VoiceSync` keeps the saved
voices (``POST /v1/audio/voices``) of every replica the same through a shared key-value store
(`VoiceStore`; on Ray, Ray's internal KV store held by the cluster's GCS,
`voxflow.ray.voice_store`). The plain server has none and does not use this module.

The store holds, per model and voice name, numbered **generations**: the key
``MODEL/NAME/GEN`` (GEN zero-padded) holds a record, a JSON header line then the voice file's
bytes (`encode_record`): a live voice (its sha256 and size in the header) or a tombstone (the
voice deleted). The highest generation of a name is its state. A change claims the next
generation with a put that never overwrites (`VoiceStore.put` with ``overwrite=False``), so
of two replicas changing one name at once exactly one wins and the other answers 409: a
compare-and-set the store does not offer otherwise. Older generations are then replaced by a
short stub (their key is kept, so a replica with a stale view can never claim it again);
tombstones stay, so a replica that was away deletes its copy when it comes back. After each
change the writer bumps the key ``changes``.

Each replica runs a pass (`VoiceSync.sync_once`) every ``interval_s`` (``ray.
voice_sync_interval_s``): one read of ``changes``; when it moved (and every `FULL_PASS_EVERY`
passes regardless), a listing of the keys and a read of every generation newer than the one
the replica applied. A record becomes a served voice only once its bytes are whole: the
header's size and sha256 match them, the bytes parse as a voice file of this model
(`SharedVoices.prepare_shared_voice`), and the file is written to the replica's
``saved_voices_dir`` atomically. So a voice created on one replica is served by every other
within ``interval_s`` plus one pass (a listing, a read, a file write), and a delete removes it
as fast. A replica also runs a pass before it answers a listing of voices, a delete of a voice
it does not know, or a speech request naming a voice it does not know (`refresh`), so a client
that created a voice and then uses it, whichever replica answers, does not wait for the poll.

Start-up: the first pass runs before the replica takes requests. Saved voices the replica read
from its disk that the store has never seen are published (a cluster restarted with voices
on disk: the store lives as long as the cluster's GCS); the store's state wins over the disk
for every name it knows (a tombstone deletes the local file).

Threads: passes and publishes run in worker threads, one at a time (`_lock`); what changes the
served voices (`SharedVoices.serve_shared_voice`, `drop_shared_voice`) runs on the event loop
(`run_on_loop`), where requests take hold of their voice, as a local delete does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import quote, unquote

from voxflow.errors import ConflictError, VoiceStoreError, echo

if TYPE_CHECKING:
    from voxflow.engine.engine import Engine

log = logging.getLogger(__name__)

T = TypeVar("T")

CHANGES_KEY = "changes"
"""The key every writer bumps after a change: a pass reads only it while it stays the same."""

FULL_PASS_EVERY = 30
"""Every this many passes the keys are listed even if ``changes`` did not move (a writer that
died between its record and its bump)."""

LOOP_TIMEOUT_S = 30.0
"""How long a pass waits for the event loop to apply its changes, in seconds."""

GEN_DIGITS = 12
RECORD_VERSION = 1


class VoiceStore(Protocol):
    """A key-value store every replica reaches (keys are ``str``, values ``bytes``).

    Every method raises (any exception) when the store cannot be reached; `VoiceSync` turns
    that into `VoiceStoreError` (503) for a change, or a logged warning for a pass.
    """

    def get(self, key: str) -> bytes | None:
        """The value of `key`, or None when it has none."""
        ...

    def put(self, key: str, value: bytes, *, overwrite: bool) -> bool:
        """Store `value` under `key`; returns False (nothing written) when `key` already has a
        value and `overwrite` is False. One put is atomic: a reader gets all of `value` or the
        value before it."""
        ...

    def keys(self, prefix: str) -> list[str]:
        """Every key starting with `prefix`."""
        ...


@runtime_checkable
class SharedVoices(Protocol):
    """What a family whose voices are saved through the API gives `VoiceSync`
    (`voxflow.models.cosyvoice3.voice_admin.SavedVoices`). Names are the voice files' stems
    (the same on every replica); ids are what the model serves them as."""

    voice_publisher: Callable[[str, bytes], None] | None
    """Called (in the creating thread) with a new voice's name and file bytes before it is
    served here; raises to refuse the creation (set by `VoiceSync.attach`)."""

    def shared_voice_files(self) -> dict[str, bytes]:
        """The saved voices served now, name -> file bytes (read from disk)."""
        ...

    def shared_name(self, voice_id: str) -> str | None:
        """The saved voice's name of a served id, or None when it is not a saved voice."""
        ...

    def shared_voice_id(self, name: str) -> str:
        """The id the saved voice `name` is served as."""
        ...

    def check_deletable(self, voice_id: str) -> None:
        """Raise what deleting `voice_id` here would raise (404, 403), changing nothing."""
        ...

    def prepare_shared_voice(self, name: str, data: bytes) -> Any:
        """Parse and check a voice file's bytes and write them to the saved-voices folder
        atomically (worker thread). Returns what `serve_shared_voice` takes.

        Raises:
            VoiceError: not a voice file of this model.
            OSError: the file cannot be written.
        """
        ...

    def forget_shared_file(self, name: str) -> None:
        """Remove the saved voice file of `name` (missing is fine; worker thread).
        Raises OSError."""
        ...

    def serve_shared_voice(self, name: str, voice: Any) -> bool:
        """Serve `voice` (from `prepare_shared_voice`) as saved voice `name`, replacing one of
        that name (event loop). Returns False, changing nothing, while a deleted voice of that
        name is still held by requests (a request never switches voices midway)."""
        ...

    def drop_shared_voice(self, name: str) -> bool:
        """Stop serving saved voice `name`; requests holding it finish with it (event loop).
        Returns whether it was served here."""
        ...


@dataclass(frozen=True)
class Record:
    """One generation of a voice: a live voice's bytes, or a tombstone (`data` None)."""

    data: bytes | None
    sha256: str | None

    @property
    def deleted(self) -> bool:
        return self.data is None


class RecordError(ValueError):
    """A stored record that is not whole: bad header, size or sha256."""


SUPERSEDED = b'{"v": 1, "superseded": true}\n'


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_record(data: bytes | None) -> bytes:
    """A record's value: a live voice's file bytes (`data`) or a tombstone (None)."""
    if data is None:
        header: dict[str, Any] = {"v": RECORD_VERSION, "deleted": True}
        return json.dumps(header).encode() + b"\n"
    header = {"v": RECORD_VERSION, "deleted": False, "size": len(data),
              "sha256": sha256_of(data)}
    return json.dumps(header).encode() + b"\n" + data


def decode_record(value: bytes) -> Record | None:
    """The record of a stored value; None for a superseded generation's stub.

    Raises:
        RecordError: no header, an unknown version, or bytes whose size or sha256 differ
            from the header's (a record cut short or altered is never served).
    """
    head, sep, data = value.partition(b"\n")
    try:
        header = json.loads(head) if sep else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("v") != RECORD_VERSION:
        raise RecordError("not a voice record (no header of version 1)")
    if header.get("superseded"):
        return None
    if header.get("deleted"):
        return Record(None, None)
    if header.get("size") != len(data):
        raise RecordError(f"{len(data)} bytes where the header says {header.get('size')}")
    digest = sha256_of(data)
    if header.get("sha256") != digest:
        raise RecordError(f"sha256 {digest} where the header says {header.get('sha256')}")
    return Record(data, digest)


def name_prefix(model: str, name: str) -> str:
    """The keys' prefix of one voice's generations (the model name %-quoted: it may hold a
    ``/``; a voice name never does, `voxflow.atomic_files.NAME_PATTERN`)."""
    return f"{quote(model, safe='')}/{name}/"


def gen_key(model: str, name: str, gen: int) -> str:
    return f"{name_prefix(model, name)}{gen:0{GEN_DIGITS}d}"


def parse_key(key: str) -> tuple[str, str, int] | None:
    """``MODEL/NAME/GEN`` -> (model, name, gen); None for another key."""
    model, _, rest = key.partition("/")
    name, _, gen = rest.rpartition("/")
    if not model or not name or len(gen) != GEN_DIGITS or not gen.isdigit():
        return None
    return unquote(model), name, int(gen)


@dataclass
class _Change:
    model: str
    name: str
    gen: int
    sha256: str | None  # None: a tombstone
    voice: Any = None


class VoiceSync:
    """Keeps the saved voices of `families` (model name -> family) the same as the store's
    (see the module docstring).

    Args:
        store: the shared store.
        families: the served models whose families save voices.
        run_on_loop: runs a callable on the event loop and returns its result (blocking the
            calling worker thread); `loop_runner` makes one. Tests pass a direct call.
        interval_s: seconds between passes of the poll thread (`start`).
        on_voice_changed: called on the event loop with (model, voice id) of each voice
            another replica deleted or replaced (the app drops its cached audio).
        timeout_s: how long `refresh` waits for a pass, in seconds.
    """

    def __init__(self, store: VoiceStore, families: dict[str, SharedVoices], *,
                 run_on_loop: Callable[[Callable[[], Any]], Any], interval_s: float = 1.0,
                 on_voice_changed: Callable[[str, str], None] | None = None,
                 timeout_s: float = 10.0) -> None:
        self.store = store
        self.families = families
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._run_on_loop = run_on_loop
        self._on_voice_changed = on_voice_changed
        self._lock = threading.Lock()
        # (model, name) -> (generation applied here, its sha256 or None for a tombstone)
        self._known: dict[tuple[str, str], tuple[int, str | None]] = {}
        self._token: bytes | None = None
        self._passes = 0
        self._last_started = float("-inf")
        self._seeded = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- life --------------------------------------------------------------------------------
    def attach(self) -> None:
        """Make every family publish its new voices through this sync."""
        for model, family in self.families.items():
            family.voice_publisher = _publisher(self, model)

    def start(self) -> None:
        """Start the poll thread (a pass every `interval_s`)."""
        self._thread = threading.Thread(target=self._poll, name="voxflow-voice-sync",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the poll thread (waits at most `timeout_s`) and detach the families."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s)
        for family in self.families.values():
            family.voice_publisher = None

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync_once()
            except Exception as exc:  # the store away a while: the next pass tries again
                log.warning("saved voices: sync pass failed: %s", exc)

    async def refresh(self) -> None:
        """Run a pass that starts after this call (or wait for one that did), in a worker
        thread, at most `timeout_s`; a store out of reach is logged, not raised: the caller
        answers with the voices it has."""
        asked = time.monotonic()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.sync_once, asked), self.timeout_s)
        except Exception as exc:
            log.warning("saved voices: refresh failed: %s", exc or type(exc).__name__)

    # ---- passes ------------------------------------------------------------------------------
    def sync_once(self, asked: float | None = None) -> int:
        """One pass (module docstring): apply every change of the store not applied here yet.
        With `asked` (a `time.monotonic` reading), nothing is done if a pass started after it.
        Returns how many changes were applied.

        Raises:
            Exception: what the store raises (nothing of that pass is half applied: each
                change is applied whole or left for the next pass).
        """
        with self._lock:
            if asked is not None and self._last_started >= asked:
                return 0
            self._last_started = time.monotonic()
            self._passes += 1
            token = self.store.get(CHANGES_KEY)
            full = not self._seeded or self._passes % FULL_PASS_EVERY == 0
            if not full and token is not None and token == self._token:
                return 0
            changes, complete = self._changes(self._latest())
            applied = self._apply(changes)
            self._token = token if complete and applied == len(changes) else None
            return applied

    def _latest(self) -> dict[tuple[str, str], int]:
        latest: dict[tuple[str, str], int] = {}
        for key in self.store.keys(""):
            parsed = parse_key(key)
            if parsed is None or parsed[0] not in self.families:
                continue
            model, name, gen = parsed
            latest[(model, name)] = max(gen, latest.get((model, name), 0))
        if not self._seeded:
            self._seed(latest)
        return latest

    def _seed(self, latest: dict[tuple[str, str], int]) -> None:
        """First pass: the saved voices read from disk; those the store never saw are
        published, the others wait for the store's state (applied by the pass)."""
        for model, family in self.families.items():
            for name, data in family.shared_voice_files().items():
                self._known[(model, name)] = (0, sha256_of(data))
                if (model, name) in latest:
                    continue
                try:
                    latest[(model, name)] = self._claim(model, name, 0, data)
                    log.info("saved voices: %s/%s from this replica's disk published",
                             model, name)
                except ConflictError:  # another replica published it meanwhile: next pass
                    self._token = None
        self._seeded = True

    def _changes(self, latest: dict[tuple[str, str], int]) -> tuple[list[_Change], bool]:
        """The changes to apply, fetched and checked, their files written (worker thread);
        and whether every newer generation could be read."""
        changes: list[_Change] = []
        complete = True
        for (model, name), gen in sorted(latest.items()):
            known_gen, known_sha = self._known.get((model, name), (0, None))
            if known_gen == gen:
                continue
            family = self.families[model]
            value = self.store.get(gen_key(model, name, gen))
            try:
                record = decode_record(value) if value is not None else None
            except RecordError as exc:  # never served; the next change of the name replaces it
                log.error("saved voices: %s/%s generation %d is not whole, not served: %s",
                          model, name, gen, exc)
                self._known[(model, name)] = (gen, known_sha)
                continue
            if record is None:  # superseded since the listing: the next pass reads the newer
                complete = False
                continue
            change = _Change(model, name, gen, record.sha256)
            try:
                if record.data is None:
                    family.forget_shared_file(name)
                elif record.sha256 != known_sha:
                    change.voice = family.prepare_shared_voice(name, record.data)
            except ValueError as exc:  # VoiceError: a file of another model, ...
                log.error("saved voices: %s/%s generation %d is not a voice of this model, not "
                          "served: %s", model, name, gen, exc)
                self._known[(model, name)] = (gen, known_sha)
                continue
            except OSError as exc:  # the disk: tried again next pass
                log.warning("saved voices: %s/%s: cannot write its file here: %s", model,
                            name, exc)
                complete = False
                continue
            changes.append(change)
        return changes, complete

    def _apply(self, changes: list[_Change]) -> int:
        if not changes:
            return 0
        done = self._run_on_loop(lambda: [self._apply_one(c) for c in changes])
        for change, ok in zip(changes, done, strict=True):
            if ok:
                self._known[(change.model, change.name)] = (change.gen, change.sha256)
        return sum(done)

    def _apply_one(self, change: _Change) -> bool:
        """Event loop: serve or drop one voice; False when it must wait (held)."""
        family = self.families[change.model]
        voice_id = family.shared_voice_id(change.name)
        if change.sha256 is None:
            if not family.drop_shared_voice(change.name):
                return True  # never served here (a replica starting, its disk without it)
            log.info("saved voices: %s/%s deleted on another replica", change.model, voice_id)
        elif change.voice is not None:
            if not family.serve_shared_voice(change.name, change.voice):
                log.info("saved voices: %s/%s waits for the requests still holding the deleted "
                         "voice of that name", change.model, voice_id)
                return False
            log.info("saved voices: %s/%s from another replica served", change.model, voice_id)
        else:
            return True  # the same bytes as here: only the generation moves
        if self._on_voice_changed is not None:
            self._on_voice_changed(change.model, voice_id)
        return True

    # ---- changes made here -------------------------------------------------------------------
    def publish_create(self, model: str, name: str, data: bytes) -> None:
        """Publish a voice created here (the creating thread, before it is served here).

        Raises:
            ConflictError: the store has a live voice of that name (made on another replica),
                or another replica changed it at the same moment (409).
            VoiceStoreError: the store cannot be reached (503).
        """
        with self._lock:
            latest = self._store_call(lambda: self._latest_gen(model, name))
            if latest and self._live(model, name, latest):
                raise ConflictError(
                    f"Model '{model}' already has a voice {echo(name)} (saved on another "
                    "replica); delete it first or choose another name.", param="name",
                    code="voice_exists")
            self._store_call(lambda: self._claim(model, name, latest, data))

    def publish_delete(self, model: str, name: str) -> None:
        """Publish the deletion of saved voice `name` (a tombstone), before it is deleted here.

        Raises:
            ConflictError: another replica changed the voice at the same moment (409).
            VoiceStoreError: the store cannot be reached (503).
        """
        with self._lock:
            latest = self._store_call(lambda: self._latest_gen(model, name))
            self._store_call(lambda: self._claim(model, name, latest, None))

    def _latest_gen(self, model: str, name: str) -> int:
        gens = [p[2] for p in map(parse_key, self.store.keys(name_prefix(model, name)))
                if p is not None and p[:2] == (model, name)]
        return max(gens, default=0)

    def _live(self, model: str, name: str, gen: int) -> bool:
        value = self.store.get(gen_key(model, name, gen))
        try:
            record = decode_record(value) if value is not None else None
        except RecordError:
            return False
        return record is None or not record.deleted  # superseded: a newer one came meanwhile

    def _claim(self, model: str, name: str, latest: int, data: bytes | None) -> int:
        """Write generation ``latest + 1``; returns it. Raises ConflictError when another
        replica wrote it first."""
        gen = latest + 1
        if not self.store.put(gen_key(model, name, gen), encode_record(data), overwrite=False):
            raise ConflictError(
                f"Voice {echo(name)} of model '{model}' was changed on another replica at the "
                "same moment; list the voices and try again.", param="name",
                code="voice_changed")
        self._known[(model, name)] = (gen, sha256_of(data) if data is not None else None)
        # the change is made; what follows only saves room and time, and may fail
        try:
            if latest:  # older ones became stubs when `latest` was claimed
                self.store.put(gen_key(model, name, latest), SUPERSEDED, overwrite=True)
            self.store.put(CHANGES_KEY, f"{time.time():.6f}/{model}/{name}/{gen}".encode(),
                           overwrite=True)
        except Exception as exc:  # the others see it at their next full pass
            log.warning("saved voices: %s/%s generation %d written, but not announced: %s",
                        model, name, gen, exc)
        return gen

    @staticmethod
    def _store_call(call: Callable[[], T]) -> T:
        try:
            return call()
        except ConflictError:
            raise
        except Exception as exc:
            raise VoiceStoreError(
                "The store that shares saved voices between replicas cannot be reached "
                f"({type(exc).__name__}: {exc}); nothing was changed. Retry shortly.") from exc


def _publisher(sync: VoiceSync, model: str) -> Callable[[str, bytes], None]:
    def publish(name: str, data: bytes) -> None:
        sync.publish_create(model, name, data)

    return publish


def loop_runner(loop: asyncio.AbstractEventLoop,
                timeout_s: float) -> Callable[[Callable[[], T]], T]:
    """A `VoiceSync.run_on_loop` for `loop`: runs the callable there from a worker thread and
    returns its result (waits at most `timeout_s`; raises what the callable raised, or
    TimeoutError)."""

    def run(call: Callable[[], T]) -> T:
        future: Future[T] = Future()

        def task() -> None:
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(task)
        return future.result(timeout_s)

    return run


def shared_families(engine: Engine) -> dict[str, SharedVoices]:
    """The served models whose families save voices, by model name."""
    families: dict[str, SharedVoices] = {}
    for name, served in engine.models.items():
        if isinstance(served.family, SharedVoices):
            families[name] = served.family
    return families


@asynccontextmanager
async def sharing_voices(state: Any, store: VoiceStore | None,
                         interval_s: float) -> AsyncIterator[VoiceSync | None]:
    """Share the saved voices of the app's engine (`state.engine`, started) through `store`
    while the context runs; sets ``state.voice_sync`` (None without a store or a model that
    saves voices: the plain server). The first pass runs before it yields, so a replica
    serves every published voice from its first request.

    Raises:
        Exception: what the store raises in the first pass (the replica does not start).
    """
    families = shared_families(state.engine) if store is not None else {}
    if store is None or not families:
        state.voice_sync = None
        yield None
        return
    cache = getattr(state, "audio_cache", None)
    sync = VoiceSync(store, families, interval_s=interval_s,
                     run_on_loop=loop_runner(asyncio.get_running_loop(), LOOP_TIMEOUT_S),
                     on_voice_changed=cache.drop_voice if cache is not None else None)
    sync.attach()
    try:
        applied = await asyncio.to_thread(sync.sync_once)
        log.info("saved voices shared between replicas (%s; a pass every %g s): %d change(s) "
                 "from the store applied at start-up", ", ".join(families), interval_s, applied)
        sync.start()
        state.voice_sync = sync
        yield sync
    finally:
        state.voice_sync = None
        await asyncio.to_thread(sync.stop)


async def refresh_voices(state: Any) -> None:
    """Before a listing: a pass of the app's `VoiceSync` (nothing without one)."""
    sync: VoiceSync | None = getattr(state, "voice_sync", None)
    if sync is not None:
        await sync.refresh()


async def refresh_if_unknown(state: Any, model: str, voice: str) -> None:
    """Before a request naming `voice` of `model` (aliases resolved as the engine does): a
    pass of the app's `VoiceSync` if the model saves voices and has no such voice or alias
    here yet (created on another replica a moment ago). Nothing without a `VoiceSync`."""
    sync: VoiceSync | None = getattr(state, "voice_sync", None)
    if sync is None:
        return
    engine: Engine = state.engine
    name = engine.aliases.models.get(model, model)
    served = engine.models.get(name)
    if name not in sync.families or served is None or served.family is None:
        return
    if voice in served.family.voices or voice in engine.aliases.voice_table(name):
        return
    await sync.refresh()


__all__ = ["CHANGES_KEY", "FULL_PASS_EVERY", "Record", "RecordError", "SharedVoices",
           "VoiceStore", "VoiceSync", "decode_record", "encode_record", "gen_key",
           "loop_runner", "name_prefix", "parse_key", "refresh_if_unknown", "refresh_voices",
           "shared_families", "sharing_voices"]
