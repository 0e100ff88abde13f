"""Honest answers to notebook 00's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

import hooklab
from tools.classroom.panel import answer

# --- 00.1: count the zeros of the ReLU's output with a forward hook -------------------------------------------------


@answer("00.1", right=True)
def count_relu_zeros_with_a_scope(model, x):
    seen = {}

    def count_zeros(module, args, output):
        seen["zeros"] = int((output == 0).sum())

    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(count_zeros))
        model(x)
    return seen["zeros"]


@answer("00.1", right=True)
def count_relu_zeros_with_a_callable_class_and_try_finally(model, x):
    class ZeroCounter:
        def __init__(self):
            self.zeros = 0

        def __call__(self, module, args, output):
            self.zeros += (output == 0).sum().item()

    counter = ZeroCounter()
    handle = model[1].register_forward_hook(counter)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return int(counter.zeros)


@answer("00.1", mistake="handle-left", says="the forward hook is registered and its handle is never removed, so the "
        "hook stays on the ReLU after the function returns")
def count_relu_zeros_without_removing_the_hook(model, x):
    counts = []

    def count_zeros(module, args, output):
        counts.append(int((output == 0).sum()))

    model[1].register_forward_hook(count_zeros)
    model(x)
    return counts[-1]


@answer("00.1", mistake="wrong-target", says="the hook is put on the first Linear (model[0]) instead of the ReLU, "
        "so it counts the zeros of the Linear's output")
def count_relu_zeros_on_the_linear(model, x):
    seen = {}
    with hooklab.HookScope() as scope:
        scope.add(model[0].register_forward_hook(lambda m, args, out: seen.update(zeros=int((out == 0).sum()))))
        model(x)
    return seen["zeros"]


@answer("00.1", mistake="returns-input", says="the forward hook returns the count, which replaces the ReLU's output "
        "(the next Linear gets a scalar) instead of only being recorded")
def count_relu_zeros_returned_from_the_hook(model, x):
    def count_zeros(module, args, output):
        return (output == 0).sum()

    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(count_zeros))
        zeros = model(x)
    return int(zeros)


@answer("00.1", mistake="shape-or-dtype", says="returns the count as a 0-dim tensor instead of a Python int")
def count_relu_zeros_as_a_tensor(model, x):
    seen = {}
    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(lambda m, args, out: seen.update(zeros=(out == 0).sum())))
        model(x)
    return seen["zeros"]


@answer("00.1", mistake="wrong-hook-kind", says="a forward pre-hook looks at the ReLU's input, where almost no "
        "element is exactly 0, instead of a forward hook on its output")
def count_relu_zeros_with_a_pre_hook(model, x):
    seen = {}

    def count_zeros(module, args):
        seen["zeros"] = int((args[0] == 0).sum())

    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_pre_hook(count_zeros))
        model(x)
    return seen["zeros"]


@answer("00.1", mistake="logic", says="returns the fraction of zeros (a mean) instead of their number")
def count_relu_zeros_as_a_fraction(model, x):
    seen = {}
    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(
            lambda m, args, out: seen.update(zeros=(out == 0).float().mean().item())))
        model(x)
    return seen["zeros"]


# --- 00.2: the firing order of four hooks -----------------------------------------------------------------------------


@answer("00.2", right=True, built=True)
def order_node_hooks_then_the_leaf():
    # loss.grad_fn (SumBackward0) runs first: its pre- then post-hook; then w's gradient arrives:
    # the tensor hook before accumulation, the post-accumulate hook after it
    return ["node_pre", "node_post", "tensor", "post_accumulate_grad"]


@answer("00.2", mistake="logic", built=True, says="puts w's two hooks first, in registration order, as if the leaf's "
        "hooks fired before the loss's Node")
def order_leaf_hooks_first():
    return ["tensor", "post_accumulate_grad", "node_pre", "node_post"]


@answer("00.2", mistake="logic", built=True, says="puts the tensor hook after the post-accumulate hook, as if the "
        "tensor hook acted on w.grad once it was accumulated")
def order_tensor_hook_after_accumulation():
    return ["node_pre", "node_post", "post_accumulate_grad", "tensor"]


@answer("00.2", mistake="logic", built=True, says="puts the tensor hook on w before the Node's hooks, reading "
        "'tensor hooks run first' as a rule across different tensors")
def order_tensor_hook_before_everything():
    return ["tensor", "node_pre", "node_post", "post_accumulate_grad"]


@answer("00.2", mistake="count", built=True, says="lists only three of the four names, leaving out the Node's "
        "post-hook")
def order_missing_the_node_post_hook():
    return ["node_pre", "tensor", "post_accumulate_grad"]


# --- 00.3: count the tensors saved for backward ----------------------------------------------------------------------


@answer("00.3", right=True)
def count_saved_with_a_counting_pack_hook(model, x):
    count = 0

    def pack(tensor):
        nonlocal count
        count += 1
        return tensor

    def unpack(tensor):
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        model(x)
    return count


@answer("00.3", right=True)
def count_saved_with_a_list_of_shapes(model, x):
    saved = []

    def pack(tensor):
        saved.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return len(saved)


@answer("00.3", mistake="wrong-hook-kind", says="counts in the unpack hook, which only runs during backward, so "
        "after a forward alone the count is 0")
def count_saved_in_the_unpack_hook(model, x):
    unpacked = []

    def unpack(tensor):
        unpacked.append(1)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        model(x)
    return len(unpacked)


@answer("00.3", mistake="detach-or-graph", says="detaches the input before the forward pass, so the tensors saved "
        "because the input requires grad are never saved")
def count_saved_on_a_detached_input(model, x):
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x.detach())
    return len(saved)


SAVED = []  # the learner's list, at the top of the cell


@answer("00.3", mistake="stale-state", says="appends to a list defined outside the function and never cleared, so "
        "each call returns the running total of every call so far")
def count_saved_into_a_global_list(model, x):
    def pack(tensor):
        SAVED.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return len(SAVED)


@answer("00.3", mistake="count", says="counts distinct tensors by id, so a tensor saved by two operations (the "
        "input of several ops, a shared weight) is counted once")
def count_saved_distinct_tensors(model, x):
    ids = set()

    def pack(tensor):
        ids.add(id(tensor))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return len(ids)


@answer("00.3", mistake="no-return", says="counts the packed tensors correctly but never returns the count")
def count_saved_without_returning(model, x):
    count = [0]

    def pack(tensor):
        count[0] += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    print("saved:", count[0])
