"""Honest answers to notebook 10's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from tools.classroom.panel import answer

# --- 10.1: an fp32 communication hook that averages the bucket ------------------------------------------------------


@answer("10.1", right=True)
def mean_hook_dividing_before_the_all_reduce(state, bucket):
    grads = bucket.buffer()
    grads.div_(dist.get_world_size())
    future = dist.all_reduce(grads, async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0])


@answer("10.1", right=True)
def mean_hook_dividing_in_then(state, bucket):
    world_size = dist.get_world_size()
    summed = bucket.buffer().to(torch.float32)
    work = dist.all_reduce(summed, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0] / world_size)


@answer("10.1", right=True)
def mean_hook_with_a_completed_future(state, bucket):
    grads = bucket.buffer().clone()
    dist.all_reduce(grads)          # synchronous: the sum is there when it returns
    result = torch.futures.Future()
    result.set_result(grads / dist.get_world_size())
    return result


@answer("10.1", mistake="logic", says="all-reduces the bucket but never divides by the world size, so .grad is the sum "
        "over the processes instead of the mean")
def mean_hook_without_averaging(state, bucket):
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0])


@answer("10.1", mistake="logic", says="divides by the world size both before the all-reduce and again in the "
        "callback, so .grad is the mean divided by the world size")
def mean_hook_dividing_twice(state, bucket):
    world_size = dist.get_world_size()
    grads = bucket.buffer().div_(world_size)
    future = dist.all_reduce(grads, async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0] / world_size)


@answer("10.1", mistake="logic", says="runs the all-reduce twice on the same buffer (once synchronously, once "
        "asynchronously), so the gradients are summed over the processes twice")
def mean_hook_all_reducing_twice(state, bucket):
    grads = bucket.buffer()
    dist.all_reduce(grads)
    grads.div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])


@answer("10.1", mistake="shape-or-dtype", says="returns the all-reduce's future as it is, whose result is a list "
        "holding the tensor, instead of the tensor itself")
def mean_hook_returning_the_list_future(state, bucket):
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future()


@answer("10.1", mistake="shape-or-dtype", says="copies the lesson's bf16 hook: the gradients travel as bfloat16 and "
        "the mean comes back rounded, not the float32 mean")
def mean_hook_in_bf16(state, bucket):
    grads = bucket.buffer()
    compressed = grads.to(torch.bfloat16).div_(dist.get_world_size())
    future = dist.all_reduce(compressed, async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0].to(grads.dtype))


@answer("10.1", mistake="returns-input", says="returns the Work handle that all_reduce(async_op=True) gives instead "
        "of a Future")
def mean_hook_returning_the_work(state, bucket):
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True)


# --- 10.2: a tensor hook that records the norm of the true (unscaled) gradient --------------------------------------


@answer("10.2", right=True)
def unscaled_norm_hook_with_a_closure(scaler, norms):
    def hook(grad):
        norms.append((grad / scaler.get_scale()).norm().item())

    return hook


def _record_unscaled_norm(scaler, norms, grad):
    norms.append(float(grad.float().norm()) / scaler.get_scale())


@answer("10.2", right=True)
def unscaled_norm_hook_with_partial(scaler, norms):
    return functools.partial(_record_unscaled_norm, scaler, norms)


@answer("10.2", right=True)
def unscaled_norm_hook_as_a_callable_object(scaler, norms):
    class UnscaledNorm:
        def __init__(self, scaler, norms):
            self.scaler, self.norms = scaler, norms

        def __call__(self, grad):
            scale = self.scaler.get_scale()
            self.norms.append(torch.linalg.vector_norm(grad.double() / scale).item())
            return None

    return UnscaledNorm(scaler, norms)


@answer("10.2", mistake="logic", says="appends the norm of the scaled gradient, without dividing by "
        "scaler.get_scale()")
def unscaled_norm_hook_forgetting_the_scale(scaler, norms):
    def hook(grad):
        norms.append(grad.norm().item())

    return hook


@answer("10.2", mistake="logic", says="multiplies by the scale instead of dividing by it")
def unscaled_norm_hook_multiplying_by_the_scale(scaler, norms):
    def hook(grad):
        norms.append(grad.norm().item() * scaler.get_scale())

    return hook


@answer("10.2", mistake="in-place-grad", says="unscales the gradient in place (grad.div_) before taking its norm, "
        "which changes the gradient the rest of backward and unscale_ see")
def unscaled_norm_hook_unscaling_in_place(scaler, norms):
    def hook(grad):
        norms.append(grad.div_(scaler.get_scale()).norm().item())

    return hook


@answer("10.2", mistake="returns-input", says="returns the unscaled gradient, which replaces the gradient, so "
        "unscale_ later divides it by the scale a second time")
def unscaled_norm_hook_returning_the_unscaled_grad(scaler, norms):
    def hook(grad):
        unscaled = grad / scaler.get_scale()
        norms.append(unscaled.norm().item())
        return unscaled

    return hook


@answer("10.2", mistake="shape-or-dtype", says="appends the norm as a 0-d tensor instead of a float")
def unscaled_norm_hook_appending_a_tensor(scaler, norms):
    def hook(grad):
        norms.append((grad / scaler.get_scale()).norm().detach())

    return hook


@answer("10.2", mistake="logic", says="appends the squared L2 norm (the sum of squares) instead of the norm")
def unscaled_norm_hook_squared(scaler, norms):
    def hook(grad):
        norms.append((grad / scaler.get_scale()).pow(2).sum().item())

    return hook


@answer("10.2", mistake="stale-state", says="reads scaler.get_scale() once, when the hook is made, so after the "
        "scaler changes its scale the hook divides by an outdated value")
def unscaled_norm_hook_with_the_scale_read_once(scaler, norms):
    scale = scaler.get_scale()

    def hook(grad):
        norms.append((grad / scale).norm().item())

    return hook


# --- 10.3: tensor-hook runs with a layer used three times, each use checkpointed ------------------------------------


@answer("10.3", right=True, built=True)
def my_runs_once_then_once_per_segment():
    return [1, 3]


@answer("10.3", built=True, mistake="count", says="copies section 7's result for two uses (1, 2) instead of counting "
        "three reentrant segments")
def my_runs_from_the_two_use_example():
    return [1, 2]


@answer("10.3", built=True, mistake="count", says="expects one run per checkpoint under non-reentrant checkpointing "
        "too, though it is part of the same backward pass and the gradients are summed before the hook")
def my_runs_three_each():
    return [3, 3]


@answer("10.3", built=True, mistake="other", says="puts the two numbers in the wrong order (reentrant first)")
def my_runs_in_the_wrong_order():
    return [3, 1]
