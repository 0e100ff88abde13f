"""Notebook 08's checkers: each pitfall avoided passes, each pitfall fallen into is caught."""
import pytest
import torch
from torch import nn

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict

# ---- 08.1 hooks registered in a loop ----------------------------------------------------

def shapes_with_hook_factory(model, x):
    shapes = {}

    def recorder(name):
        def hook(module, args, out):
            shapes[name] = out.shape  # torch.Size is accepted too
        return hook

    handles = [m.register_forward_hook(recorder(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return shapes


def shapes_with_functools_partial(model, x):
    from functools import partial
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if type(module) is nn.Linear:
                scope.add(module.register_forward_hook(partial(lambda n, m, a, o: shapes.update({n: list(o.shape)}), name)))
        model(x)
    return shapes


def shapes_late_binding(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(lambda m, a, out: shapes.__setitem__(name, tuple(out.shape))))
        model(x)
    return shapes


def shapes_hooks_left(model, x):
    shapes = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda m, a, out, name=name: shapes.__setitem__(name, tuple(out.shape)))
    model(x)
    return shapes


def shapes_by_class_name(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(
                    lambda m, a, out: shapes.__setitem__(type(m).__name__, tuple(out.shape))))
        model(x)
    return shapes


def shapes_of_every_module(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if name:
                scope.add(module.register_forward_hook(lambda m, a, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
        model(x)
    return shapes


def shapes_of_inputs(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(lambda m, a, out, name=name: shapes.__setitem__(name, tuple(a[0].shape))))
        model(x)
    return shapes


def shapes_of_the_top_level_layers(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name in dict(model.named_children()):  # the top level only: `encoder`'s Linears are never reached
            module = getattr(model, name)
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(lambda m, a, o, name=name: shapes.update({name: tuple(o.shape)})))
        model(x)
    return shapes


@pytest.mark.parametrize("answer", [run_solution("08.1")["linear_output_shapes"], shapes_with_hook_factory,
                                    shapes_with_functools_partial])
def test_08_1_accepts_right_answers(answer):
    assert verdict("08.1", answer) == "correct"


def shapes_as_a_list(model, x):
    return list(run_solution("08.1")["linear_output_shapes"](model, x).values())


@pytest.mark.parametrize("answer, reason", [
    (shapes_late_binding, "late-binding"), (shapes_hooks_left, "hook-left"), (shapes_by_class_name, "layer-names"),
    (shapes_of_every_module, "layer-names"), (shapes_of_inputs, "shape"), (shapes_as_a_list, "not-a-dict"),
    (shapes_of_the_top_level_layers, "nested-not-hooked"),
])
def test_08_1_rejects_wrong_answers(answer, reason):
    assert judged("08.1", answer) == ("wrong", reason)


def test_08_1_names_late_binding_in_its_verdict():
    assert "late binding" in hooklab.course.exercises.verdict("08.1", shapes_late_binding)[2]


def test_08_1_blank_start_is_not_solved():
    def linear_output_shapes(model, x):
        pass
    assert verdict("08.1", linear_output_shapes) == "not solved"


# ---- 08.2 a cell that can be re-run -----------------------------------------------------

def counter_keeping_handle_on_module(model, counts):
    old = getattr(model, "_counter_handle", None)
    if old is not None:
        old.remove()

    def count(module, args, out):
        counts["calls"] = counts.get("calls", 0) + 1
    model._counter_handle = model.register_forward_hook(count)


def counter_stacking(model, counts):
    model.register_forward_hook(lambda m, a, out: counts.update(calls=counts.get("calls", 0) + 1))


def counter_clearing_all_hooks(model, counts):
    model._forward_hooks.clear()
    model.register_forward_hook(lambda m, a, out: counts.update(calls=counts.get("calls", 0) + 1))


def counter_global(model, counts):
    scope = hooklab.named_scope("test-global-counter")
    scope.add(nn.modules.module.register_module_forward_hook(
        lambda m, a, out: counts.update(calls=counts.get("calls", 0) + 1)))


def counter_in_scope_that_exits(model, counts):
    with hooklab.HookScope() as scope:  # removed as soon as the function returns: counts nothing later
        scope.add(model.register_forward_hook(lambda m, a, out: counts.update(calls=counts.get("calls", 0) + 1)))


@pytest.mark.parametrize("answer", [run_solution("08.2")["install_call_counter"], counter_keeping_handle_on_module])
def test_08_2_accepts_right_answers(answer):
    assert verdict("08.2", answer) == "correct"


def counter_setting_not_adding(model, counts):
    scope = hooklab.named_scope("call-counter")
    scope.add(model.register_forward_hook(lambda m, a, out: counts.update(calls=1)))


@pytest.mark.parametrize("answer, reason", [
    (counter_stacking, "hooks-stacked"), (counter_clearing_all_hooks, "removed-others-hooks"),
    (counter_global, "global-hook"), (counter_setting_not_adding, "call-count"),
])
def test_08_2_rejects_wrong_answers(answer, reason):
    try:
        assert judged("08.2", answer) == ("wrong", reason)
    finally:
        hooklab.named_scope("test-global-counter").remove()
    assert hooklab.hook_inventory(None) == []


def test_08_2_a_hook_removed_too_early_counts_nothing():
    status, _, en, reason = hooklab.course.exercises.verdict("08.2", counter_in_scope_that_exits, strict=True)
    assert (status, reason) == ("wrong", "no-counting-hook") and "never grew" in en  # not "not solved": the function is no longer blank


def test_08_2_blank_start_is_not_solved():
    def install_call_counter(model, counts):
        pass
    assert verdict("08.2", install_call_counter) == "not solved"
    assert verdict("08.2", None) == "not solved"


# ---- 08.3 keep activations without the graph --------------------------------------------

def keep_with_data_clone(model, x):
    kept, handles = [], []
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_forward_hook(lambda m, a, out: kept.append(out.data.clone())))
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return tuple(kept)


def keep_inside_no_grad(model, x):
    kept = []
    with hooklab.HookScope() as scope, torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, a, out: kept.append(out.clone())))
        model(x)
    return kept


def keep_attached(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, a, out: kept.append(out.clone())))
        model(x)
    return kept


def keep_detached_only(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, a, out: kept.append(out.detach())))
        model(x)
    return kept


def keep_first_relu_only(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        scope.add(model.act1.register_forward_hook(lambda m, a, out: kept.append(out.detach().clone())))
        model(x)
    return kept


def keep_linear_outputs(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(lambda m, a, out: kept.append(out.detach().clone())))
        model(x)
    return kept


def keep_one_per_module(model, x):
    kept = {}
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, a, out: kept.update({m: out.detach().clone()})))
        model(x)
    return list(kept.values())


def keep_what_goes_in(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(lambda m, inputs, out: kept.append(inputs[0].detach().clone())))
        model(x)
    return kept


def keep_outputs_doubled(model, x):
    return [2 * t for t in run_solution("08.3")["keep_relu_outputs"](model, x)]


def keep_and_hand_back_the_copy(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):  # append returns None, so the hook returns the copy
                scope.add(module.register_forward_hook(lambda m, a, out: kept.append(out.detach().clone()) or kept[-1]))
        model(x)
    return kept


@pytest.mark.parametrize("answer", [run_solution("08.3")["keep_relu_outputs"], keep_with_data_clone, keep_inside_no_grad])
def test_08_3_accepts_right_answers(answer):
    assert verdict("08.3", answer) == "correct"


def keep_as_lists(model, x):
    return [t.tolist() for t in run_solution("08.3")["keep_relu_outputs"](model, x)]


@pytest.mark.parametrize("answer, reason", [
    (keep_attached, "attached"), (keep_detached_only, "overwritten-in-place"), (keep_first_relu_only, "relu-count"),
    (keep_linear_outputs, "relu-input"), (keep_as_lists, "not-a-list-of-tensors"),
    (keep_one_per_module, "one-per-module"), (keep_what_goes_in, "relu-input"),
    (keep_and_hand_back_the_copy, "output-replaced"), (keep_outputs_doubled, "values"),
])
def test_08_3_rejects_wrong_answers(answer, reason):
    assert judged("08.3", answer) == ("wrong", reason)


def test_08_3_explains_the_in_place_overwrite():
    assert "overwrote it in place" in hooklab.course.exercises.verdict("08.3", keep_detached_only)[2]


def test_08_3_blank_start_is_not_solved():
    def keep_relu_outputs(model, x):
        pass
    assert verdict("08.3", keep_relu_outputs) == "not solved"


# ---- 08.4 change a gradient without editing it in place ---------------------------------

def halve_by_division(grad):
    return grad / 2


def halve_in_place(grad):
    grad.mul_(0.5)


def halve_in_place_and_return(grad):
    return grad.mul_(0.5)


def double(grad):
    return grad * 2


def halve_adding_instead(grad):
    return grad + grad


def halve_detached_zeros(grad):
    return torch.zeros_like(grad)


@pytest.mark.parametrize("answer", [run_solution("08.4")["halve"], halve_by_division, lambda g: g.mul(0.5)])
def test_08_4_accepts_right_answers(answer):
    assert verdict("08.4", answer) == "correct"


def halve_in_half_precision(grad):
    return (grad * 0.5).half()  # a hook may not change the gradient's dtype: backward raises


def halve_after_printing(grad):
    print(grad.shape)  # returns None: the gradient stays as it is


@pytest.mark.parametrize("answer, reason", [
    (halve_in_place, "in-place"), (halve_in_place_and_return, "in-place"), (double, "doubled"), (halve_adding_instead, "doubled"),
    (halve_detached_zeros, "not-halved"), (halve_in_half_precision, "hook-raised"),
    (halve_after_printing, "returned-none"),
])
def test_08_4_rejects_wrong_answers(answer, reason):
    assert judged("08.4", answer) == ("wrong", reason)


def test_08_4_blank_start_is_not_solved():
    def halve(grad):
        pass
    assert verdict("08.4", halve) == "not solved"
