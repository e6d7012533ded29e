"""Files the API writes and a restart reads back: names that are never paths, atomic writes.

Saved voices (`voxflow.models.cosyvoice3.saved_voices`) and pronunciation lexicons
(`voxflow.lexicons.store`) are each one file per name in a folder. They share:

- `name_problem`: a name is 1-64 ASCII letters, digits, ``_``, ``.``, ``-``, starting with a
  letter or digit, without ``..`` (so never a path), and not ending with a reserved suffix;
- `write_atomic`: the bytes go to a hidden temporary file in the same folder (``.NAME.XXXX.tmp``,
  never read back as an item), are flushed to disk, then renamed over the final name with
  `os.replace`; any failure removes the temporary file, so a file is whole or absent;
- `clean_temporary_files`: temporary files a crash left behind are removed at start-up;
- `delete_file`: an unlink made durable.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

NAME_MAX_CHARS = 64
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A stored item's name: 1-64 ASCII letters, digits, ``_``, ``.``, ``-``, starting with a letter
or digit (so never a path: no ``/``, ``\\``, leading dot or ``..`` component)."""

TEMP_SUFFIX = ".tmp"


def data_home() -> Path:
    """``$XDG_DATA_HOME/voxflow`` (``~/.local/share/voxflow`` without it): where stored items
    live unless the configuration names a folder."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "voxflow"


def name_problem(name: str, suffix: str) -> str | None:
    """Why `name` cannot name a stored item saved as ``NAME + suffix``, or None when it can.

    Args:
        name: the name a client gave.
        suffix: the file suffix the item is saved with (``.json``); a name ending with it or
            with `TEMP_SUFFIX` (any case) is refused, so listings stay unambiguous.
    """
    if not name:
        return "it must not be empty"
    if len(name) > NAME_MAX_CHARS:
        return f"it is {len(name)} characters long; at most {NAME_MAX_CHARS} are allowed"
    if not NAME_PATTERN.fullmatch(name):
        return ("use only ASCII letters, digits, '_', '.' and '-', starting with a letter or "
                "digit (no path characters)")
    if ".." in name:
        return "it must not contain '..'"
    if name.lower().endswith(suffix) or name.lower().endswith(TEMP_SUFFIX):
        return f"it must not end with {suffix} or {TEMP_SUFFIX}"
    return None


def write_atomic(path: Path, data: bytes) -> Path:
    """Write `data` to `path` whole or not at all (module docstring); returns `path`.

    The folder is created if needed.

    Raises:
        OSError: the folder or file cannot be written (nothing is left behind).
    """
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return path


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable (best effort: not every OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def delete_file(path: Path) -> None:
    """Remove `path` (missing is fine) durably. Raises OSError when it cannot be removed."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def clean_temporary_files(directory: Path) -> list[Path]:
    """Remove temporary files a crashed `write_atomic` left in `directory`; returns them."""
    if not directory.is_dir():
        return []
    removed = []
    for temp in sorted(directory.glob(f".*{TEMP_SUFFIX}")):
        temp.unlink(missing_ok=True)
        removed.append(temp)
        log.warning("removed %s, left by an interrupted write", temp)
    return removed


__all__ = ["NAME_MAX_CHARS", "NAME_PATTERN", "TEMP_SUFFIX", "clean_temporary_files",
           "data_home", "delete_file", "fsync_dir", "name_problem", "write_atomic"]
