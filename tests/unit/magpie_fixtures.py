"""Where the MagpieTTS parity fixtures live, and how to read them.

`tests/fixtures/magpietts/` is a copy of the shared reference fixtures (its README.md says what
each file holds, how NeMo ``a80c059`` made it on tiny random weights, and the tolerances used
below). ``s1`` / ``s2``: frame stacking 1 and 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "magpietts"
TAGS = ("s1", "s2")
DECODES = ("greedy_cfg_prior_min4", "greedy_cfg_prior_min0", "greedy_cfg_noprior_min4",
           "greedy_nocfg_prior_min4", "greedy_cfg_prior_cap5")

# README "Tolerances to use"
HIDDEN_ATOL = 2e-5  # hidden states, attention probabilities, prior-on outputs (fp32)
LOGIT_ATOL = 5e-5  # final_proj, CFG and LT logits (fp32)
FP64_ATOL = 1e-11  # fp64 forward vs the *_fp64 keys



@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Run a test module's tiny-model compute on one intra-op thread, restored afterwards.

    The tiny decodes are thousands of small ops: on this 2-core machine under other load, two
    spinning OpenMP threads made them up to 8x slower (65 s vs 8.6 s for three KV-cache tests).
    Import it into a test module (autouse) to apply it there.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@cache
def tensors(name: str) -> dict[str, Any]:
    """The tensors of `FIXTURES/name` (``.safetensors``) as torch CPU tensors (cached: treat
    them as read-only)."""
    from safetensors.torch import load_file

    return load_file(str(FIXTURES / name))


@cache
def header(tag: str) -> dict[str, Any]:
    """The JSON under the ``config`` metadata key of ``tiny_<tag>_io.safetensors``: NeMo cfg,
    special ids, EOS biases, decode summaries."""
    from safetensors import safe_open

    with safe_open(str(FIXTURES / f"tiny_{tag}_io.safetensors"), "pt") as handle:
        metadata = handle.metadata() or {}
    doc: dict[str, Any] = json.loads(metadata["config"])
    return doc


def io(tag: str) -> dict[str, Any]:
    return tensors(f"tiny_{tag}_io.safetensors")


def state_dict(tag: str) -> dict[str, Any]:
    return tensors(f"tiny_{tag}_state_dict.safetensors")


def config(tag: str) -> Any:
    """The tiny model's `MagpieConfig` from the header cfg and the state dict's sizes."""
    from voxflow.models.magpie.config import MagpieConfig, checkpoint_sizes

    doc = header(tag)
    return MagpieConfig.from_nemo(doc["cfg"], num_codebooks=doc["num_audio_codebooks"],
                                  codebook_size=doc["codebook_size"],
                                  **checkpoint_sizes(state_dict(tag)))


def model(tag: str, dtype: Any = None) -> Any:
    """The tiny model loaded from its fixture (float32 unless ``dtype``)."""
    import torch

    from voxflow.models.magpie.loader import load_model

    return load_model(state_dict(tag), config(tag), dtype=dtype or torch.float32)


def max_diff(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).abs().max())
