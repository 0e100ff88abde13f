"""Honest answers to notebook 04's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch
from torchvision.models.resnet import BasicBlock

import hooklab
from tools.classroom.panel import answer

# --- 04.1: a full backward hook that clamps grad_input ---------------------------------------------------------------


@answer("04.1", right=True)
def clip_grad_input_with_a_tuple_comprehension(module, grad_input, grad_output):
    return tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)


@answer("04.1", right=True)
def clip_grad_input_with_a_loop_into_a_list(module, grad_input, grad_output):
    clipped = []
    for g in grad_input:
        if g is not None:
            g = torch.clamp(g, min=-0.1, max=0.1)
        clipped.append(g)
    return clipped


@answer("04.1", mistake="other", says="calls clamp on every entry of grad_input, which fails on the None entry of an "
        "argument that is not a tensor")
def clip_grad_input_without_handling_none(module, grad_input, grad_output):
    return tuple(g.clamp(-0.1, 0.1) for g in grad_input)


@answer("04.1", mistake="shape-or-dtype", says="drops the None entries, so the returned tuple is shorter than "
        "grad_input")
def clip_grad_input_dropping_the_nones(module, grad_input, grad_output):
    return tuple(g.clamp(-0.1, 0.1) for g in grad_input if g is not None)


@answer("04.1", mistake="shape-or-dtype", says="returns a bare tensor (the first entry clamped) instead of a tuple "
        "as long as grad_input")
def clip_grad_input_returning_a_tensor(module, grad_input, grad_output):
    return grad_input[0].clamp(-0.1, 0.1)


@answer("04.1", mistake="in-place-grad", says="clamps the entries of grad_input in place (clamp_) and returns None "
        "instead of returning new tensors")
def clip_grad_input_in_place(module, grad_input, grad_output):
    for g in grad_input:
        if g is not None:
            g.clamp_(-0.1, 0.1)


@answer("04.1", mistake="wrong-target", says="clamps grad_output and returns it in place of grad_input")
def clip_grad_input_from_grad_output(module, grad_input, grad_output):
    return tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_output)


@answer("04.1", mistake="no-return", says="builds the clamped tuple but does not return it, so grad_input is left "
        "unchanged")
def clip_grad_input_without_returning(module, grad_input, grad_output):
    grad_input = tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)


# --- 04.2: predict the factors of a pre-hook and a backward hook on fc2 ---------------------------------------------


@answer("04.2", right=True, built=True)
def factors_pre_hook_scales_everything_backward_hook_spares_fc2():
    # the pre-hook halves grad_output: fc2 computes its own weight gradient from it, and everything before it too;
    # the backward hook halves only grad_input, which flows back to fc1 and x, not fc2's parameters
    return {
        "pre-hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
        "backward hook on fc2": {"fc2.weight.grad": 1.0, "fc1.weight.grad": 0.5, "x.grad": 0.5},
    }


@answer("04.2", mistake="logic", built=True, says="has the backward hook halve fc2.weight.grad too, as if grad_input "
        "held the module's parameter gradients")
def factors_backward_hook_halving_the_weight():
    return {
        "pre-hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
        "backward hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
    }


@answer("04.2", mistake="wrong-hook-kind", built=True, says="swaps the two hooks: gives the pre-hook the effect of "
        "the backward hook and the other way round")
def factors_with_the_hooks_swapped():
    return {
        "pre-hook on fc2": {"fc2.weight.grad": 1.0, "fc1.weight.grad": 0.5, "x.grad": 0.5},
        "backward hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
    }


@answer("04.2", mistake="logic", built=True, says="has the pre-hook change only fc2's own weight gradient, as if "
        "the halved grad_output did not flow on to fc1 and x")
def factors_pre_hook_only_on_fc2():
    return {
        "pre-hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 1.0, "x.grad": 1.0},
        "backward hook on fc2": {"fc2.weight.grad": 1.0, "fc1.weight.grad": 0.5, "x.grad": 0.5},
    }


@answer("04.2", mistake="logic", built=True, says="has the backward hook change x.grad only, as if grad_input went "
        "straight to the model's input and skipped fc1's weight")
def factors_backward_hook_only_on_x():
    return {
        "pre-hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
        "backward hook on fc2": {"fc2.weight.grad": 1.0, "fc1.weight.grad": 1.0, "x.grad": 0.5},
    }


# --- 04.3: the gradient norm at each BasicBlock's output, in firing order --------------------------------------------


@answer("04.3", right=True)
def block_grad_norms_with_a_scope(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                def record(m, grad_input, grad_output, name=name):
                    norms.append((name, grad_output[0].norm().item()))
                scope.add(module.register_full_backward_hook(record))
        model(x).sum().backward()
    return norms


class _NormRecorder:
    def __init__(self, name, rows):
        self.name, self.rows = name, rows

    def __call__(self, module, grad_input, grad_output):
        self.rows.append((self.name, float(torch.linalg.vector_norm(grad_output[0]))))


@answer("04.3", right=True)
def block_grad_norms_with_callable_recorders(model, x):
    rows = []
    blocks = [(name, m) for name, m in model.named_modules() if isinstance(m, BasicBlock)]
    handles = [m.register_full_backward_hook(_NormRecorder(name, rows)) for name, m in blocks]
    try:
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return rows


@answer("04.3", mistake="handle-left", says="never removes the full backward hooks it registers on the blocks")
def block_grad_norms_leaving_the_hooks(model, x):
    norms = []
    for name, module in model.named_modules():
        if isinstance(module, BasicBlock):
            module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.append((name, go[0].norm().item())))
    model(x).sum().backward()
    return norms


@answer("04.3", mistake="wrong-target", says="records the norm of grad_input[0] (the gradient at the block's "
        "input) instead of grad_output[0]")
def block_grad_norms_of_grad_input(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: norms.append((name, gi[0].norm().item()))))
        model(x).sum().backward()
    return norms


@answer("04.3", mistake="logic", says="returns the blocks in named_modules() order (input to output) instead of the "
        "order the hooks fired in")
def block_grad_norms_in_module_order(model, x):
    found = {}
    names = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                names.append(name)
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: found.__setitem__(name, go[0].norm().item())))
        model(x).sum().backward()
    return [(name, found[name]) for name in names]


@answer("04.3", mistake="late-registration", says="registers the full backward hooks after the forward pass, so "
        "they never fire and the list stays empty")
def block_grad_norms_registered_after_forward(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        out = model(x)
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: norms.append((name, go[0].norm().item()))))
        out.sum().backward()
    return norms


@answer("04.3", mistake="logic", says="records the squared norm (the sum of squares) instead of the norm")
def block_grad_norms_squared(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: norms.append((name, go[0].pow(2).sum().item()))))
        model(x).sum().backward()
    return norms


@answer("04.3", mistake="other", says="uses the late-bound loop variable name inside the hook, so every row carries "
        "the last block's name")
def block_grad_norms_with_late_binding(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go: norms.append((name, go[0].norm().item()))))  # noqa: B023 - the learner's bug
        model(x).sum().backward()
    return norms
