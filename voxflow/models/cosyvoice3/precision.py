"""Numeric precision of the flow (spec §9.3 ``estimator_dtype``, §10 "Precision").

The spec asks for TF32 off for the flow, in capture and eager alike, and no autocast; and for the
pre-lookahead convolutions to run with cuDNN off (its float32 plan cost about 155 ms a call in the
prior implementation). TF32 is a process-wide switch in PyTorch (``torch.backends``), so it is
turned off once when the models are placed on a CUDA device: every matmul and cuDNN convolution
of the process then runs in full float32, which is what the spec's parity figures assume.
On the CPU neither switch has any effect, and nothing is changed.

With ``estimator_dtype: bfloat16`` the DiT's matmuls run in bfloat16 while its norms and
softmax stay float32 (`ESTIMATOR_DTYPES`, `attention_fp32_softmax`, `dit.DiT.set_compute_dtype`);
TF32 stays off, and nothing uses autocast, so a captured graph replays the same kernels as the
eager call in either dtype.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor

ESTIMATOR_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32,
                                            "bfloat16": torch.bfloat16}
"""The `estimator_dtype` setting's values and their torch dtypes (spec §9.3)."""


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


def attention_fp32_softmax(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Scaled dot-product attention whose scores and softmax are float32 (spec §9.3).

    q, k, v: [B, heads, T, dim_head] in a low-precision dtype (bfloat16); mask: bool
    [B, 1, T, T], True = may attend (every query row has a True: `attention_mask`). The q·kᵀ
    and probs·v matmuls run in q's dtype (the tensor-core path; on CUDA they accumulate in
    float32); the scores are cast to float32 before the 1/sqrt(dim_head) scale, the mask and
    the softmax, and the probabilities go back to q's dtype for the value product. Returns
    [B, heads, T, dim_head] in q's dtype. This is what `F.scaled_dot_product_attention` does
    in exact arithmetic; unlike its fused kernels it materialises the [B, heads, T, T] scores.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs.to(v.dtype), v)
