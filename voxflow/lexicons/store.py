"""The folder of saved lexicons: one ``NAME.json`` each, written atomically, read at start.

`LexiconStore` keeps every lexicon in memory (checked, its matcher built on first use) and on
disk as its canonical JSON (`Lexicon.canonical`), written with `voxflow.atomic_files.write_atomic`
so a file is whole or absent; a restart reads the folder back (temporary files a crash left are
removed first). Names follow the saved-voice rule (`voxflow.atomic_files.name_problem`).

`hold` serves a lexicon from memory only, never written (`voxflow speak --lexicon FILE`: a
file's lexicon applied as a saved one is, under the file's path as its name).

Each lexicon has a `version` (sha256 of its canonical JSON). Whoever keeps results that depend
on a lexicon (an audio cache) registers a listener (`add_listener`): it is called with
``(name, version)`` after a lexicon is stored and ``(name, None)`` after one is deleted.

Thread safety: every method may be called from any thread (one lock); listeners run on the
caller's thread after the change, outside the lock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from voxflow.atomic_files import (
    clean_temporary_files,
    data_home,
    delete_file,
    name_problem,
    write_atomic,
)
from voxflow.errors import InvalidRequestError
from voxflow.lexicons.lexicon import Lexicon, parse_lexicon

__all__ = ["SUFFIX", "LexiconFileError", "LexiconStore", "Listener", "lexicons_directory"]

log = logging.getLogger(__name__)

SUFFIX = ".json"
Listener = Callable[[str, str | None], None]
"""Called as ``listener(name, version)``; version None: the lexicon was deleted."""


def lexicons_directory(configured: Path | None) -> Path:
    """The saved lexicons' folder: `configured` (``server.lexicons_dir``), else
    ``$XDG_DATA_HOME/voxflow/lexicons``."""
    return configured or data_home() / "lexicons"


class LexiconFileError(ValueError):
    """A file in the lexicons folder cannot be read as a lexicon (raised at start-up; the
    message names the file and says how to start without it)."""


class LexiconStore:
    """Saved lexicons by name (module docstring).

    Args:
        directory: the folder (created on the first write; absent = no lexicons).

    Raises:
        LexiconFileError: a file in `directory` is badly named, not JSON or not a valid
            lexicon; or `directory` is not a folder.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._lexicons: dict[str, Lexicon] = self._load()

    def _load(self) -> dict[str, Lexicon]:
        if not self.directory.exists():
            return {}
        if not self.directory.is_dir():
            raise LexiconFileError(f"lexicons folder {self.directory}: not a directory")
        clean_temporary_files(self.directory)
        found: dict[str, Lexicon] = {}
        for path in sorted(self.directory.glob("*" + SUFFIX)):
            name = path.name.removesuffix(SUFFIX)
            hint = " (a saved lexicon: fix or remove the file to start without it)"
            problem = name_problem(name, SUFFIX)
            if problem is not None:
                raise LexiconFileError(f"lexicon {path}: bad name: {problem}{hint}")
            try:
                found[name] = parse_lexicon(json.loads(path.read_bytes()))
            except (ValueError, OSError, InvalidRequestError) as exc:  # JSON, disk, entries
                raise LexiconFileError(f"lexicon {path}: {exc}{hint}") from exc
        if found:
            log.info("%d saved lexicon(s) from %s", len(found), self.directory)
        return found

    def get(self, name: str) -> Lexicon | None:
        """The lexicon saved as `name`, or None."""
        with self._lock:
            return self._lexicons.get(name)

    def names(self) -> list[str]:
        """The saved lexicons' names, sorted."""
        with self._lock:
            return sorted(self._lexicons)

    def version(self, name: str) -> str | None:
        """`name`'s version (`Lexicon.version`), or None when there is no such lexicon."""
        lexicon = self.get(name)
        return None if lexicon is None else lexicon.version

    def put(self, name: str, lexicon: Lexicon) -> bool:
        """Save `lexicon` as `name` (replacing one of that name); True when it is new.

        The caller has checked the name (`voxflow.atomic_files.name_problem` with `SUFFIX`).

        Raises:
            ValueError: a bad name (nothing is written).
            OSError: the file cannot be written (the old one, if any, is kept and served).
        """
        problem = name_problem(name, SUFFIX)
        if problem is not None:
            raise ValueError(f"bad lexicon name {name!r}: {problem}")
        with self._lock:
            write_atomic(self.directory / f"{name}{SUFFIX}", lexicon.canonical)
            created = name not in self._lexicons
            self._lexicons[name] = lexicon
        log.info("lexicon %s %s (%d entries, version %s)", name,
                 "created" if created else "replaced", len(lexicon.entries), lexicon.version[:12])
        self._tell(name, lexicon.version)
        return created

    def hold(self, name: str, lexicon: Lexicon) -> None:
        """Serve `lexicon` as `name` from memory only (module docstring): nothing is written,
        it is gone with the process, and listeners are not told. `name` may be any string
        (a file's path): it never names a file here."""
        with self._lock:
            self._lexicons[name] = lexicon

    def delete(self, name: str) -> bool:
        """Remove the lexicon `name` from disk and memory; False when there was none.

        Raises:
            OSError: the file cannot be removed (the lexicon stays served).
        """
        with self._lock:
            if name not in self._lexicons:
                return False
            delete_file(self.directory / f"{name}{SUFFIX}")
            del self._lexicons[name]
        log.info("lexicon %s deleted", name)
        self._tell(name, None)
        return True

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(name, version)` after every change (module docstring); returns a
        function that removes it."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _tell(self, name: str, version: str | None) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(name, version)
            except Exception:  # a listener's fault is its own: the change is made
                log.exception("lexicon listener %r failed on %s", listener, name)
