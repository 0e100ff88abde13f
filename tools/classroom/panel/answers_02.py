"""Honest answers to notebook 02's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import hooklab
from tools.classroom.panel import answer

# --- 02.1: predict the tracer's sequence on ab = a * b, z = ab.exp() ------------------------------------------------


@answer("02.1", right=True, built=True)
def trace_mul_node_then_a_then_b():
    # ab's gradient first (its tensor hook), then MulBackward0 between its pre- and post-hook; then the leaves, in the
    # order of MulBackward0's inputs (a first): each one's tensor hook, then its post-accumulate hook
    return [("tensor", "ab"), ("node_pre", "MulBackward0"), ("node_post", "MulBackward0"),
            ("tensor", "a"), ("post_accumulate_grad", "a"),
            ("tensor", "b"), ("post_accumulate_grad", "b")]


@answer("02.1", mistake="logic", built=True, says="has b's hooks fire before a's, the reverse of the order of "
        "MulBackward0's inputs")
def trace_b_before_a():
    return [("tensor", "ab"), ("node_pre", "MulBackward0"), ("node_post", "MulBackward0"),
            ("tensor", "b"), ("post_accumulate_grad", "b"),
            ("tensor", "a"), ("post_accumulate_grad", "a")]


@answer("02.1", mistake="logic", built=True, says="puts both post-accumulate hooks at the end, as if they ran once "
        "at the end of backward rather than as soon as each leaf's gradient is accumulated")
def trace_post_accumulate_at_the_end():
    return [("tensor", "ab"), ("node_pre", "MulBackward0"), ("node_post", "MulBackward0"),
            ("tensor", "a"), ("tensor", "b"),
            ("post_accumulate_grad", "a"), ("post_accumulate_grad", "b")]


@answer("02.1", mistake="logic", built=True, says="puts the Node's post-hook after the leaves' hooks, as if it waited "
        "for the gradients to reach a and b")
def trace_node_post_hook_last():
    return [("tensor", "ab"), ("node_pre", "MulBackward0"),
            ("tensor", "a"), ("post_accumulate_grad", "a"),
            ("tensor", "b"), ("post_accumulate_grad", "b"),
            ("node_post", "MulBackward0")]


@answer("02.1", mistake="logic", built=True, says="puts MulBackward0's pre-hook before the tensor hook on ab, the "
        "order the official notes give")
def trace_node_pre_hook_before_the_tensor_hook():
    return [("node_pre", "MulBackward0"), ("tensor", "ab"), ("node_post", "MulBackward0"),
            ("tensor", "a"), ("post_accumulate_grad", "a"),
            ("tensor", "b"), ("post_accumulate_grad", "b")]


@answer("02.1", mistake="count", built=True, says="gives 6 pairs: it leaves out MulBackward0's post-hook")
def trace_without_the_node_post_hook():
    return [("tensor", "ab"), ("node_pre", "MulBackward0"),
            ("tensor", "a"), ("post_accumulate_grad", "a"),
            ("tensor", "b"), ("post_accumulate_grad", "b")]


# --- 02.2: clip the gradient arriving at y with a pre-hook on y.grad_fn ---------------------------------------------


@answer("02.2", right=True)
def clip_at_node_with_a_lambda(y, limit):
    return y.grad_fn.register_prehook(lambda grad_outputs: (grad_outputs[0].clamp(-limit, limit),))


def _clip_all(grad_outputs, limit):
    return tuple(None if g is None else g.clamp(-limit, limit) for g in grad_outputs)


@answer("02.2", right=True)
def clip_at_node_with_partial_over_every_output(y, limit):
    return y.grad_fn.register_prehook(functools.partial(_clip_all, limit=limit))


@answer("02.2", mistake="shape-or-dtype", says="the pre-hook returns a bare tensor instead of a tuple of gradients")
def clip_at_node_returning_a_tensor(y, limit):
    def clip(grad_outputs):
        return grad_outputs[0].clamp(-limit, limit)

    return y.grad_fn.register_prehook(clip)


@answer("02.2", mistake="wrong-hook-kind", says="registers a post-hook (register_hook) on y.grad_fn and clamps "
        "grad_inputs, the gradients the node has already computed, instead of a pre-hook on what arrives at y")
def clip_at_node_with_a_post_hook(y, limit):
    def clip(grad_inputs, grad_outputs):
        return tuple(None if g is None else g.clamp(-limit, limit) for g in grad_inputs)

    return y.grad_fn.register_hook(clip)


@answer("02.2", mistake="wrong-hook-kind", says="uses a tensor hook on y instead of a pre-hook on y.grad_fn, so "
        "retain_grad records the clipped gradient")
def clip_at_node_with_a_tensor_hook(y, limit):
    return y.register_hook(lambda grad: grad.clamp(-limit, limit))


@answer("02.2", mistake="in-place-grad", says="clamps grad_outputs[0] in place (clamp_) inside the pre-hook and "
        "returns None")
def clip_at_node_in_place(y, limit):
    def clip(grad_outputs):
        grad_outputs[0].clamp_(-limit, limit)

    return y.grad_fn.register_prehook(clip)


@answer("02.2", mistake="wrong-target", says="puts the pre-hook on the next node (y.grad_fn.next_functions[0][0]) "
        "instead of y.grad_fn, so it clips the gradient of y's input rather than of y")
def clip_at_node_on_the_next_node(y, limit):
    node = y.grad_fn.next_functions[0][0]
    return node.register_prehook(lambda grad_outputs: tuple(g.clamp(-limit, limit) for g in grad_outputs))


@answer("02.2", mistake="no-return", says="registers the pre-hook but does not return its handle")
def clip_at_node_without_the_handle(y, limit):
    y.grad_fn.register_prehook(lambda grad_outputs: (grad_outputs[0].clamp(-limit, limit),))


# --- 02.3: Adam inside backward, from post-accumulate hooks ----------------------------------------------------------


@answer("02.3", right=True)
def train_in_backward_with_a_dict_of_optimizers(model, X, Y, steps, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in params}

    def step_now(param):
        optimizers[param].step()
        param.grad = None

    losses = []
    with hooklab.HookScope() as scope:
        for p in params:
            scope.add(p.register_post_accumulate_grad_hook(step_now))
        for _ in range(steps):
            loss = F.cross_entropy(model(X), Y)
            losses.append(loss.item())
            loss.backward()
    return losses


class _StepInBackward:
    """One Adam per parameter; called by the parameter's post-accumulate hook."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __call__(self, param):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


@answer("02.3", right=True)
def train_in_backward_with_callable_steppers_and_handles(model, X, Y, steps, lr):
    handles = []
    for p in model.parameters():
        if p.requires_grad:
            handles.append(p.register_post_accumulate_grad_hook(_StepInBackward(torch.optim.Adam([p], lr=lr))))
    losses = []
    try:
        for _ in range(steps):
            loss = F.cross_entropy(model(X), Y)
            loss.backward()
            losses.append(float(loss.detach()))
    finally:
        for handle in handles:
            handle.remove()
    return losses


@answer("02.3", mistake="stale-state", says="never frees param.grad after the step, so each backward adds its "
        "gradient to the previous steps' and Adam steps on the running sum")
def train_in_backward_without_freeing_the_grad(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}
    losses = []
    with hooklab.HookScope() as scope:
        for p in model.parameters():
            scope.add(p.register_post_accumulate_grad_hook(lambda param: optimizers[param].step()))
        for _ in range(steps):
            loss = F.cross_entropy(model(X), Y)
            losses.append(loss.item())
            loss.backward()
    return losses


@answer("02.3", mistake="detach-or-graph", says="zeroes param.grad in place (zero_grad(set_to_none=False)) instead "
        "of freeing it, so every parameter keeps a .grad tensor and the peak is not one parameter")
def train_in_backward_zeroing_instead_of_freeing(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}

    def step_now(param):
        optimizers[param].step()
        optimizers[param].zero_grad(set_to_none=False)

    losses = []
    with hooklab.HookScope() as scope:
        for p in model.parameters():
            scope.add(p.register_post_accumulate_grad_hook(step_now))
        for _ in range(steps):
            loss = F.cross_entropy(model(X), Y)
            losses.append(loss.item())
            loss.backward()
    return losses


@answer("02.3", mistake="shape-or-dtype", says="returns the loss tensors themselves (with their graphs) instead of "
        "numbers")
def train_in_backward_returning_loss_tensors(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}

    def step_now(param):
        optimizers[param].step()
        param.grad = None

    losses = []
    with hooklab.HookScope() as scope:
        for p in model.parameters():
            scope.add(p.register_post_accumulate_grad_hook(step_now))
        for _ in range(steps):
            loss = F.cross_entropy(model(X), Y)
            loss.backward()
            losses.append(loss)
    return losses


@answer("02.3", mistake="handle-left", says="registers the post-accumulate hooks and never removes them, so the "
        "model keeps stepping its Adams in every later backward")
def train_in_backward_leaving_the_hooks(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}

    def step_now(param):
        optimizers[param].step()
        param.grad = None

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(X), Y)
        losses.append(loss.item())
        loss.backward()
    return losses


@answer("02.3", mistake="logic", says="records the loss computed again after the update instead of the loss of each "
        "step before its update")
def train_in_backward_recording_the_loss_after_the_step(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}

    def step_now(param):
        optimizers[param].step()
        param.grad = None

    losses = []
    with hooklab.HookScope() as scope:
        for p in model.parameters():
            scope.add(p.register_post_accumulate_grad_hook(step_now))
        for _ in range(steps):
            F.cross_entropy(model(X), Y).backward()
            with torch.no_grad():
                losses.append(F.cross_entropy(model(X), Y).item())
    return losses
