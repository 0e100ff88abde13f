"""Notebook 13's checkers accept right answers written differently and reject the typical wrong ones."""
import gc

import pytest
import torch

from exercise_support import judged, run_solution, verdict


def message(key, answer):
    import hooklab.course.exercises
    status, zh, en, _ = hooklab.course.exercises.verdict(key, answer)
    assert status == "wrong" and zh and zh != en
    return en


# ---- 13.1 the first module that makes NaN/inf ---------------------------------------------------

def by_global_hook(model, x):  # right too: a global hook with its own call counter
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names = {m: n for n, m in model.named_modules() if n}
    calls, found = {}, []

    def pre(m, args):
        if m in names:
            calls[names[m]] = calls.get(names[m], 0) + 1

    def post(m, args, out):
        outs = out if isinstance(out, tuple) else (out,)
        if m in names and not found and any(not torch.isfinite(t).all() for t in outs):
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


def blank(model, x):
    pass


def test_13_1():
    assert verdict("13.1", run_solution("13.1")["first_nonfinite"]) == "correct"
    assert verdict("13.1", by_global_hook) == "correct"
    assert judged("13.1", blank) == ("not solved", "blank")


def name_only(model, x):
    return by_global_hook(model, x)[0]


@pytest.mark.parametrize("answer, reason", [
    (in_named_modules_order, "module"), (last_call_only, "call-number"), (leaves_hooks, "hook-left"),
    (name_only, "not-a-pair"), (3, "not-a-function")])
def test_13_1_rejects_wrong_answers(answer, reason):
    assert judged("13.1", answer) == ("wrong", reason)


def test_13_1_names_what_is_wrong():
    assert "not in `named_modules()` order" in message("13.1", in_named_modules_order)
    assert "it is its call 2, not 1" in message("13.1", last_call_only)


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


def counts_once(model):
    counts = {}
    for n, m in model.named_modules():
        if n:
            m.register_forward_hook(lambda mod, a, o, n=n: counts.__setitem__(n, 1))
    return counts


def test_13_2():
    assert verdict("13.2", run_solution("13.2")["count_calls"]) == "correct"
    assert verdict("13.2", via_weakref) == "correct"
    assert judged("13.2", blank_count) == ("not solved", "blank")
    assert gc.isenabled()


def counts_as_list(model):
    return [run_solution("13.2")["count_calls"](model)]


@pytest.mark.parametrize("answer, reason", [
    (via_closure, "cycle"), (via_bound_method, "cycle"), (counts_once, "counts"), (counts_as_list, "not-a-dict"),
    ("counts", "not-a-function")])
def test_13_2_rejects_wrong_answers(answer, reason):
    assert judged("13.2", answer) == ("wrong", reason)
    assert gc.isenabled()


def blank_count(model):
    pass


def test_13_2_names_what_is_wrong_and_restores_the_collector():
    assert "reference cycle" in message("13.2", via_closure)
    assert "reference cycle" in message("13.2", via_bound_method)
    assert "the counts should be" in message("13.2", counts_once)
    assert gc.isenabled()


# ---- 13.3 the first Node with a NaN gradient ----------------------------------------------------

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


def by_prehooks_on_next(model, x):  # right too: a Node pre-hook sees the gradients its predecessor computed
    out = model(x)
    found, handles = [], []
    for node in _walk(out):
        def pre(grad_outputs, node=node):
            if not found and any(g is not None and not torch.isfinite(g).all() for g in grad_outputs):
                found.append(("pre", node))
        handles.append(node.register_prehook(pre))
    out.sum().backward()
    for h in handles:
        h.remove()
    if not found:
        return None
    # the Node whose output fed this pre-hook: the one among all Nodes that lists it in next_functions
    _, receiver = found[0]
    return next(n.name() for n in _walk(out) if any(m is receiver for m, _ in n.next_functions))


def _bad(grads):
    return any(g is not None and not torch.isfinite(g).all() for g in grads)


def _post_hook_answer(pick):
    """An answer that records (name, computed bad, received bad) per Node in backward order, then picks one."""
    def answer(model, x):
        out = model(x)
        seen, handles = [], []
        for node in _walk(out):
            handles.append(node.register_hook(lambda gi, go, node=node: seen.append((node.name(), _bad(gi), _bad(go)))))
        try:
            out.sum().backward()
        finally:
            for h in handles:
                h.remove()
        return pick(seen)
    return answer


# looks at the gradients a Node received: names the Node after the producer
checks_received = _post_hook_answer(lambda seen: next((n for n, _, received in seen if received), None))
# keeps the last Node that computed a bad gradient, not the first
last_bad = _post_hook_answer(lambda seen: ([n for n, computed, _ in seen if computed] or [None])[-1])


def always_sqrt(model, x):
    model(x).sum().backward()
    return "SqrtBackward0"


def blank_node(model, x):
    pass


def test_13_3():
    assert verdict("13.3", run_solution("13.3")["first_nan_node"]) == "correct"
    assert verdict("13.3", by_prehooks_on_next) == "correct"
    assert judged("13.3", blank_node) == ("not solved", "blank")
    assert judged("13.3", None) == ("not solved", "blank")


def names_a_node_always(model, x):  # right where a NaN appears, but also names one where none does
    return run_solution("13.3")["first_nan_node"](model, x) or "TanhBackward0"


@pytest.mark.parametrize("answer, reason", [
    (checks_received, "node"), (last_bad, "node"), (always_sqrt, "node"), (names_a_node_always, "expected-none")])
def test_13_3_rejects_wrong_answers(answer, reason):
    assert judged("13.3", answer) == ("wrong", reason)


def test_13_3_names_what_is_wrong():
    assert "not those it received" in message("13.3", checks_received)
    assert "not those it received" in message("13.3", last_bad)
    assert "the first Node that computed a NaN gradient is LogBackward0" in message("13.3", always_sqrt)
