"""Spec §10 precision switches: TF32 off on CUDA only; the pre-lookahead convs unchanged on CPU."""

import torch

from voxflow.models.cosyvoice3.flow import PreLookaheadLayer
from voxflow.models.cosyvoice3.precision import cudnn_off, full_float32


def test_full_float32_changes_nothing_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert full_float32(torch.device("cpu")) is False
    assert torch.backends.cudnn.allow_tf32 is True


def test_full_float32_turns_tf32_off_for_cuda():
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
              torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        assert full_float32(torch.device("cuda")) is True
        assert torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.allow_tf32 = before[1]
        torch.backends.cuda.matmul.allow_tf32 = before[2]


def test_cudnn_off_leaves_cpu_tensors_alone():
    x = torch.zeros(1)
    enabled = torch.backends.cudnn.enabled
    with cudnn_off(x):
        assert torch.backends.cudnn.enabled == enabled


def test_pre_lookahead_output_is_the_plain_convs_on_cpu():
    torch.manual_seed(0)
    layer = PreLookaheadLayer(8, 16, 3)
    x = torch.randn(2, 7, 8)
    h = torch.nn.functional.pad(x.transpose(1, 2), (0, 3))
    h = torch.nn.functional.leaky_relu(layer.conv1(h), 0.01)
    h = layer.conv2(torch.nn.functional.pad(h, (2, 0)))
    assert torch.equal(layer(x), h.transpose(1, 2) + x)
