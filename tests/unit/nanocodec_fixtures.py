"""Where the NanoCodec parity fixtures live in the repository, and how to read them.

`tests/fixtures/nanocodec/` is a copy of the shared NeMo fixtures (see its README.md: what each
file holds, how it was made, tolerances). Every safetensors file carries its decoder config as
JSON under the metadata key ``config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nanocodec"


def tensors(name: str) -> dict[str, Any]:
    """The tensors of `FIXTURES/name` (a ``.safetensors`` file) as torch CPU tensors."""
    from safetensors.torch import load_file

    return load_file(str(FIXTURES / name))


def config(name: str) -> dict[str, Any]:
    """The decoder (or quantizer) config stored in `FIXTURES/name`'s metadata."""
    from safetensors import safe_open

    with safe_open(str(FIXTURES / name), "pt") as handle:
        metadata = handle.metadata() or {}
    doc: dict[str, Any] = json.loads(metadata["config"])
    return doc
