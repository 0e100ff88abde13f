"""Honest answers to notebook 08's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import functools

import torch
from torch import nn

import hooklab
from tools.classroom.panel import answer

# --- 08.1: hooks registered in a loop: {layer name: output shape} --------------------------------------------------


@answer("08.1", right=True)
def linear_output_shapes_with_partial(model, x):
    shapes = {}

    def record(name, module, args, out):
        shapes[name] = tuple(out.shape)

    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(functools.partial(record, name)))
        model(x)
    return shapes


@answer("08.1", right=True)
def linear_output_shapes_with_a_default_argument(model, x):
    shapes = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return shapes


@answer("08.1", right=True)
def linear_output_shapes_with_a_hook_factory(model, x):
    shapes = {}

    def make_hook(name):
        def hook(module, args, out):
            shapes[name] = tuple(out.shape)
        return hook

    handles = [module.register_forward_hook(make_hook(name))
               for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    model(x)
    for handle in handles:
        handle.remove()
    return shapes


@answer("08.1", mistake="logic", says="the lambda reads the loop variable `name` when it runs, after the loop has "
        "ended, so every layer's shape is stored under the last layer's name")
def linear_output_shapes_with_a_late_bound_lambda(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(
                    lambda m, args, out: shapes.__setitem__(name, tuple(out.shape))))  # noqa: B023
        model(x)
    return shapes


@answer("08.1", mistake="handle-left", says="throws away the handles that register_forward_hook returns, so the hooks "
        "stay on the model after the function returns")
def linear_output_shapes_without_removing(model, x):
    shapes = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(functools.partial(
                lambda name, m, args, out: shapes.__setitem__(name, tuple(out.shape)), name))
    model(x)
    return shapes


@answer("08.1", mistake="wrong-target", says="loops over named_children() instead of named_modules(), so Linear "
        "layers nested inside submodules are never hooked")
def linear_output_shapes_over_children_only(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_children():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(
                    lambda m, args, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
        model(x)
    return shapes


@answer("08.1", mistake="logic", says="records the shape of the layer's input (args[0]) instead of its output")
def linear_output_shapes_of_the_inputs(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(
                    lambda m, args, out, name=name: shapes.__setitem__(name, tuple(args[0].shape))))
        model(x)
    return shapes


@answer("08.1", mistake="wrong-target", says="hooks every module, not only the nn.Linear ones, so activations, "
        "containers and the model itself appear in the dict too")
def linear_output_shapes_of_every_module(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            scope.add(module.register_forward_hook(
                lambda m, args, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
        model(x)
    return shapes


# --- 08.2: a counting hook that survives re-running the cell -------------------------------------------------------


@answer("08.2", right=True)
def install_call_counter_with_named_scope(model, counts):
    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    scope = hooklab.named_scope(f"call-counter-{id(model)}")  # asking again removes the previous run's hook
    scope.add(model.register_forward_hook(count))


@answer("08.2", right=True)
def install_call_counter_keeping_the_handle_on_the_model(model, counts):
    old = getattr(model, "_call_counter_handle", None)
    if old is not None:
        old.remove()

    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    model._call_counter_handle = model.register_forward_hook(count)


@answer("08.2", right=True)
def install_call_counter_with_a_function_attribute(model, counts):
    previous = getattr(install_call_counter_with_a_function_attribute, "handle", None)
    if previous is not None:
        previous.remove()  # what the previous run of the cell registered

    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    install_call_counter_with_a_function_attribute.handle = model.register_forward_hook(count)


@answer("08.2", mistake="re-registered", says="registers a new hook on every call and never removes the previous one, "
        "so after running the cell twice each forward pass counts 2")
def install_call_counter_stacking(model, counts):
    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    model.register_forward_hook(count)


@answer("08.2", mistake="re-registered", says="checks whether its hook is already registered by function identity, "
        "but the hook is redefined on every call, so the check never matches and the hooks stack")
def install_call_counter_checking_identity(model, counts):
    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    if count not in model._forward_hooks.values():
        model.register_forward_hook(count)


@answer("08.2", mistake="other", says="clears model._forward_hooks before registering, which also removes the hook "
        "someone else had put on the model")
def install_call_counter_clearing_all_hooks(model, counts):
    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    model._forward_hooks.clear()
    model.register_forward_hook(count)


@answer("08.2", mistake="logic", says="registers only when the model has no forward hook at all, so on a model that "
        "already carries someone else's hook the counter is never installed")
def install_call_counter_only_on_a_bare_model(model, counts):
    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    if not model._forward_hooks:
        model.register_forward_hook(count)


@answer("08.2", mistake="other", says="registers the hook inside a `with HookScope()` block, which removes it when "
        "the function returns, so nothing counts afterwards")
def install_call_counter_in_a_scope(model, counts):
    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1

    with hooklab.HookScope() as scope:
        scope.add(model.register_forward_hook(count))


# --- 08.3: keep the ReLU outputs, not the graph -------------------------------------------------------------------


@answer("08.3", right=True)
def keep_relu_outputs_detached_clones(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, args, out: kept.append(out.detach().clone())))
        model(x)
    return kept


@answer("08.3", right=True)
def keep_relu_outputs_under_no_grad(model, x):
    kept = []

    def keep(module, args, out):
        kept.append(out.clone())

    handles = [m.register_forward_hook(keep) for m in model.modules() if isinstance(m, nn.ReLU)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return kept


@answer("08.3", mistake="detach-or-graph", says="keeps the outputs themselves, which still carry their grad_fn and "
        "keep the whole graph alive")
def keep_relu_outputs_attached(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, args, out: kept.append(out)))
        model(x)
    return kept


@answer("08.3", mistake="detach-or-graph", says="keeps out.detach() without clone(), which shares memory with the "
        "output, so the later in-place op rewrites the kept values")
def keep_relu_outputs_detached_only(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, args, out: kept.append(out.detach())))
        model(x)
    return kept


@answer("08.3", mistake="stale-state", says="stores the outputs in a dict keyed by layer name, so a ReLU module "
        "called twice keeps only its last call and the list loses the first one")
def keep_relu_outputs_by_name(model, x):
    kept = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(
                    lambda m, args, out, name=name: kept.__setitem__(name, out.detach().clone())))
        model(x)
    return list(kept.values())


@answer("08.3", mistake="handle-left", says="registers the forward hooks without keeping their handles, so they stay "
        "on the model after the function returns")
def keep_relu_outputs_leaving_hooks(model, x):
    kept = []
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.register_forward_hook(lambda m, args, out: kept.append(out.detach().clone()))
    model(x)
    return kept


@answer("08.3", mistake="logic", says="clones the ReLU's input (args[0]) instead of its output, so the negative "
        "values the ReLU zeroed are kept")
def keep_relu_outputs_of_the_inputs(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, args, out: kept.append(args[0].detach().clone())))
        model(x)
    return kept


@answer("08.3", mistake="returns-input", says="the hook returns the detached clone it keeps, which replaces the "
        "ReLU's output and cuts every earlier layer off from the graph")
def keep_relu_outputs_returning_the_copy(model, x):
    kept = []

    def keep(module, args, out):
        kept.append(out.detach().clone())
        return kept[-1]

    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(keep))
        model(x)
    return kept


# --- 08.4: a tensor hook that halves the gradient ------------------------------------------------------------------


@answer("08.4", right=True)
def halve_by_multiplying(grad):
    return grad * 0.5


@answer("08.4", right=True)
def halve_with_torch_div(grad):
    return torch.div(grad, 2)


@answer("08.4", mistake="in-place-grad", says="halves grad in place and returns nothing; the add's backward hands "
        "the same tensor to b, so b's gradient is halved too")
def halve_in_place(grad):
    grad *= 0.5


@answer("08.4", mistake="in-place-grad", says="returns grad.div_(2), an in-place edit of the gradient tensor that "
        "the sibling input b shares")
def halve_with_div_(grad):
    return grad.div_(2)


@answer("08.4", mistake="no-return", says="computes grad / 2 but does not return it, so the gradient is unchanged")
def halve_without_return(grad):
    halved = grad / 2  # noqa: F841 - the learner forgot the return


@answer("08.4", mistake="shape-or-dtype", says="reads 'halve' as half precision and returns grad.half(), a float16 "
        "tensor with unchanged values, which the hook may not return for a float32 gradient")
def halve_as_half_precision(grad):
    return grad.half()


@answer("08.4", mistake="logic", says="returns grad * 2, doubling the gradient instead of halving it")
def halve_doubling(grad):
    return grad * 2
