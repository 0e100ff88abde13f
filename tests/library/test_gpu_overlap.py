"""OverlappedOffload on a GPU (side stream, events, prefetch): run with ``HOOKLAB_TEST_GPU=1 ./course test tests -m gpu``.

Skipped where no GPU is visible (``./course test`` hides it). These tests have not run on a GPU yet. They check what the CPU tests cannot: gradients bit-for-bit equal to the plain step with the copies
really asynchronous, GPU memory actually released, and PyTorch's in-place error kept while a copy is in flight.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from hooklab.offload.overlap import OverlappedOffload

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="needs a GPU: HOOKLAB_TEST_GPU=1 ./course test tests -m gpu on a machine with one")]


def deterministic_net():
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)  # Linear + ReLU: deterministic in cuBLAS anyway
    layers = []
    for _ in range(6):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(256, 8)).cuda(), torch.randn(512, 256, device="cuda")


def grads(net, x, context=None):
    net.zero_grad(set_to_none=True)
    if context is None:
        loss = net(x).square().mean()
    else:
        with context:
            loss = net(x).square().mean()
    loss.backward()
    torch.cuda.synchronize()
    return [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("prefetch,keep_last,in_flight", [(0, 0, 1), (2, 0, 2), (4, 3, 2)])
def test_gradients_are_bit_for_bit_those_of_the_plain_step(prefetch, keep_last, in_flight):
    net, x = deterministic_net()
    try:
        plain = grads(net, x)
        ctx = OverlappedOffload(keep=[net, x], prefetch=prefetch, keep_last=keep_last, in_flight=in_flight)
        got = grads(net, x, ctx)
    finally:
        torch.use_deterministic_algorithms(False)
    assert ctx.stats.offloaded > 0
    assert ctx.copied_back == ctx.stats.offloaded - min(keep_last, ctx.stats.offloaded)
    assert all(torch.equal(a, b) for a, b in zip(plain, got))


def test_activation_memory_is_released_in_forward():
    net, x = deterministic_net()
    torch.use_deterministic_algorithms(False)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    loss = net(x).square().mean()
    plain_held = torch.cuda.memory_allocated() - base
    del loss
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    with OverlappedOffload(keep=[net, x], in_flight=1):
        loss = net(x).square().mean()
    torch.cuda.synchronize()
    offloaded_held = torch.cuda.memory_allocated() - base
    loss.backward()
    assert offloaded_held < plain_held / 3


def test_an_inplace_change_while_in_flight_raises():
    x = torch.randn(1 << 20, device="cuda", requires_grad=True)
    with OverlappedOffload(in_flight=4):
        y = x.exp()
        y.add_(1)  # inside the block: leaving it lets the original go (its copy done first, the value at save time)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
