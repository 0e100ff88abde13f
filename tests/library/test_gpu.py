"""What hooklab promises on a GPU, checked where one is visible: run with ``HOOKLAB_TEST_GPU=1 ./course test tests -m gpu``.

``./course test`` hides the GPU (the notebooks' committed outputs are CPU outputs), so these tests skip there and in
CI. The observers must never make the host wait for the device once per hook call: under
``torch.cuda.set_sync_debug_mode("error")`` any operation that synchronises raises.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import hooklab

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="needs a GPU: HOOKLAB_TEST_GPU=1 ./course test tests -m gpu on a machine with one")]


@contextlib.contextmanager
def no_host_device_sync():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def model_and_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).cuda()
    return model, torch.randn(32, 64, device="cuda")


def test_monitor_and_clip_hooks_under_a_grad_scaler_do_not_wait_for_the_gpu():
    model, x = model_and_batch()
    scaler = torch.amp.GradScaler("cuda")
    scaled = scaler.scale(model(x).square().mean())
    with hooklab.GradientMonitor(model, scaler=scaler) as gm, hooklab.clip_grad_value_hooks(model, 0.1, scaler=scaler):
        with no_host_device_sync():
            scaled.backward()
    assert gm.steps == 1 and all(p.grad is not None for p in model.parameters())


def test_the_ledger_and_capture_do_not_wait_for_the_gpu():
    model, x = model_and_batch()
    with hooklab.SavedTensorLedger(model) as ledger, hooklab.capture(model, ["0", "2"], grads=True) as store:
        with no_host_device_sync():
            model(x).square().mean().backward()
    assert ledger.activation_bytes > 0 and store.grads["2"].is_cuda


def test_save_on_cpu_moves_gpu_tensors():
    x = torch.randn(1000, device="cuda", requires_grad=True)
    with hooklab.SaveOnCpu(pin_memory=True) as ctx:
        y = x.exp().sin().sum()
    assert ctx.stats.offloaded >= 1
    y.backward()
    torch.testing.assert_close(x.grad, (x.exp().cos() * x.exp()))
