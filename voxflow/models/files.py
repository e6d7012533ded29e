"""Reading a model's files: a file that cannot be read fails with one line that names it.

ONNX, safetensors, numpy and JSON readers raise their own errors (a protobuf `DecodeError`,
safetensors' "HeaderTooLarge", a `JSONDecodeError`) that do not say which file they were
reading, and a start-up that fails on one of them left the operator to guess among the
model's files. Loaders read through `reading`, which turns any such error into a
`ModelFileError` naming the file and what is wrong; the engine logs it as one line (no
traceback) and start-up stops (`voxflow serve` exits 3, docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_CAUSE_CHARS = 200


class ModelFileError(ValueError):
    """A model, voice or configuration file that cannot be read (the message names it)."""


@contextmanager
def reading(path: str | Path, kind: str) -> Iterator[None]:
    """Read `path` (a `kind`, e.g. "Piper voice model") inside the block.

    Raises:
        ModelFileError: anything the block raised (a `ModelFileError` passes unchanged):
            ``"{kind} {path} cannot be read: {error type}: {its first line}"``.
    """
    try:
        yield
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 (any reader's error: the file is what matters)
        lines = str(exc).strip().splitlines()
        cause = lines[0][:MAX_CAUSE_CHARS] if lines else ""
        detail = f"{type(exc).__name__}: {cause}" if cause else type(exc).__name__
        raise ModelFileError(f"{kind} {path} cannot be read: {detail}") from exc


__all__ = ["ModelFileError", "reading"]
