"""Notebook 13's checkers accept right answers written differently and reject the typical wrong ones."""
import gc

import pytest
import torch

from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import verdict as full_verdict


def message(key, answer):
    import hooklab.course.exercises
    status, zh, en, _ = hooklab.course.exercises.verdict(key, answer)
    assert status == "wrong" and zh and zh != en
    return en


# ---- 13.1 the first module that makes NaN/inf ---------------------------------------------------

def by_global_hook(model, x, bad=lambda t: not torch.isfinite(t).all()):  # right too: a global hook, its own counter
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names = {m: n for n, m in model.named_modules() if n}
    calls, found = {}, []

    def pre(m, args):
        if m in names:
            calls[names[m]] = calls.get(names[m], 0) + 1

    def post(m, args, out):
        outs = out if isinstance(out, tuple) else (out,)
        if m in names and not found and any(bad(t) for t in outs):
            found.append((names[m], calls[names[m]]))

    handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return found[0]


def in_named_modules_order(model, x):  # the classic mistake: look at modules in definition order
    outs = {}
    handles = [m.register_forward_hook(lambda m, a, o, n=n: outs.setdefault(n, o)) for n, m in model.named_modules() if n]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    for name, _ in model.named_modules():
        o = outs.get(name)
        if isinstance(o, torch.Tensor) and not torch.isfinite(o).all():
            return name, 1
    return None


def last_call_only(model, x):  # counts nothing: always says call 1
    name, _ = by_global_hook(model, x)
    return name, 1


def leaves_hooks(model, x):
    found = []
    for n, m in model.named_modules():
        if n:
            m.register_forward_hook(lambda m, a, o, n=n: found.append(n) if isinstance(o, torch.Tensor)
                                    and not torch.isfinite(o).all() else None)
    model(x)
    return found[0], 1


def by_inputs_per_module(model, x):  # each call's input checked: names the module after the producer
    calls, found, handles = {}, [], []

    def check(name):
        def pre(module, args):
            calls[name] = calls.get(name, 0) + 1
            if not found and any(isinstance(a, torch.Tensor) and not torch.isfinite(a).all() for a in args):
                found.append((name, calls[name]))
        return pre

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_pre_hook(check(name)))
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None


def blank(*args):  # the starting point of every exercise here
    pass


def test_13_1():
    assert verdict("13.1", run_solution("13.1")["first_nonfinite"]) == "correct"
    assert verdict("13.1", by_global_hook) == "correct"
    assert judged("13.1", blank) == ("not solved", "blank")


def name_only(model, x):
    return by_global_hook(model, x)[0]


def nan_only(model, x):  # looks for NaN only: misses the inf of exp(exp(5))
    return by_global_hook(model, x, bad=lambda t: torch.isnan(t).any())


def first_of_a_tuple(model, x):
    """isfinite on every output, but of a tuple output only ``output[0]`` (the review's answer)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names = {m: n for n, m in model.named_modules() if n}
    calls, found = {}, []

    def pre(m, args):
        if m in names:
            calls[names[m]] = calls.get(names[m], 0) + 1

    def post(m, args, out):
        first = out[0] if isinstance(out, tuple) else out
        if m in names and not found and not torch.isfinite(first).all():
            found.append((names[m], calls[names[m]]))

    handles = [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return found[0]


def test_13_1_a_tuple_checked_at_output_0_only_is_told_so():
    """Review round 5: this answer uses isfinite, and was told "`torch.isnan` misses inf, use `torch.isfinite`"."""
    result = full_verdict("13.1", first_of_a_tuple)
    assert (result.status, result.reason) == ("wrong", "tuple-element"), result
    assert "Check every element of a tuple output, not only `output[0]`" in result.en and "isnan" not in result.en
    assert "元组输出要检查每一个元素" in result.zh
    assert "`torch.isnan` misses inf" in full_verdict("13.1", nan_only).en  # the isnan answer is still told that


@pytest.mark.parametrize("answer, reason", [
    (in_named_modules_order, "module"), (last_call_only, "call-number"), (leaves_hooks, "hook-left"),
    (nan_only, "inf-missed"), (first_of_a_tuple, "tuple-element"), (by_inputs_per_module, "checked-inputs"),
    (name_only, "not-a-pair"), (3, "not-a-function")])
def test_13_1_rejects_wrong_answers(answer, reason):
    assert judged("13.1", answer) == ("wrong", reason)


def test_13_1_names_what_is_wrong():
    assert "not in `named_modules()` order" in message("13.1", in_named_modules_order)
    assert "it is its call 2, not 1" in message("13.1", last_call_only)
    assert "`torch.isnan` misses inf" in message("13.1", nan_only)


def test_13_1_speaks_chinese_in_chinese():  # the zh verdict names the case in Chinese, not in English
    import hooklab.course.exercises
    zh = hooklab.course.exercises.verdict("13.1", in_named_modules_order).zh
    assert zh.startswith("一个调用顺序与定义顺序不同的模型") and "a model called" not in zh


# ---- 13.2 counting hooks without a reference cycle ---------------------------------------------

def via_closure(model):  # the closure refers to the model: a cycle
    counts = {}
    names = {id(m): n for n, m in model.named_modules() if n}

    def hook(module, args, output):
        assert model is not None
        counts[names[id(module)]] = counts.get(names[id(module)], 0) + 1

    for n, m in model.named_modules():
        if n:
            m.register_forward_hook(hook)
    return counts


class Counter:
    def __init__(self, model):
        self.model, self.counts = model, {}
        self.names = {id(m): n for n, m in model.named_modules() if n}
        for n, m in model.named_modules():
            if n:
                m.register_forward_hook(self.hook)  # a bound method: the model holds self, self holds the model

    def hook(self, module, args, output):
        self.counts[self.names[id(module)]] = self.counts.get(self.names[id(module)], 0) + 1


def via_bound_method(model):
    return Counter(model).counts


def via_weakref(model):  # right: a weak reference does not keep the model alive
    import weakref
    ref, counts = weakref.ref(model), {}

    def hook(module, args, output):
        name = next(n for n, m in ref().named_modules() if m is module)
        counts[name] = counts.get(name, 0) + 1

    for n, m in model.named_modules():
        if n:
            m.register_forward_hook(hook)
    return counts


def keyed_by_submodule(model):  # frees the model, but each submodule holds the hook, which holds the submodules
    counts, names = {}, {m: n for n, m in model.named_modules() if n}

    def hook(module, args, output):
        counts[names[module]] = counts.get(names[module], 0) + 1

    for m in names:
        m.register_forward_hook(hook)
    return counts


def counts_once(model):
    counts = {}
    for n, m in model.named_modules():
        if n:
            m.register_forward_hook(lambda mod, a, o, n=n: counts.__setitem__(n, 1))
    return counts


def test_13_2():
    assert verdict("13.2", run_solution("13.2")["count_calls"]) == "correct"
    assert verdict("13.2", via_weakref) == "correct"
    assert judged("13.2", blank) == ("not solved", "blank")
    assert gc.isenabled()


def counts_as_list(model):
    return [run_solution("13.2")["count_calls"](model)]


def counts_written_by_hand(model):
    """The counts a learner saw once, typed in: no hook counts anything."""
    return {"0": 2, "1": 2, "2": 2}


@pytest.mark.parametrize("answer, reason", [
    (via_closure, "cycle"), (via_bound_method, "cycle"), (keyed_by_submodule, "submodule-cycle"),
    (counts_once, "counts"), (counts_as_list, "not-a-dict"), (counts_written_by_hand, "no-hook"),
    ("counts", "not-a-function")])
def test_13_2_rejects_wrong_answers(answer, reason):
    assert judged("13.2", answer) == ("wrong", reason)
    assert gc.isenabled()


def test_13_2_names_what_is_wrong_and_restores_the_collector():
    assert "reference cycle" in message("13.2", via_closure)
    assert "reference cycle" in message("13.2", via_bound_method)
    assert "the counts should be" in message("13.2", counts_once)
    assert "0.weight" in message("13.2", keyed_by_submodule) and "the model itself is freed" in message(
        "13.2", keyed_by_submodule)
    assert gc.isenabled()


# ---- 13.3 the first Node with a NaN gradient, and the module that created it ---------------------

def _walk(out):
    nodes, todo, seen = [], [out.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return nodes


def _bad(grads):
    return any(g is not None and not torch.isfinite(g).all() for g in grads)


def by_creation_hook(model, x):  # right too: a node-creation hook books each Node to the module running
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names, running, owner, found = {m: n for n, m in model.named_modules()}, [], {}, []

    def leave(module, args, output):  # returns None (a returned "" would replace the model's output)
        running.pop()

    handles = [register_module_forward_pre_hook(lambda m, a: running.append(names.get(m, "?"))),
               register_module_forward_hook(leave)]
    try:
        with torch.autograd.graph.node_creation_hook(lambda node: owner.__setitem__(node, running[-1])):
            out = model(x)
    finally:
        for h in handles:
            h.remove()
    hooks = [node.register_hook(lambda gi, go, node=node: found.append((node.name(), owner[node]))
                                if not found and _bad(gi) else None) for node in owner]
    try:
        out.sum().backward()
    finally:
        for h in hooks:
            h.remove()
    return found[0] if found else None


def _post_hook_answer(pick, module_of=lambda node, owners: owners.get(node, "")):
    """Records (name, computed bad, received bad, module) per Node in backward order, then picks one; modules from
    forward hooks that claim every unclaimed Node reachable from their output (no stop at the inputs)."""
    def answer(model, x):
        owners, handles = {}, []

        def claim(name):
            def hook(module, args, output):
                for node in _walk(output):
                    owners.setdefault(node, name)
            return hook
        handles += [m.register_forward_hook(claim(n)) for n, m in model.named_modules()]
        out = model(x)
        seen = []
        handles += [node.register_hook(lambda gi, go, node=node: seen.append((node.name(), _bad(gi), _bad(go),
                                                                               module_of(node, owners))))
                    for node in _walk(out)]
        try:
            out.sum().backward()
        finally:
            for h in handles:
                h.remove()
        return pick(seen)
    return answer


first_computed = lambda seen: next(((n, m) for n, computed, _, m in seen if computed), None)  # noqa: E731
# claims without stopping at the inputs: a Node made in the model's own forward goes to the next submodule
no_input_boundary = _post_hook_answer(first_computed)
# looks at the gradients a Node received: names the Node after the producer
checks_received = _post_hook_answer(lambda seen: next(((n, m) for n, _, received, m in seen if received), None))
# keeps the last Node that computed a bad gradient, not the first
last_bad = _post_hook_answer(lambda seen: ([(n, m) for n, computed, _, m in seen if computed] or [None])[-1])
# books every Node to the model itself
all_to_the_model = _post_hook_answer(first_computed, module_of=lambda node, owners: "")


def name_only(model, x):
    found = run_solution("13.3")["first_nan_node"](model, x)
    return found and found[0]


def test_13_3():
    assert verdict("13.3", run_solution("13.3")["first_nan_node"]) == "correct"
    assert verdict("13.3", by_creation_hook) == "correct"
    assert judged("13.3", blank) == ("not solved", "blank")
    assert judged("13.3", None) == ("not solved", "blank")


def names_a_node_always(model, x):  # right where a NaN appears, but also names one where none does
    return run_solution("13.3")["first_nan_node"](model, x) or ("TanhBackward0", "1")


@pytest.mark.parametrize("answer, reason", [
    (checks_received, "node"), (last_bad, "node"), (names_a_node_always, "expected-none"),
    (no_input_boundary, "module"), (all_to_the_model, "module"), (name_only, "not-a-pair")])
def test_13_3_rejects_wrong_answers(answer, reason):
    assert judged("13.3", answer) == ("wrong", reason)


def test_13_3_names_what_is_wrong():
    assert "not those it received" in message("13.3", checks_received)
    assert "not those it received" in message("13.3", last_bad)
    assert "created by the forward of the model itself" in message("13.3", no_input_boundary)
    assert "created by the forward of '1'" in message("13.3", all_to_the_model)


# ---- 13.4 the gradients of a module that returns a dict -----------------------------------------

def by_capture_dict(module, store):  # right too: the tensors' hooks built in a loop over items, with a helper
    def keep(key):
        return lambda grad: store.update({key: grad})

    def hook(module, args, output):
        for key in output:
            output[key].register_hook(keep(key))
    return module.register_forward_hook(hook)


def full_backward_hook(module, store):  # never fires for a dict output
    return module.register_full_backward_hook(lambda m, gi, go: store.update(grads=go))


def late_binding(module, store):  # every hook stores under the last key
    def hook(module, args, output):
        for key, tensor in output.items():
            tensor.register_hook(lambda grad: store.__setitem__(key, grad))
    return module.register_forward_hook(hook)


def closure_in_a_loop(module, store):  # a def in the loop reads `name` when it runs: the last key by then
    def hook(module, args, output):
        for name in output:
            def keep(grad):
                store[name] = grad  # noqa: B023
            output[name].register_hook(keep)
    return module.register_forward_hook(hook)


def doubles_in_place(module, store):  # an in-place edit that returns None still changes the gradient
    def hook(module, args, output):
        for key, tensor in output.items():
            def keep(grad, key=key):
                store[key] = grad.clone()
                grad.mul_(2)                   # in place, and returns None
            tensor.register_hook(keep)
    return module.register_forward_hook(hook)


def by_position(module, store):
    def hook(module, args, output):
        for i, tensor in enumerate(output.values()):
            tensor.register_hook(lambda grad, i=i: store.__setitem__(i, grad))
    return module.register_forward_hook(hook)


def stores_output(module, store):  # the output, not its gradient
    def hook(module, args, output):
        store.update({k: v.detach() for k, v in output.items()})
    return module.register_forward_hook(hook)


def extra_hook_kept(module, store):  # a second forward hook, not covered by the handle returned
    module.register_forward_hook(lambda m, a, o: None)
    return run_solution("13.4")["watch_output_grads"](module, store)


def raises_in_backward(module, store):
    def hook(module, args, output):
        for tensor in output.values():
            tensor.register_hook(lambda grad: 1 / 0)
    return module.register_forward_hook(hook)


def no_return(module, store):
    run_solution("13.4")["watch_output_grads"](module, store)


def accumulates(module, store):  # as .grad does: after the second backward store holds the sum of both
    def hook(module, args, output):
        for key, tensor in output.items():
            tensor.register_hook(lambda grad, key=key: store.__setitem__(key, store.get(key, 0) + grad))
    return module.register_forward_hook(hook)


def returns_the_tensor_hooks_handles(module, store):  # a list, filled as backward runs: list.remove takes an item
    handles = []

    def hook(module, args, output):
        for key, tensor in output.items():
            handles.append(tensor.register_hook(lambda grad, key=key: store.__setitem__(key, grad)))
    module.register_forward_hook(hook)
    return handles


def test_13_4():
    assert verdict("13.4", run_solution("13.4")["watch_output_grads"]) == "correct"
    assert verdict("13.4", by_capture_dict) == "correct"
    assert judged("13.4", blank) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (full_backward_hook, "full-backward-hook"), (late_binding, "late-bound-key"),
    (closure_in_a_loop, "late-bound-key"), (doubles_in_place, "changed-gradient"),
    (by_position, "keys"), (stores_output, "wrong-grad"), (extra_hook_kept, "handle-missing"),
    (no_return, "returned-none"), (lambda module, store: "handle", "not-a-handle"),
    (returns_the_tensor_hooks_handles, "not-a-handle"), (accumulates, "accumulated"),
    (raises_in_backward, "raised-in-backward")])
def test_13_4_rejects_wrong_answers(answer, reason):
    assert judged("13.4", answer) == ("wrong", reason)


def test_13_4_names_what_is_wrong():
    assert "never fire" in message("13.4", full_backward_hook)
    assert "returns None" in message("13.4", doubles_in_place)
