"""Notebook 04's exercise checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict


@pytest.fixture(autouse=True)
def no_global_hooks_leak():
    """A checker must clean up the global hooks a wrong answer leaves behind."""
    before = len(hooklab.hook_inventory(None))
    yield
    assert len(hooklab.hook_inventory(None)) == before


# ---- 04.1 clamp grad_input in a full backward hook ---------------------------------------

def clip_with_a_list(module, grad_input, grad_output):
    clipped = []
    for g in grad_input:
        clipped.append(g if g is None else torch.clamp(g, min=-0.1, max=0.1))
    return clipped  # a list as long as grad_input works too


def clip_with_minimum_maximum(module, grad_input, grad_output):
    limit = torch.tensor(0.1)
    return tuple(g if g is None else torch.maximum(torch.minimum(g, limit), -limit) for g in grad_input)


def clip_in_place(module, grad_input, grad_output):
    for g in grad_input:
        if g is not None:
            g.clamp_(-0.1, 0.1)  # works today, but hooks must not modify their arguments


def clip_returning_a_tensor(module, grad_input, grad_output):
    return grad_input[0].clamp(-0.1, 0.1)


def clip_ignoring_none(module, grad_input, grad_output):
    return tuple(g.clamp(-0.1, 0.1) for g in grad_input)


def clip_grad_output(module, grad_input, grad_output):
    return tuple(g.clamp(-0.1, 0.1) for g in grad_output)


def scale_instead_of_clip(module, grad_input, grad_output):
    return tuple(None if g is None else g * 0.1 for g in grad_input)


def clip_wrong_range(module, grad_input, grad_output):
    return tuple(None if g is None else g.clamp(0.0, 0.1) for g in grad_input)


def clip_by_norm(module, grad_input, grad_output):
    return tuple(None if g is None else g * (0.1 / g.norm()).clamp(max=1.0) for g in grad_input)


@pytest.mark.parametrize("answer", [run_solution("04.1")["clip_grad_input"], clip_with_a_list,
                                    clip_with_minimum_maximum])
def test_04_1_accepts_right_answers(answer):
    assert verdict("04.1", answer) == "correct"


def clip_the_first_entry_only(module, grad_input, grad_output):
    return torch.clamp(grad_input[0], min=-0.1, max=0.1)     # a tensor, where a tuple of grad_input's length is due


def clip_what_comes_from_above(module, grad_input, grad_output):
    return [torch.clamp(g, -0.1, 0.1) for g in grad_output]  # grad_output's shapes, returned as grad_input


def clip_and_add_an_entry(module, grad_input, grad_output):
    return (*(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input), None)   # one entry too many


def clip_to_nothing(module, grad_input, grad_output):
    return tuple(None for g in grad_input)                   # x gets no gradient at all


def clip_and_zero_the_weight_gradient(module, grad_input, grad_output):
    module.zero_grad()                           # the parameters' gradients are already there: this drops them
    return tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)


def clip_only_looks(module, grad_input, grad_output):
    print([None if g is None else tuple(g.shape) for g in grad_input])


@pytest.mark.parametrize("answer, reason", [
    (clip_in_place, "in-place"), (clip_returning_a_tensor, "not-a-tuple"), (clip_ignoring_none, "none-entry"),
    (clip_grad_output, "from-grad-output"), (clip_the_first_entry_only, "not-a-tuple"),
    (clip_what_comes_from_above, "from-grad-output"), (clip_and_add_an_entry, "backward-raised"), (scale_instead_of_clip, "scaled-not-clamped"), (clip_wrong_range, "clip-values"),
    (clip_by_norm, "clip-values"), (0.1, "not-a-function"), (clip_to_nothing, "x-grad-shape"),
    (clip_and_zero_the_weight_gradient, "param-grads-changed"), (clip_only_looks, "hook-returned-none")])
def test_04_1_rejects_wrong_answers(answer, reason):
    assert judged("04.1", answer) == ("wrong", reason)


def test_04_1_explains_none_entries_and_in_place_edits():
    assert "`None` in `grad_input`" in hooklab.course.exercises.verdict("04.1", clip_ignoring_none)[2]
    assert "in place" in hooklab.course.exercises.verdict("04.1", clip_in_place)[2]


def test_04_1_blank_start_is_not_solved():
    def clip_grad_input(module, grad_input, grad_output):
        pass
    assert judged("04.1", clip_grad_input) == ("not solved", "hook-returned-none")
    assert verdict("04.1", None) == "not solved"


# ---- 04.2 predict the factors --------------------------------------------------------------

def factors(pre, post):
    names = ("fc2.weight.grad", "fc1.weight.grad", "x.grad")
    return {"pre-hook on fc2": dict(zip(names, pre)), "backward hook on fc2": dict(zip(names, post))}


def test_04_2_accepts_the_recorded_factors_written_differently():
    assert verdict("04.2", run_solution("04.2")["my_factors"]) == "correct"
    assert verdict("04.2", factors((1 / 2, 0.5, 0.50), (1, 0.5, 0.5))) == "correct"  # ints and fractions are numbers too


@pytest.mark.parametrize("answer, reason", [
    (factors((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), "factor"),  # thinks the backward hook also changes fc2's own grads
    (factors((1.0, 0.5, 0.5), (1.0, 0.5, 0.5)), "factor"),  # thinks the pre-hook leaves fc2's own parameter grads alone
    (factors((0.5, 0.5, 0.5), (1.0, 1.0, 0.5)), "factor"),  # thinks a returned grad_input reaches only x
    (factors((0.5, 0.25, 0.25), (1.0, 0.5, 0.5)), "factor"),  # compounds the halving
    (factors((2.0, 2.0, 2.0), (1.0, 2.0, 2.0)), "factor"),  # inverse factors
    ({"pre-hook on fc2": {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5}}, "structure"),  # a row missing
    (factors(("0.5", 0.5, 0.5), (1.0, 0.5, 0.5)), "not-a-number"),  # a string is not a number
    (factors((0.5, 0.5, float("nan")), (1.0, 0.5, 0.5)), "not-a-number"),
    ([0.5, 0.5, 0.5, 1.0, 0.5, 0.5], "structure"),
])
def test_04_2_rejects_wrong_predictions(answer, reason):
    assert judged("04.2", answer) == ("wrong", reason)


def test_04_2_blank_start_is_not_solved():
    assert judged("04.2", factors((None,) * 3, (None,) * 3)) == ("not solved", "blank")
    assert judged("04.2", factors((0.5, 0.5, 0.5), (None, 0.5, 0.5))) == ("not solved", "some-none")
    assert judged("04.2", {}) == ("not solved", "blank")
    assert verdict("04.2", None) == "not solved"


# ---- 04.3 block gradient norms in firing order ---------------------------------------------

def needs_torchvision():
    pytest.importorskip("torchvision", reason="exercise 04.3 builds its models from torchvision's BasicBlock, "
                                              "and torchvision is not installed")


def norms_with_default_argument_and_handles(model, x):
    from torchvision.models.resnet import BasicBlock
    norms, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, BasicBlock):
            handles.append(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.append((name, go[0].norm()))))  # 0-d tensors are fine
    try:
        model(x).sum().backward()
    finally:
        for handle in handles:
            handle.remove()
    return dict(norms)  # a dict keeps the firing order too


def norms_with_tensor_hooks_on_the_outputs(model, x):
    from torchvision.models.resnet import BasicBlock
    norms = []

    def on_output(name):
        def forward_hook(module, args, output):
            output.register_hook(lambda grad: norms.append((name, grad.norm().item())))
        return forward_hook

    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_forward_hook(on_output(name)))
        model(x).sum().backward()
    return norms


def _blocks(model):
    from torchvision.models.resnet import BasicBlock
    return [(name, m) for name, m in model.named_modules() if isinstance(m, BasicBlock)]


def norms_late_binding(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in _blocks(model):
            scope.add(module.register_full_backward_hook(lambda m, gi, go: norms.append((name, go[0].norm().item()))))
        model(x).sum().backward()
    return norms


def norms_of_grad_input(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in _blocks(model):
            scope.add(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.append((name, gi[0].norm().item()))))
        model(x).sum().backward()
    return norms


def norms_in_forward_order(model, x):
    return sorted(run_solution("04.3")["block_grad_norms"](model, x))


def norms_leaving_hooks(model, x):
    norms = []
    for name, module in _blocks(model):
        module.register_full_backward_hook(lambda m, gi, go, name=name: norms.append((name, go[0].norm().item())))
    model(x).sum().backward()
    return norms


def norms_on_bn2(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in _blocks(model):
            scope.add(module.bn2.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.append((name, go[0].norm().item()))))
        model(x).sum().backward()  # out += identity modifies bn2's output in place: RuntimeError
    return norms


def norms_hard_coded_resnet18_names(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name in ["layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0", "layer3.1", "layer4.0", "layer4.1"]:
            scope.add(hooklab.get_module(model, name).register_full_backward_hook(
                lambda m, gi, go, name=name: norms.append((name, go[0].norm().item()))))
        model(x).sum().backward()
    return norms


def norms_without_backward(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in _blocks(model):
            scope.add(module.register_full_backward_hook(
                lambda m, gi, go, name=name: norms.append((name, go[0].norm().item()))))
        model(x)
    return norms


@pytest.mark.parametrize("answer", [run_solution("04.3")["block_grad_norms"], norms_with_default_argument_and_handles,
                                    norms_with_tensor_hooks_on_the_outputs])
def test_04_3_accepts_right_answers(answer):
    needs_torchvision()
    assert verdict("04.3", answer) == "correct"


def norms_as_plain_numbers(model, x):
    return [norm for _, norm in run_solution("04.3")["block_grad_norms"](model, x)]


def norms_with_the_stages_too(model, x):
    norms = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_children():
            if name.startswith("layer"):
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: norms.append((name, go[0].norm().item()))))
        model(x).sum().backward()
    return norms


def norms_as_gradients(model, x):
    return [(name, torch.full((2,), norm)) for name, norm in run_solution("04.3")["block_grad_norms"](model, x)]


def norms_squared(model, x):
    return [(name, norm ** 2) for name, norm in run_solution("04.3")["block_grad_norms"](model, x)]


def norms_as_largest_entries(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, module in _blocks(model):
            scope.add(module.register_full_backward_hook(
                lambda m, gi, go, name=name: rows.append((name, go[0].abs().max().item()))))
        model(x).sum().backward()
    return rows


def norms_as_sums_of_squares(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if type(module).__name__ == "BasicBlock":
                scope.add(module.register_full_backward_hook(
                    lambda m, gi, go, name=name: rows.append((name, float((go[0] * go[0]).sum())))))
        model(x).sum().backward()
    return rows


@pytest.mark.parametrize("answer, reason", [
    (norms_late_binding, "late-binding"), (norms_of_grad_input, "grad-input-norm"), (norms_in_forward_order, "firing-order"),
    (norms_leaving_hooks, "hook-left"), (norms_on_bn2, "raised"), (norms_hard_coded_resnet18_names, "raised"),
    (norms_without_backward, "no-hook-fired"), (norms_as_plain_numbers, "not-pairs"),
    (norms_with_the_stages_too, "block-names"), (norms_as_gradients, "norm-not-a-number"),
    (norms_squared, "squared"), (norms_as_sums_of_squares, "squared"), (norms_as_largest_entries, "norm-values")])
def test_04_3_rejects_wrong_answers(answer, reason):
    needs_torchvision()
    assert judged("04.3", answer) == ("wrong", reason)


def test_04_3_names_the_typical_mistakes():
    needs_torchvision()
    assert "name=name" in hooklab.course.exercises.verdict("04.3", norms_late_binding)[2]
    assert "`grad_input[0]`" in hooklab.course.exercises.verdict("04.3", norms_of_grad_input)[2]
    assert "firing order" in hooklab.course.exercises.verdict("04.3", norms_in_forward_order)[2]


def test_04_3_blank_start_is_not_solved():
    needs_torchvision()
    def block_grad_norms(model, x):
        pass
    assert verdict("04.3", block_grad_norms) == "not solved"
    assert verdict("04.3", None) == "not solved"
