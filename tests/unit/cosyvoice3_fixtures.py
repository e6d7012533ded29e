"""Where the CosyVoice3 parity fixtures live in the repository, and how to read them.

`tests/fixtures/cosyvoice3/` is a copy of the shared reference fixtures (see its README.md:
what each file holds, conventions, tolerances).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3"


def tensors(name: str) -> dict[str, Any]:
    """The tensors of `FIXTURES/name` (``.safetensors``, or ``.safetensors.gz``) as torch."""
    from safetensors.torch import load, load_file

    path = FIXTURES / name
    if name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return load(f.read())
    return load_file(str(path))


def meta(name: str) -> Any:
    """The JSON document `FIXTURES/name`."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))
