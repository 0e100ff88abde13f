"""Honest answers to notebook 03's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import inspect
from collections import Counter

import torch.nn.modules.module as module_globals

import hooklab
from tools.classroom.panel import answer

# --- 03.1: clamp a Linear's input with a forward pre-hook ------------------------------------------------------------


@answer("03.1", right=True)
def clamp_inputs_with_a_lambda(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: (args[0].clamp(low, high), *args[1:]))


@answer("03.1", right=True)
def clamp_inputs_returning_a_single_tensor(module, low, high):
    def clamp_first(mod, args):
        return args[0].clamp(min=low, max=high)  # a single tensor: PyTorch wraps it into (tensor,)

    return module.register_forward_pre_hook(clamp_first)


@answer("03.1", right=True)
def clamp_inputs_with_kwargs_too(module, low, high):
    def clamp_input(mod, args, kwargs):
        if args:
            return (args[0].clamp(low, high), *args[1:]), kwargs
        return args, {**kwargs, "input": kwargs["input"].clamp(low, high)}

    return module.register_forward_pre_hook(clamp_input, with_kwargs=True)


@answer("03.1", mistake="returns-input", says="the pre-hook clamps a copy and returns the original input")
def clamp_inputs_returning_the_input(module, low, high):
    def clamp_first(mod, args):
        clamped = args[0].clamp(low, high)  # noqa: F841 - computed, then the original is returned
        return args

    return module.register_forward_pre_hook(clamp_first)


@answer("03.1", mistake="other", says="clamps the input in place (clamp_), which overwrites the caller's x")
def clamp_inputs_in_place(module, low, high):
    def clamp_first(mod, args):
        args[0].clamp_(low, high)

    return module.register_forward_pre_hook(clamp_first)


@answer("03.1", mistake="wrong-hook-kind", says="registers a forward hook that clamps the output instead of a "
        "forward pre-hook that clamps the input")
def clamp_inputs_with_a_forward_hook(module, low, high):
    return module.register_forward_hook(lambda m, args, output: output.clamp(low, high))


@answer("03.1", mistake="wrong-hook-kind", says="registers a global forward pre-hook, which clamps the first input "
        "of every module in the process, instead of a pre-hook on this module")
def clamp_inputs_with_a_global_pre_hook(module, low, high):
    return module_globals.register_module_forward_pre_hook(lambda m, args: (args[0].clamp(low, high), *args[1:]))


@answer("03.1", mistake="wrong-signature", says="writes the pre-hook with a forward hook's signature (module, args, "
        "output), so calling it with (module, args) raises a TypeError")
def clamp_inputs_with_a_forward_hook_signature(module, low, high):
    def clamp_first(mod, args, output):
        return (args[0].clamp(low, high),)

    return module.register_forward_pre_hook(clamp_first)


@answer("03.1", mistake="no-return", says="registers the pre-hook but does not return its handle")
def clamp_inputs_without_the_handle(module, low, high):
    module.register_forward_pre_hook(lambda m, args: (args[0].clamp(low, high),))


@answer("03.1", mistake="logic", says="passes low and high to clamp in the wrong order (min=high, max=low), so every "
        "element becomes low")
def clamp_inputs_with_the_bounds_swapped(module, low, high):
    return module.register_forward_pre_hook(lambda m, args: (args[0].clamp(high, low),))


# --- 03.2: double c, passed positionally or as a keyword -------------------------------------------------------------


@answer("03.2", right=True)
def double_c_by_position_or_keyword(module, args, kwargs):
    if len(args) > 2:
        return (*args[:2], args[2] * 2, *args[3:]), kwargs
    return args, {**kwargs, "c": kwargs["c"] * 2}


@answer("03.2", right=True)
def double_c_checking_the_kwargs_first(module, args, kwargs):
    if "c" in kwargs:
        new_kwargs = dict(kwargs)
        new_kwargs["c"] = kwargs["c"] * 2
        return args, new_kwargs
    new_args = list(args)
    new_args[2] = new_args[2] * 2
    return tuple(new_args), kwargs


@answer("03.2", right=True)
def double_c_with_inspect_bind(module, args, kwargs):
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.arguments["c"] = bound.arguments["c"] * 2
    return bound.args, bound.kwargs


@answer("03.2", mistake="logic", says="handles only c passed as a keyword; with c passed positionally kwargs has no "
        "'c' and the hook raises a KeyError")
def double_c_only_as_a_keyword(module, args, kwargs):
    return args, {**kwargs, "c": kwargs["c"] * 2}


@answer("03.2", mistake="returns-input", says="returns only the new args, where a with_kwargs pre-hook must return "
        "(new_args, new_kwargs)")
def double_c_returning_only_args(module, args, kwargs):
    if len(args) > 2:
        return (*args[:2], args[2] * 2)
    kwargs["c"] = kwargs["c"] * 2
    return args


@answer("03.2", mistake="other", says="doubles c in place (*=), which changes the caller's c tensor, so c is doubled "
        "again at every call")
def double_c_in_place(module, args, kwargs):
    if "c" in kwargs:
        kwargs["c"] *= 2
    else:
        args[2].mul_(2)


@answer("03.2", mistake="wrong-target", says="doubles the last positional argument when there is one, which is a or "
        "b when c is passed as a keyword")
def double_c_doubling_the_last_positional(module, args, kwargs):
    if args:
        return (*args[:-1], args[-1] * 2), kwargs
    return args, {**kwargs, "c": kwargs["c"] * 2}


@answer("03.2", mistake="no-return", says="builds the new args and kwargs but returns None, so nothing is replaced")
def double_c_without_returning(module, args, kwargs):
    if len(args) > 2:
        args = (*args[:2], args[2] * 2, *args[3:])
    else:
        kwargs = {**kwargs, "c": kwargs["c"] * 2}


# --- 03.3: count the calls of each module class with a global forward hook -------------------------------------------


@answer("03.3", right=True)
def count_calls_with_a_counter_and_a_scope(model, x):
    counts = Counter()
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(
            lambda m, args, output: counts.update([type(m).__name__])))
        model(x)
    return dict(counts)


@answer("03.3", right=True)
def count_calls_with_try_finally(model, x):
    counts = {}

    def count(module, args, output):
        name = module.__class__.__name__
        counts[name] = counts.get(name, 0) + 1

    handle = module_globals.register_module_forward_hook(count)
    try:
        model(x)
    finally:
        handle.remove()
    return counts


@answer("03.3", right=True)
def count_calls_with_a_named_scope(model, x):
    counts = Counter()
    scope = hooklab.named_scope("count-calls")
    scope.add(module_globals.register_module_forward_hook(lambda m, args, out: counts.update([type(m).__name__])))
    try:
        model(x)
    finally:
        scope.remove()
    return dict(counts)


@answer("03.3", mistake="handle-left", says="registers the global forward hook and never removes it, so it stays "
        "on every module of the process")
def count_calls_leaving_the_global_hook(model, x):
    counts = Counter()
    module_globals.register_module_forward_hook(lambda m, args, output: counts.update([type(m).__name__]))
    model(x)
    return dict(counts)


@answer("03.3", mistake="count", says="counts the modules of model.modules() instead of the calls, so a module "
        "called twice counts once and a module never called still counts")
def count_calls_from_the_module_list(model, x):
    model(x)
    return dict(Counter(type(m).__name__ for m in model.modules()))


@answer("03.3", mistake="wrong-target", says="puts local forward hooks on model.children() only, so the model "
        "itself and any nested submodule are not counted")
def count_calls_on_the_children(model, x):
    counts = Counter()
    with hooklab.HookScope() as scope:
        for child in model.children():
            scope.add(child.register_forward_hook(lambda m, args, output: counts.update([type(m).__name__])))
        model(x)
    return dict(counts)


CALLS = Counter()  # the learner's counter, at the top of the cell


@answer("03.3", mistake="stale-state", says="counts into a Counter defined outside the function and never reset, "
        "so every call adds to the counts of the earlier calls")
def count_calls_into_a_global_counter(model, x):
    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(
            lambda m, args, output: CALLS.update([type(m).__name__])))
        model(x)
    return dict(CALLS)


@answer("03.3", mistake="other", says="keys the dict by the module classes themselves instead of their names")
def count_calls_keyed_by_class(model, x):
    counts = {}

    def count(module, args, output):
        counts[type(module)] = counts.get(type(module), 0) + 1

    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(count))
        model(x)
    return counts
