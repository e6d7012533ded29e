"""Where the server's API keys come from: `server.api_keys`, a key file, an environment variable.

`collect_api_keys` is called once, by `voxflow.config.load_settings`, and merges the three
sources into one list (in that order, repeats dropped). A key is 1 to 256 printable ASCII
characters without spaces (what fits in ``Authorization: Bearer KEY``); a bad key, a key file
that cannot be read or holds no key, and an environment variable that is set but holds no key
are errors that stop start-up. No message here ever quotes a key: they name the line or the
position instead.

- ``server.api_keys_file``: one key per line; blank lines and lines starting with ``#`` are
  skipped; surrounding spaces are dropped.
- ``VOXFLOW_API_KEYS`` (`ENV_VAR`): keys separated by commas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

ENV_VAR = "VOXFLOW_API_KEYS"
"""The environment variable whose comma-separated keys are added to ``server.api_keys``."""

MAX_KEY_CHARS = 256
"""The longest key accepted, in characters."""


class ApiKeysError(ValueError):
    """A key source is unusable; the message names it (never a key)."""


def key_problem(key: str) -> str | None:
    """Why `key` cannot be an API key (a phrase without the key), or None when it can."""
    if not key:
        return "a key must not be empty"
    if len(key) > MAX_KEY_CHARS:
        return f"a key must be at most {MAX_KEY_CHARS} characters"
    if not all("!" <= ch <= "~" for ch in key):
        return "a key must be printable ASCII without spaces (it is sent as `Bearer KEY`)"
    return None


def _checked_keys(items: Iterable[str], where: str, skip_comments: bool = False) -> list[str]:
    """The keys among `items`, each stripped; blank items (and ``#`` comments when
    `skip_comments`) skipped.

    Raises:
        ApiKeysError: an item is not a valid key, named as ``f"{where} {n}"`` (1-based).
    """
    keys = []
    for number, item in enumerate(items, start=1):
        key = item.strip()
        if not key or (skip_comments and key.startswith("#")):
            continue
        problem = key_problem(key)
        if problem is not None:
            raise ApiKeysError(f"{where} {number}: {problem}")
        keys.append(key)
    return keys


def read_keys_file(path: Path) -> list[str]:
    """The keys of a key file: one per line, blank lines and ``#`` comment lines skipped.

    Raises:
        ApiKeysError: the file is missing or unreadable, a line is not a valid key (named by
            its number), or it holds no key at all.
    """
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ApiKeysError(f"cannot read the API key file {path}: {reason}") from None
    keys = _checked_keys(text.splitlines(), f"API key file {path}, line",
                         skip_comments=True)
    if not keys:
        raise ApiKeysError(
            f"the API key file {path} holds no key (one key per line; # starts a comment)"
        )
    return keys


def env_keys(environ: Mapping[str, str]) -> list[str]:
    """The keys of `ENV_VAR` (comma-separated, spaces around each dropped); [] when unset.

    Raises:
        ApiKeysError: the variable is set but holds no key, or an entry is not a valid key
            (named by its position).
    """
    value = environ.get(ENV_VAR)
    if value is None:
        return []
    keys = _checked_keys(value.split(","), f"{ENV_VAR}, key")
    if not keys:
        raise ApiKeysError(
            f"{ENV_VAR} is set but holds no key: give comma-separated keys, or unset it to "
            "use only server.api_keys and server.api_keys_file"
        )
    return keys


def collect_api_keys(
    configured: Iterable[str], keys_file: Path | None, environ: Mapping[str, str]
) -> list[str]:
    """Every API key of a deployment: `configured` (``server.api_keys``), then the key file's,
    then `ENV_VAR`'s, each once, in that order; [] means the API is open.

    Raises:
        ApiKeysError: see `read_keys_file` and `env_keys`.
    """
    keys = list(configured)
    if keys_file is not None:
        keys += read_keys_file(keys_file)
    keys += env_keys(environ)
    return list(dict.fromkeys(keys))


__all__ = [
    "ENV_VAR",
    "MAX_KEY_CHARS",
    "ApiKeysError",
    "collect_api_keys",
    "env_keys",
    "key_problem",
    "read_keys_file",
]
