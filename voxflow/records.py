"""JSON records written by `voxflow bench` and `voxflow eval` (below both, imported by both)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def write_json(path: Path | str, record: dict[str, Any]) -> None:
    """Write `record` to `path` as indented UTF-8 JSON; NaN and infinities become null (strict
    JSON has neither).

    Raises:
        OSError: the file cannot be written.
    """
    Path(path).write_text(json.dumps(finite(record), indent=2) + "\n", encoding="utf-8")


def finite(value: Any) -> Any:
    """`value` with every non-finite float (at any depth of dicts, lists, tuples) as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
