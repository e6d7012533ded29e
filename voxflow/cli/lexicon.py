"""`voxflow speak --lexicon NAME_OR_FILE`: the request's pronunciation lexicon, found before any
model loads (docs/api.md, "Pronunciation lexicons").

NAME_OR_FILE is, in this order:
- ``""``: no lexicon, the configured defaults off (the request's ``"lexicon": ""``);
- a saved lexicon's name, from the folder the server reads (``server.lexicons_dir``, else
  ``$XDG_DATA_HOME/voxflow/lexicons``): the request names it, as a client would;
- a lexicon file: JSON (``.json``, the entries `PUT /v1/audio/lexicons/{name}` takes) or W3C
  PLS (``.pls``, ``.xml``; another suffix is read as PLS when it starts with ``<``), checked
  as the server checks a body. The engine holds it in memory under the path as given
  (`LexiconStore.hold`) and the request names that, so it applies as a saved lexicon does.

A saved name wins over a file of the same name (``./NAME`` reads the file). Anything else,
an unreadable or malformed file, or a folder of saved lexicons the server would refuse, is a
`CliError` (exit 2) naming the value, before the model loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from voxflow.atomic_files import name_problem
from voxflow.cli.common import CliError
from voxflow.config import Settings
from voxflow.engine.engine import Engine
from voxflow.errors import InvalidRequestError
from voxflow.lexicons.lexicon import Lexicon, parse_lexicon
from voxflow.lexicons.pls import parse_pls
from voxflow.lexicons.store import SUFFIX, LexiconFileError, LexiconStore, lexicons_directory

__all__ = ["SpeakLexicon", "speak_lexicon"]

PLS_SUFFIXES = (".pls", ".xml")


@dataclass(frozen=True)
class SpeakLexicon:
    """What ``--lexicon`` chose.

    Attributes:
        name: the request's `lexicon`: a saved name, a file's path as given, or ``""`` (none).
        version: the lexicon's `Lexicon.version` (None for ``""``): a ``--long`` job keeps it,
            so a rerun with a changed lexicon is another job, not a resume.
        held: a file's lexicon, for the engine to hold under `name`; None for a saved one.
    """

    name: str
    version: str | None = None
    held: Lexicon | None = None

    def install(self, engine: Engine) -> None:
        """Make a file's lexicon one the engine's requests can name (before any request)."""
        if self.held is not None:
            engine.lexicons.store.hold(self.name, self.held)


def read_lexicon_file(path: Path, value: str) -> Lexicon:
    """The lexicon file at `path` (module docstring; `value` as ``--lexicon`` gave it, for
    the messages), checked as a ``PUT`` body is.

    Raises:
        CliError: unreadable, not JSON (or XML), or a lexicon the server would refuse.
    """
    where = f"--lexicon {value}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    try:
        if suffix in PLS_SUFFIXES or (suffix != SUFFIX and data.lstrip()[:1] == b"<"):
            return parse_pls(data)
        try:
            raw = json.loads(data)
        except ValueError as exc:  # not JSON, or bytes that are not UTF-8
            raise CliError(f"{where}: not a JSON lexicon ({exc}); a PLS file is read as one "
                           f"by its {' or '.join(PLS_SUFFIXES)} suffix") from None
        return parse_lexicon(raw)
    except InvalidRequestError as exc:  # what the server's PUT answers with a 400
        raise CliError(f"{where}: {exc.message}") from None


def speak_lexicon(value: str | None, settings: Settings) -> SpeakLexicon | None:
    """The lexicon ``--lexicon VALUE`` names (module docstring); None without ``--lexicon``
    (the configured defaults apply).

    Raises:
        CliError: (exit 2) no saved lexicon and no file of that name, a malformed file, or a
            saved lexicon's file the server would refuse at start-up.
    """
    if value is None:
        return None
    if value == "":
        return SpeakLexicon("")
    directory = lexicons_directory(settings.server.lexicons_dir)
    try:
        store = LexiconStore(directory)
    except LexiconFileError as exc:
        raise CliError(f"--lexicon {value}: {exc}") from None
    saved = store.get(value) if name_problem(value, SUFFIX) is None else None
    if saved is not None:
        return SpeakLexicon(value, saved.version)
    path = Path(value).expanduser()
    if path.is_file():
        lexicon = read_lexicon_file(path, value)
        return SpeakLexicon(value, lexicon.version, lexicon)
    names = ", ".join(store.names()) or "none"
    raise CliError(f"--lexicon {value}: no saved lexicon of that name in {directory} "
                   f"(saved: {names}) and no such file")
