"""Notebook 15's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import pytest
import torch
from torch import nn

import hooklab
from exercise_support import judged, run_solution, verdict

# ---- 15.1 the modules that really ran ------------------------------------------------------------

def with_global_post_hooks_then_sorted_by_start(model, run):  # right: a global pre-hook, written another way
    names = {id(m): n for n, m in model.named_modules()}
    calls = []
    with hooklab.HookScope() as scope:
        scope.add(torch.nn.modules.module.register_module_forward_pre_hook(
            lambda m, args: calls.append(names.get(id(m)))))
        run()
    return [c for c in calls if c is not None]


def local_pre_hooks(model, run):  # disables the encoder layer's fast path
    calls = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            scope.add(module.register_forward_pre_hook(lambda m, args, name=name: calls.append(name)))
        run()
    return calls


def global_hook_by_closure_name(model, run):  # counts the copy's calls: a name captured per module... by type
    names = {}
    for name, module in model.named_modules():
        names.setdefault(type(module), name)
    calls = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, args: calls.append(names[type(m)]) if type(m) in names else None)
    try:
        run()
    finally:
        handle.remove()
    return calls


def global_post_hook(model, run):  # the order in which calls end
    names = {id(m): n for n, m in model.named_modules()}
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: calls.append(names[id(m)]) if id(m) in names else None)
    try:
        run()
    finally:
        handle.remove()
    return calls


def deduplicated(model, run):
    calls = run_solution("15.1")["modules_that_ran"](model, run)
    return list(dict.fromkeys(calls))


def runs_twice(model, run):
    solution = run_solution("15.1")["modules_that_ran"]
    return solution(model, run) + solution(model, run)


def leaves_the_global_hook(model, run):
    names = {id(m): n for n, m in model.named_modules()}
    calls = []
    torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, args: calls.append(names[id(m)]) if id(m) in names else None)
    run()
    return calls


def module_types(model, run):
    calls = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, args: calls.append(type(m).__name__))
    try:
        run()
    finally:
        handle.remove()
    return calls


def named_modules_order(model, run):  # never looks at what ran
    run()
    return [name for name, _ in model.named_modules()]


def in_inference_mode(model, run):  # changes what run() does: no graph
    names = {id(m): n for n, m in model.named_modules()}
    calls = []
    with hooklab.HookScope() as scope, torch.inference_mode():
        scope.add(torch.nn.modules.module.register_module_forward_pre_hook(
            lambda m, args: calls.append(names[id(m)]) if id(m) in names else None))
        run()
    return calls


def blank_15_1(model, run):
    pass


def test_15_1_accepts_right_answers():
    assert verdict("15.1", run_solution("15.1")["modules_that_ran"]) == "correct"
    assert verdict("15.1", with_global_post_hooks_then_sorted_by_start) == "correct"
    assert judged("15.1", blank_15_1) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (local_pre_hooks, "changed-the-step"), (global_hook_by_closure_name, "counted-copies"),
    (global_post_hook, "call-order"), (deduplicated, "once-each"), (runs_twice, "ran-twice"),
    (leaves_the_global_hook, "global-hook-left"), (module_types, "not-names"), (named_modules_order, "calls"),
    (lambda model, run: "0", "not-a-list"), (in_inference_mode, "no-grad"),
], ids=lambda v: getattr(v, "__name__", v))
def test_15_1_rejects_typical_mistakes(answer, reason):
    assert judged("15.1", answer) == ("wrong", reason)


# ---- 15.2 observer calls ----------------------------------------------------------------------------

def counts_with_a_global_hook(prepared, calibrate):  # right, another way (observers found by their type)
    from torch.ao.quantization import ObserverBase
    names = {id(m): n for n, m in prepared.named_modules() if isinstance(m, ObserverBase)}
    counts = dict.fromkeys(names.values(), 0)
    with hooklab.HookScope() as scope:
        scope.add(torch.nn.modules.module.register_module_forward_hook(
            lambda m, args, out: counts.__setitem__(names[id(m)], counts[names[id(m)]] + 1) if id(m) in names else None))
        calibrate()
    return counts


def only_those_that_ran(prepared, calibrate):
    counts = run_solution("15.2")["observer_calls"](prepared, calibrate)
    return {name: n for name, n in counts.items() if n}


def reads_min_max(prepared, calibrate):
    calibrate()
    return {name: bool(torch.isfinite(m.min_val).all()) for name, m in prepared.named_modules()
            if name.endswith("activation_post_process")}


def counts_twice(prepared, calibrate):
    solution = run_solution("15.2")["observer_calls"]
    first = solution(prepared, calibrate)
    second = solution(prepared, calibrate)
    return {name: first[name] + second[name] for name in first}


def modules_as_keys(prepared, calibrate):
    counts = run_solution("15.2")["observer_calls"](prepared, calibrate)
    return {prepared.get_submodule(name): n for name, n in counts.items()}


def short_names(prepared, calibrate):
    counts = run_solution("15.2")["observer_calls"](prepared, calibrate)
    return {name.split(".")[0]: n for name, n in counts.items()}


def leaves_its_hooks(prepared, calibrate):
    counts = {name: 0 for name, _ in prepared.named_modules() if name.endswith("activation_post_process")}
    for name in counts:
        prepared.get_submodule(name).register_forward_hook(
            lambda m, args, out, name=name: counts.__setitem__(name, counts[name] + 1))
    calibrate()
    return counts


def counts_parent_calls_by_type(prepared, calibrate):  # every Linear's calls added up under each observer
    calls = {"n": 0}
    with hooklab.HookScope() as scope:
        for module in prepared.modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(lambda m, a, o: calls.__setitem__("n", calls["n"] + 1)))
        calibrate()
    return {name: calls["n"] for name, _ in prepared.named_modules() if name.endswith("activation_post_process")}


def names_ending_with_the_suffix(prepared, calibrate):  # cell 6.1's way: misses a graph module's observers
    counts = {name: 0 for name, _ in prepared.named_modules() if name.endswith("activation_post_process")}
    with hooklab.HookScope() as scope:
        for name in counts:
            scope.add(prepared.get_submodule(name).register_forward_hook(
                lambda m, args, out, name=name: counts.__setitem__(name, counts[name] + 1)))
        calibrate()
    return counts


def test_15_2_accepts_right_answers():
    assert verdict("15.2", run_solution("15.2")["observer_calls"]) == "correct"
    assert verdict("15.2", counts_with_a_global_hook) == "correct"
    assert judged("15.2", lambda prepared, calibrate: None) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (only_those_that_ran, "missing-unused"), (reads_min_max, "not-counts"), (counts_twice, "ran-twice"),
    (modules_as_keys, "not-names"), (short_names, "not-names"), (leaves_its_hooks, "hook-left"),
    (counts_parent_calls_by_type, "counts"), (lambda prepared, calibrate: [1, 2], "not-a-dict"),
    (names_ending_with_the_suffix, "graph-observers"),
], ids=lambda v: getattr(v, "__name__", v))
def test_15_2_rejects_typical_mistakes(answer, reason):
    assert judged("15.2", answer) == ("wrong", reason)


# ---- 15.3 the adapter's contribution ------------------------------------------------------------------

def lora_minus_base(model, name, x):  # right: two hooks in the same forward, subtracted
    layer = model.get_submodule(name)
    seen = {}
    with hooklab.HookScope() as scope:
        scope.add(layer.register_forward_hook(lambda m, a, o: seen.__setitem__("full", o.detach())))
        scope.add(layer.base_layer.register_forward_hook(lambda m, a, o: seen.__setitem__("base", o.detach())))
        model(x)
    return seen["full"] - seen["base"]


def whole_output(model, name, x):
    layer, seen = model.get_submodule(name), {}
    with hooklab.HookScope() as scope:
        scope.add(layer.register_forward_hook(lambda m, a, o: seen.__setitem__("out", o.detach())))
        model(x)
    return seen["out"]


def base_output(model, name, x):
    layer, seen = model.get_submodule(name), {}
    with hooklab.HookScope() as scope:
        scope.add(layer.base_layer.register_forward_hook(lambda m, a, o: seen.__setitem__("out", o.detach())))
        model(x)
    return seen["out"]


def forgets_scaling(model, name, x):
    layer, seen = model.get_submodule(name), {}
    with hooklab.HookScope() as scope:
        scope.add(layer.lora_B["default"].register_forward_hook(lambda m, a, o: seen.__setitem__("out", o.detach())))
        model(x)
    return seen["out"]


def from_the_model_input(model, name, x):
    layer = model.get_submodule(name)
    with torch.no_grad():
        return layer.scaling["default"] * layer.lora_B["default"](layer.lora_A["default"](x))


def keeps_the_hook(model, name, x):
    layer, seen = model.get_submodule(name), {}
    layer.lora_B["default"].register_forward_hook(lambda m, a, o: seen.__setitem__("out", o.detach()))
    model(x)
    return layer.scaling["default"] * seen["out"]


def hard_codes_default(model, name, x):  # cell 4.2's adapter name, taken for granted
    layer, seen = model.get_submodule(name), {}
    with hooklab.HookScope() as scope:
        scope.add(layer.lora_B["default"].register_forward_hook(lambda m, a, o: seen.__setitem__("out", o.detach())))
        model(x)
    return layer.scaling["default"] * seen["out"]


def adapter_from_scaling_keys(model, name, x):  # right, another way: the adapter's name from `scaling`
    layer, seen = model.get_submodule(name), {}
    (adapter,) = layer.scaling
    with hooklab.HookScope() as scope:
        scope.add(layer.lora_A[adapter].register_forward_hook(lambda m, a, o: seen.__setitem__("a", o.detach())))
        model(x)
    return layer.scaling[adapter] * layer.lora_B[adapter](seen["a"]).detach()


def recomputed_from_the_base_input(model, name, x):  # the layer's input kept, the adapter run again: no dropout
    layer, seen = model.get_submodule(name), {}
    (adapter,) = layer.scaling
    with hooklab.HookScope() as scope:
        scope.add(layer.base_layer.register_forward_pre_hook(lambda m, a: seen.__setitem__("h", a[0].detach())))
        model(x)
    down, up = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
    return layer.scaling[adapter] * (seen["h"] @ down.T @ up.T).detach()


def adapter_run_again_afterwards(model, name, x):  # the adapter's modules called again on the kept input
    layer, kept = model.get_submodule(name), []
    (adapter,) = layer.active_adapters
    with hooklab.HookScope() as scope:
        scope.add(layer.base_layer.register_forward_hook(lambda m, a, o: kept.append(a[0].detach())))
        model(x)
    with torch.no_grad():
        return layer.lora_B[adapter](layer.lora_A[adapter](kept[0])) * layer.scaling[adapter]


def test_15_3_accepts_right_answers():
    assert verdict("15.3", run_solution("15.3")["adapter_output"]) == "correct"
    assert verdict("15.3", lora_minus_base) == "correct"
    assert verdict("15.3", adapter_from_scaling_keys) == "correct"
    assert judged("15.3", lambda model, name, x: None) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (whole_output, "full-output"), (base_output, "base-output"), (forgets_scaling, "no-scaling"),
    (from_the_model_input, "wrong-input"), (keeps_the_hook, "hook-left"),
    (lambda model, name, x: [0.0], "not-a-tensor"), (lambda model, name, x: torch.zeros(2), "shape"),
    (lambda model, name, x: torch.zeros(3, 4), "values"), (hard_codes_default, "adapter-name"),
    (recomputed_from_the_base_input, "no-dropout"), (adapter_run_again_afterwards, "no-dropout"),
], ids=lambda v: getattr(v, "__name__", v))
def test_15_3_rejects_typical_mistakes(answer, reason):
    assert judged("15.3", answer) == ("wrong", reason)
