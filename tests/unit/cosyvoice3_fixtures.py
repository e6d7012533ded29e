"""Where the CosyVoice3 parity fixtures live in the repository, and how to read them.

`tests/fixtures/cosyvoice3/` is a copy of the shared reference fixtures (see its README.md:
what each file holds, conventions, tolerances).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3"


@pytest.fixture(scope="module")
def one_torch_thread() -> Any:
    """Torch on one thread for the module, so float sums run in one fixed order and padded
    and unpadded solves can be compared bit for bit. Import it, and mark the module with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tensors(name: str) -> dict[str, Any]:
    """The tensors of `FIXTURES/name` (``.safetensors``, or ``.safetensors.gz``) as torch."""
    from voxflow.models.cosyvoice3.loader import read_safetensors

    return read_safetensors(FIXTURES / name)


def meta(name: str) -> Any:
    """The JSON document `FIXTURES/name`."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def tiny_flow() -> Any:
    """The tiny flow with its fixture weights, in eval mode."""
    from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig

    model = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    model.load_state_dict(tensors("flow_tiny_state_dict.safetensors"), strict=True)
    return model.eval()


def tiny_hift() -> Any:
    """The tiny HiFT with its fixture weights and sine-wave prefix, in eval mode."""
    from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator, HiFTConfig

    model = CausalHiFTGenerator(HiFTConfig.tiny()).eval()
    model.load_state_dict(tensors("hift_tiny_state_dict.safetensors"), strict=True)
    model.set_sine_waves(tensors("hift_tiny_fixtures.safetensors")["buf.sine_waves_prefix"])
    return model


def tiny_prompt() -> Any:
    """The flow fixture's prompt (tokens, mel features, speaker embedding)."""
    from voxflow.models.cosyvoice3.token2wav import FlowPrompt

    ffx = tensors("flow_tiny_fixtures.safetensors")
    return FlowPrompt(ffx["in.prompt_token"], ffx["in.prompt_feat"], ffx["in.embedding"])
