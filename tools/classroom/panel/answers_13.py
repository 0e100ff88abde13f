"""Honest answers to notebook 13's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

from tools.classroom.panel import answer


def _tensors(value):
    """The tensors of a module's output: a tensor, or the tensors of a (possibly nested) tuple or list."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _all_finite(value):
    return all(bool(torch.isfinite(t).all()) for t in _tensors(value))


# ---------------------------------------------------------------- 13.1: find the producer


@answer("13.1", right=True)
def first_nonfinite_with_a_global_hook(model, x):
    from torch.nn.modules.module import register_module_forward_hook

    names = {module: name for name, module in model.named_modules() if name}  # the model itself not counted
    calls = {}
    found = []

    def check(module, args, output):
        if module not in names:
            return
        name = names[module]
        calls[name] = calls.get(name, 0) + 1
        if not found and not _all_finite(output):
            found.append((name, calls[name]))

    handle = register_module_forward_hook(check)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return found[0] if found else None


@answer("13.1", right=True)
def first_nonfinite_with_local_hooks(model, x):
    import contextlib

    class FirstBad:
        def __init__(self):
            self.calls, self.first = {}, None

        def hook_for(self, name):
            def hook(module, args, output):
                self.calls[name] = self.calls.get(name, 0) + 1
                if self.first is None and not _all_finite(output):
                    self.first = (name, self.calls[name])
            return hook

    watch = FirstBad()
    with contextlib.ExitStack() as stack:
        for name, module in model.named_modules():
            if name:
                stack.callback(module.register_forward_hook(watch.hook_for(name)).remove)
        with torch.no_grad():
            model(x)
    return watch.first


@answer("13.1", mistake="logic",
        says="records which modules ended with a non-finite output, then picks the first of them in named_modules() "
             "(definition) order instead of call order")
def first_nonfinite_in_definition_order(model, x):
    bad, calls, handles = {}, {}, []
    for name, module in model.named_modules():
        if not name:
            continue

        def hook(module, args, output, name=name):
            calls[name] = calls.get(name, 0) + 1
            if name not in bad and not _all_finite(output):
                bad[name] = calls[name]
        handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    for name, _ in model.named_modules():
        if name in bad:
            return name, bad[name]
    return None


@answer("13.1", mistake="logic",
        says="checks only outputs that are a single tensor and skips tuple outputs, so a module whose tuple holds the "
             "first non-finite value is passed over")
def first_nonfinite_ignoring_tuples(model, x):
    from torch.nn.modules.module import register_module_forward_hook

    names = {module: name for name, module in model.named_modules() if name}
    calls, found = {}, []

    def check(module, args, output):
        if module not in names:
            return
        name = names[module]
        calls[name] = calls.get(name, 0) + 1
        if not found and isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
            found.append((name, calls[name]))

    handle = register_module_forward_hook(check)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return found[0] if found else None


@answer("13.1", mistake="count",
        says="numbers the calls of all modules together (the position of the call in the whole forward) instead of "
             "the calls of that one module")
def first_nonfinite_counting_all_calls_together(model, x):
    from torch.nn.modules.module import register_module_forward_hook

    names = {module: name for name, module in model.named_modules() if name}
    seen, found = [], []

    def check(module, args, output):
        if module not in names:
            return
        seen.append(names[module])
        if not found and not _all_finite(output):
            found.append((names[module], len(seen)))

    handle = register_module_forward_hook(check)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return found[0] if found else None


@answer("13.1", mistake="wrong-hook-kind",
        says="uses a global forward pre-hook that checks each module's inputs, so it names the first module that "
             "received a non-finite value (the one after the producer) instead of the one whose output held it")
def first_nonfinite_checking_inputs(model, x):
    from torch.nn.modules.module import register_module_forward_pre_hook

    names = {module: name for name, module in model.named_modules() if name}
    calls, found = {}, []

    def check(module, args):
        if module not in names:
            return
        name = names[module]
        calls[name] = calls.get(name, 0) + 1
        if not found and not _all_finite(args):
            found.append((name, calls[name]))

    handle = register_module_forward_pre_hook(check)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return found[0] if found else None


@answer("13.1", mistake="global-state",
        says="registers a global forward hook (register_module_forward_hook) and never removes it, so it stays on "
             "every module of the process after the function returns")
def first_nonfinite_leaving_the_global_hook(model, x):
    from torch.nn.modules.module import register_module_forward_hook

    names = {module: name for name, module in model.named_modules() if name}
    calls, found = {}, []

    def check(module, args, output):
        if module not in names:
            return
        name = names[module]
        calls[name] = calls.get(name, 0) + 1
        if not found and not _all_finite(output):
            found.append((name, calls[name]))

    register_module_forward_hook(check)
    with torch.no_grad():
        model(x)
    return found[0] if found else None


# ---------------------------------------------------------------- 13.2: a hook without a reference cycle


@answer("13.2", right=True)
def count_calls_with_default_arguments(model):
    counts = {}
    for name, module in model.named_modules():
        if not name:
            continue
        counts[name] = 0
        module.register_forward_hook(
            lambda module, args, output, name=name: counts.__setitem__(name, counts[name] + 1))
    return counts


@answer("13.2", right=True)
def count_calls_with_partial(model):
    import functools

    def bump(counts, name, module, args, output):
        counts[name] += 1

    counts = {name: 0 for name, _ in model.named_modules() if name}
    for name, module in model.named_modules():
        if name:
            module.register_forward_hook(functools.partial(bump, counts, name))
    return counts


@answer("13.2", mistake="other",
        says="the hook looks its name up in a {module: name} dict held by the closure; that dict refers to every "
             "submodule, so each module -> hook -> dict -> module is a reference cycle and del model frees nothing")
def count_calls_with_a_module_to_name_dict(model):
    names = {module: name for name, module in model.named_modules() if name}
    counts = dict.fromkeys(names.values(), 0)

    def count(module, args, output):
        counts[names[module]] += 1

    for module in names:
        module.register_forward_hook(count)
    return counts


@answer("13.2", mistake="other",
        says="the hook finds the module's name through model.named_modules(), so the closure refers to the model: a "
             "reference cycle that keeps it alive after del model")
def count_calls_looking_names_up_on_the_model(model):
    counts = {name: 0 for name, _ in model.named_modules() if name}

    def count(module, args, output):
        for name, candidate in model.named_modules():
            if candidate is module:
                counts[name] += 1

    for name, module in model.named_modules():
        if name:
            module.register_forward_hook(count)
    return counts


@answer("13.2", mistake="wrong-target",
        says="registers the counting hook on model.named_modules() including the model itself, so the dict also "
             "counts the model under the name ''")
def count_calls_including_the_model(model):
    counts = {}
    for name, module in model.named_modules():
        counts[name] = 0
        module.register_forward_hook(
            lambda module, args, output, name=name: counts.__setitem__(name, counts[name] + 1))
    return counts


@answer("13.2", mistake="count",
        says="the lambda made in the loop uses the loop variable name, bound late, so every call is counted under "
             "the last module's name")
def count_calls_with_a_late_bound_name(model):
    counts = {}
    for name, module in model.named_modules():
        if not name:
            continue
        counts[name] = 0
        module.register_forward_hook(lambda module, args, output: counts.__setitem__(name, counts[name] + 1))  # noqa: B023
    return counts


# ---------------------------------------------------------------- 13.3: the first Node that makes a NaN gradient


def _walk(start, stop=()):
    """Every Node reachable from `start` through next_functions, not going through the Nodes in `stop`."""
    todo, seen = [start], []
    while todo:
        node = todo.pop()
        if node is None or node in seen or node in stop:
            continue
        seen.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return seen


@answer("13.3", right=True)
def first_nan_node_claiming_nodes_by_module(model, x):
    names = {module: name for name, module in model.named_modules()}
    owner = {}  # Node -> name of the innermost module whose forward created it

    def claim(module, args, output):
        stop = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
        for out in _tensors(output):
            if out.grad_fn is not None:
                for node in _walk(out.grad_fn, stop):
                    owner.setdefault(node, names[module])  # inner modules finish first and claim first

    module_handles = [m.register_forward_hook(claim) for m in model.modules()]
    try:
        loss = model(x).sum()
    finally:
        for handle in module_handles:
            handle.remove()
    first = []

    def check(node, grad_inputs):
        if not first and not _all_finite(grad_inputs):
            first.append(node)

    node_handles = [node.register_hook(lambda grad_inputs, grad_outputs, node=node: check(node, grad_inputs))
                    for node in _walk(loss.grad_fn)]
    try:
        loss.backward()
    finally:
        for handle in node_handles:
            handle.remove()
    if not first:
        return None
    return first[0].name(), owner.get(first[0], "")


@answer("13.3", right=True)
def first_nan_node_with_a_node_creation_hook(model, x):
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    import hooklab

    names = {module: name for name, module in model.named_modules()}
    stack, created_in = [], {}

    def enter(module, args):
        if module in names:
            stack.append(names[module])

    def leave(module, args, output):
        if module in names:
            stack.pop()

    def label(node):
        created_in[node] = stack[-1] if stack else None

    with hooklab.HookScope() as scope:
        scope.add(register_module_forward_pre_hook(enter))
        scope.add(register_module_forward_hook(leave))
        with torch.autograd.graph.node_creation_hook(label):
            out = model(x)
    loss = out.sum()
    first = []
    with hooklab.HookScope() as scope:
        for node in _walk(loss.grad_fn):
            scope.add(node.register_hook(
                lambda grad_inputs, grad_outputs, node=node: first.append(node)
                if not first and not _all_finite(grad_inputs) else None))
        loss.backward()
    if not first:
        return None
    return first[0].name(), created_in.get(first[0]) or ""


@answer("13.3", mistake="wrong-hook-kind",
        says="checks the gradients each Node receives with Node pre-hooks (grad_outputs) instead of what it "
             "computes, so it names the Node after the one that made the NaN")
def first_nan_node_with_pre_hooks(model, x):
    names = {module: name for name, module in model.named_modules()}
    owner = {}

    def claim(module, args, output):
        stop = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
        for out in _tensors(output):
            if out.grad_fn is not None:
                for node in _walk(out.grad_fn, stop):
                    owner.setdefault(node, names[module])

    module_handles = [m.register_forward_hook(claim) for m in model.modules()]
    try:
        loss = model(x).sum()
    finally:
        for handle in module_handles:
            handle.remove()
    first = []
    node_handles = []
    for node in _walk(loss.grad_fn):
        node_handles.append(node.register_prehook(
            lambda grad_outputs, node=node: first.append(node) if not first and not _all_finite(grad_outputs)
            else None))
    try:
        loss.backward()
    finally:
        for handle in node_handles:
            handle.remove()
    return (first[0].name(), owner.get(first[0], "")) if first else None


@answer("13.3", mistake="logic",
        says="credits to a module every new Node reachable from its output without stopping at its inputs, so a "
             "square root the parent takes between two submodules is credited to the submodule after it")
def first_nan_node_claiming_past_the_inputs(model, x):
    names = {module: name for name, module in model.named_modules()}
    owner = {}

    def claim(module, args, output):
        for out in _tensors(output):
            if out.grad_fn is not None:
                for node in _walk(out.grad_fn):
                    owner.setdefault(node, names[module])

    module_handles = [m.register_forward_hook(claim) for m in model.modules()]
    try:
        loss = model(x).sum()
    finally:
        for handle in module_handles:
            handle.remove()
    first = []
    node_handles = [node.register_hook(
        lambda grad_inputs, grad_outputs, node=node: first.append(node)
        if not first and not _all_finite(grad_inputs) else None) for node in _walk(loss.grad_fn)]
    try:
        loss.backward()
    finally:
        for handle in node_handles:
            handle.remove()
    return (first[0].name(), owner.get(first[0], "")) if first else None


@answer("13.3", mistake="logic",
        says="overwrites the answer at every Node that computed a non-finite gradient, so it returns the last one "
             "backward reached instead of the first")
def first_nan_node_keeping_the_last(model, x):
    names = {module: name for name, module in model.named_modules()}
    owner = {}

    def claim(module, args, output):
        stop = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
        for out in _tensors(output):
            if out.grad_fn is not None:
                for node in _walk(out.grad_fn, stop):
                    owner.setdefault(node, names[module])

    module_handles = [m.register_forward_hook(claim) for m in model.modules()]
    try:
        loss = model(x).sum()
    finally:
        for handle in module_handles:
            handle.remove()
    found = {}

    def check(node, grad_inputs):
        if not _all_finite(grad_inputs):
            found["node"] = node

    node_handles = [node.register_hook(lambda grad_inputs, grad_outputs, node=node: check(node, grad_inputs))
                    for node in _walk(loss.grad_fn)]
    try:
        loss.backward()
    finally:
        for handle in node_handles:
            handle.remove()
    return (found["node"].name(), owner.get(found["node"], "")) if found else None


@answer("13.3", mistake="handle-left",
        says="removes the Node hooks after backward but never the forward hooks it put on every module, so they "
             "stay on the model")
def first_nan_node_leaving_the_module_hooks(model, x):
    names = {module: name for name, module in model.named_modules()}
    owner = {}

    def claim(module, args, output):
        stop = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
        for out in _tensors(output):
            if out.grad_fn is not None:
                for node in _walk(out.grad_fn, stop):
                    owner.setdefault(node, names[module])

    for module in model.modules():
        module.register_forward_hook(claim)
    loss = model(x).sum()
    first = []
    node_handles = [node.register_hook(
        lambda grad_inputs, grad_outputs, node=node: first.append(node)
        if not first and not _all_finite(grad_inputs) else None) for node in _walk(loss.grad_fn)]
    try:
        loss.backward()
    finally:
        for handle in node_handles:
            handle.remove()
    return (first[0].name(), owner.get(first[0], "")) if first else None


# ---------------------------------------------------------------- 13.4: the gradients of a dict output


@answer("13.4", right=True)
def watch_output_grads_with_tensor_hooks(module, store):
    handle = None

    def keep(key):
        def tensor_hook(grad):
            if handle.id in module._forward_hooks:  # the forward hook removed: record nothing more
                store[key] = grad.detach()
        return tensor_hook  # returns None: the gradient is unchanged

    def on_output(mod, args, output):
        for key, value in output.items():
            if isinstance(value, torch.Tensor) and value.requires_grad:
                value.register_hook(keep(key))

    handle = module.register_forward_hook(on_output)
    return handle


@answer("13.4", right=True)
def watch_output_grads_with_a_recorder_class(module, store):
    class OutputGrads:
        def __init__(self, store):
            self.store, self.handle = store, None

        def __call__(self, mod, args, output):
            for key, value in output.items():
                if torch.is_tensor(value) and value.requires_grad:
                    value.register_hook(lambda grad, key=key: self.record(mod, key, grad))

        def record(self, mod, key, grad):
            if self.handle is not None and self.handle.id in mod._forward_hooks:
                self.store[key] = grad.clone()

    recorder = OutputGrads(store)
    recorder.handle = module.register_forward_hook(recorder)
    return recorder.handle


@answer("13.4", mistake="wrong-hook-kind",
        says="uses a module backward pre-hook, which like the full backward hook is never called for a module that "
             "returns a dict, so nothing is ever recorded")
def watch_output_grads_with_a_backward_pre_hook(module, store):
    keys = []

    def note_keys(mod, args, output):
        keys[:] = list(output)

    def record(mod, grad_output):
        for key, grad in zip(keys, grad_output):
            store[key] = grad

    handle = module.register_forward_hook(note_keys)
    module.register_full_backward_pre_hook(record)
    return handle


@answer("13.4", mistake="wrong-target",
        says="the tensor hooks made in the loop use the loop variable key, bound late, so every gradient is stored "
             "under the last key of the dict")
def watch_output_grads_with_a_late_bound_key(module, store):
    def on_output(mod, args, output):
        for key, value in output.items():
            if value.requires_grad:
                value.register_hook(lambda grad: store.__setitem__(key, grad))  # noqa: B023

    return module.register_forward_hook(on_output)


@answer("13.4", mistake="handle-left",
        says="returns the handles of the tensor hooks instead of the forward hook's handle, so removing what it "
             "returned leaves the forward hook registered and recording goes on")
def watch_output_grads_returning_the_tensor_handles(module, store):
    tensor_handles = []

    def on_output(mod, args, output):
        for key, value in output.items():
            if value.requires_grad:
                tensor_handles.append(value.register_hook(lambda grad, key=key: store.__setitem__(key, grad)))

    module.register_forward_hook(on_output)
    return tensor_handles


@answer("13.4", mistake="stale-state",
        says="adds each backward's gradient onto what store already holds, as .grad accumulates, so after the "
             "second backward store[key] is a sum instead of that backward's gradient")
def watch_output_grads_accumulating(module, store):
    def on_output(mod, args, output):
        for key, value in output.items():
            if value.requires_grad:
                value.register_hook(lambda grad, key=key: store.__setitem__(key, store.get(key, 0) + grad))

    return module.register_forward_hook(on_output)
