"""Numeric precision of the flow on CUDA (spec §10 "Precision").

The spec asks for TF32 off for the flow, in capture and eager alike, and no autocast; and for the
pre-lookahead convolutions to run with cuDNN off (its float32 plan cost about 155 ms a call in the
prior implementation). TF32 is a process-wide switch in PyTorch (``torch.backends``), so it is
turned off once when the models are placed on a CUDA device: every matmul and cuDNN convolution
of the process then runs in full float32, which is what the spec's parity figures assume.
On the CPU neither switch has any effect, and nothing is changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def full_float32(device: torch.device) -> bool:
    """Turn TF32 off for matmuls and cuDNN convolutions when `device` is CUDA.

    Returns:
        True when the switches were set (a CUDA device), False on any other device.
    """
    if device.type != "cuda":
        return False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return True


@contextlib.contextmanager
def cudnn_off(tensor: torch.Tensor) -> Iterator[None]:
    """Run the enclosed convolutions without cuDNN when `tensor` is on CUDA (else no change).

    PyTorch's switch is process-wide while the block runs, so a convolution of another thread
    in that window also skips cuDNN: slower at worst, never different in value beyond float32
    rounding of another kernel.
    """
    if tensor.is_cuda:
        with torch.backends.cudnn.flags(enabled=False):
            yield
    else:
        yield
