"""Honest answers to notebook 15's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

from tools.classroom.panel import answer

# ---------------------------------------------------------------- 15.1: which modules really ran


@answer("15.1", right=True)
def modules_that_ran_with_a_global_pre_hook(model, run):
    from torch.nn.modules.module import register_module_forward_pre_hook

    names = {module: name for name, module in model.named_modules()}  # the model's own modules, not copies
    called = []

    def note(module, args):
        if module in names:
            called.append(names[module])

    handle = register_module_forward_pre_hook(note)  # global: does not turn fast paths off, not copied
    try:
        run()
    finally:
        handle.remove()
    return called


@answer("15.1", right=True)
def modules_that_ran_with_a_recorder_class(model, run):
    from torch.nn.modules.module import register_module_forward_pre_hook

    class CallLog:
        def __init__(self, model):
            self.names = {module: name for name, module in model.named_modules()}
            self.calls = []

        def __call__(self, module, args):
            if module in self.names:
                self.calls.append(self.names[module])

        def __enter__(self):
            self.handle = register_module_forward_pre_hook(self)
            return self

        def __exit__(self, *exc):
            self.handle.remove()

    with CallLog(model) as log:
        run()
    return log.calls


@answer("15.1", mistake="wrong-hook-kind",
        says="puts a local forward pre-hook on every module instead of one global hook: local hooks switch "
             "nn.TransformerEncoderLayer's fast path off and are copied with the model, so copies' calls count too")
def modules_that_ran_with_local_hooks(model, run):
    import hooklab

    called = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            scope.add(module.register_forward_pre_hook(lambda module, args, name=name: called.append(name)))
        run()
    return called


@answer("15.1", mistake="count",
        says="keeps each module's name once (a dict of names in first-call order), so a module called twice appears "
             "once")
def modules_that_ran_once_each(model, run):
    from torch.nn.modules.module import register_module_forward_pre_hook

    names = {module: name for name, module in model.named_modules()}
    called = {}

    def note(module, args):
        if module in names:
            called.setdefault(names[module], True)

    handle = register_module_forward_pre_hook(note)
    try:
        run()
    finally:
        handle.remove()
    return list(called)


@answer("15.1", mistake="global-state",
        says="registers the global forward pre-hook and never removes it, so it keeps running on every module of "
             "the process afterwards")
def modules_that_ran_leaving_the_global_hook(model, run):
    from torch.nn.modules.module import register_module_forward_pre_hook

    names = {module: name for name, module in model.named_modules()}
    called = []
    register_module_forward_pre_hook(lambda module, args: called.append(names[module]) if module in names else None)
    run()
    return called


@answer("15.1", mistake="detach-or-graph",
        says="runs run() under torch.no_grad() to be safe, which changes what run() does: no graph is built and a "
             "backward inside it fails")
def modules_that_ran_under_no_grad(model, run):
    from torch.nn.modules.module import register_module_forward_pre_hook

    names = {module: name for name, module in model.named_modules()}
    called = []

    def note(module, args):
        if module in names:
            called.append(names[module])

    handle = register_module_forward_pre_hook(note)
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    return called


# ---------------------------------------------------------------- 15.2: how often each observer was called


def _is_observer(name):
    return name.rsplit(".", 1)[-1].startswith("activation_post_process")


@answer("15.2", right=True)
def observer_calls_with_a_hook_scope(prepared, calibrate):
    import hooklab

    counts = {name: 0 for name, _ in prepared.named_modules() if _is_observer(name)}

    def bump(name):
        def hook(module, args, output):
            counts[name] += 1
        return hook

    with hooklab.HookScope() as scope:
        for name, module in prepared.named_modules():
            if name in counts:
                scope.add(module.register_forward_hook(bump(name)))
        calibrate()
    return counts


@answer("15.2", right=True)
def observer_calls_with_a_global_hook(prepared, calibrate):
    from collections import Counter

    from torch.nn.modules.module import register_module_forward_pre_hook

    observers = {module: name for name, module in prepared.named_modules() if _is_observer(name)}
    seen = Counter()
    handle = register_module_forward_pre_hook(
        lambda module, args: seen.update([observers[module]]) if module in observers else None)
    try:
        calibrate()
    finally:
        handle.remove()
    return {name: seen[name] for name in observers.values()}


@answer("15.2", mistake="wrong-target",
        says="selects observers with name.endswith('activation_post_process'), the eager-mode names, so the "
             "numbered observers of a graph module (activation_post_process_0, ...) are missed")
def observer_calls_eager_names_only(prepared, calibrate):
    counts = {name: 0 for name, _ in prepared.named_modules() if name.endswith("activation_post_process")}
    handles = []
    for name, module in prepared.named_modules():
        if name in counts:
            handles.append(module.register_forward_hook(
                lambda module, args, output, name=name: counts.__setitem__(name, counts[name] + 1)))
    try:
        calibrate()
    finally:
        for handle in handles:
            handle.remove()
    return counts


@answer("15.2", mistake="count",
        says="builds the dict from the calls it saw, so an observer that never ran is missing instead of being "
             "there with 0")
def observer_calls_leaving_out_the_idle_ones(prepared, calibrate):
    counts = {}
    handles = []
    for name, module in prepared.named_modules():
        if _is_observer(name):
            handles.append(module.register_forward_hook(
                lambda module, args, output, name=name: counts.__setitem__(name, counts.get(name, 0) + 1)))
    try:
        calibrate()
    finally:
        for handle in handles:
            handle.remove()
    return counts


@answer("15.2", mistake="handle-left",
        says="registers a counting forward hook on every observer and never removes them, so the hooks stay on the "
             "prepared model")
def observer_calls_leaving_the_hooks(prepared, calibrate):
    counts = {name: 0 for name, _ in prepared.named_modules() if _is_observer(name)}
    for name, module in prepared.named_modules():
        if name in counts:
            module.register_forward_hook(
                lambda module, args, output, name=name: counts.__setitem__(name, counts[name] + 1))
    calibrate()
    return counts


@answer("15.2", mistake="count",
        says="the lambda made in the loop uses the loop variable name, bound late, so every observer's calls are "
             "counted under the last observer's name")
def observer_calls_with_a_late_bound_name(prepared, calibrate):
    counts = {name: 0 for name, _ in prepared.named_modules() if _is_observer(name)}
    handles = []
    for name, module in prepared.named_modules():
        if name in counts:
            handles.append(module.register_forward_hook(
                lambda module, args, output: counts.__setitem__(name, counts[name] + 1)))  # noqa: B023
    try:
        calibrate()
    finally:
        for handle in handles:
            handle.remove()
    return counts


@answer("15.2", mistake="count",
        says="sets an observer's entry to 1 when it runs instead of adding 1, so it records whether each observer "
             "ran, not how often")
def observer_calls_marking_instead_of_counting(prepared, calibrate):
    counts = {name: 0 for name, _ in prepared.named_modules() if _is_observer(name)}
    handles = []
    for name, module in prepared.named_modules():
        if name in counts:
            handles.append(module.register_forward_hook(
                lambda module, args, output, name=name: counts.__setitem__(name, 1)))
    try:
        calibrate()
    finally:
        for handle in handles:
            handle.remove()
    return counts


# ---------------------------------------------------------------- 15.3: the adapter's contribution


@answer("15.3", right=True)
def adapter_output_from_lora_b(model, name, x):
    layer = model.get_submodule(name)
    adapter = layer.active_adapters[0]  # not always called "default"
    got = {}

    def keep(module, args, output):
        got["delta"] = layer.scaling[adapter] * output  # lora_B's output is not scaled yet

    handle = layer.lora_B[adapter].register_forward_hook(keep)
    try:
        model(x)
    finally:
        handle.remove()
    return got["delta"]


@answer("15.3", right=True)
def adapter_output_as_a_difference(model, name, x):
    import hooklab

    layer = model.get_submodule(name)
    outputs = {}
    with hooklab.HookScope() as scope:
        scope.add(layer.register_forward_hook(lambda m, args, out: outputs.__setitem__("lora", out)))
        scope.add(layer.base_layer.register_forward_hook(lambda m, args, out: outputs.__setitem__("base", out)))
        model(x)
    return outputs["lora"] - outputs["base"]  # base + scaling * lora_B(lora_A(dropout(x))), minus base


@answer("15.3", mistake="wrong-target",
        says="hooks lora_B['default'] by name, so it fails for an adapter that is not called 'default'")
def adapter_output_assuming_default(model, name, x):
    layer = model.get_submodule(name)
    got = {}
    handle = layer.lora_B["default"].register_forward_hook(
        lambda m, args, out: got.__setitem__("delta", layer.scaling["default"] * out))
    try:
        model(x)
    finally:
        handle.remove()
    return got["delta"]


@answer("15.3", mistake="logic",
        says="returns lora_B's output without multiplying it by the adapter's scaling (lora_alpha / r)")
def adapter_output_without_scaling(model, name, x):
    layer = model.get_submodule(name)
    adapter = layer.active_adapters[0]
    got = {}
    handle = layer.lora_B[adapter].register_forward_hook(lambda m, args, out: got.__setitem__("delta", out))
    try:
        model(x)
    finally:
        handle.remove()
    return got["delta"]


@answer("15.3", mistake="logic",
        says="captures the layer's input with a hook and recomputes scaling * lora_B(lora_A(x)) afterwards, leaving "
             "out the dropout the forward pass applied, so in training mode it is not the part that was added")
def adapter_output_recomputed_without_dropout(model, name, x):
    layer = model.get_submodule(name)
    adapter = layer.active_adapters[0]
    got = {}
    handle = layer.register_forward_pre_hook(lambda m, args: got.__setitem__("input", args[0]))
    try:
        model(x)
    finally:
        handle.remove()
    return layer.scaling[adapter] * layer.lora_B[adapter](layer.lora_A[adapter](got["input"]))


@answer("15.3", mistake="wrong-target",
        says="returns the output of the LoRA layer itself, which is the base output plus the adapter's part, not the "
             "adapter's part alone")
def adapter_output_of_the_whole_layer(model, name, x):
    layer = model.get_submodule(name)
    got = {}
    handle = layer.register_forward_hook(lambda m, args, out: got.__setitem__("out", out))
    try:
        model(x)
    finally:
        handle.remove()
    return got["out"]


@answer("15.3", mistake="handle-left",
        says="registers the forward hook on lora_B and never removes it, so the hook stays on the model")
def adapter_output_leaving_the_hook(model, name, x):
    layer = model.get_submodule(name)
    adapter = layer.active_adapters[0]
    got = {}
    layer.lora_B[adapter].register_forward_hook(
        lambda m, args, out: got.__setitem__("delta", layer.scaling[adapter] * out))
    model(x)
    return got["delta"]
