"""Notebook 01's checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict

# ---- 01.1 gradient noise --------------------------------------------------------------------

def noise_with_normal(t, std):
    # torch.normal makes float32 noise; adding it to a float64 gradient still gives float64
    return t.register_hook(lambda g: g + torch.normal(0.0, std, size=tuple(g.shape)))


def noise_via_named_function_and_scope(t, std):
    def add_noise(grad):
        noise = torch.empty_like(grad).normal_(mean=0.0, std=std)   # in place on a NEW tensor: fine
        return grad + noise
    handle = t.register_hook(add_noise)
    return handle


def noise_in_place(t, std):
    def hook(g):
        g.add_(torch.randn_like(g) * std)          # edits the gradient shared with the sibling branch
        return g
    return t.register_hook(hook)


def noise_not_returned(t, std):
    def hook(g):
        g = g + torch.randn_like(g) * std          # computed, then dropped: the hook returns None
    return t.register_hook(hook)


def noise_with_variance(t, std):
    return t.register_hook(lambda g: g + torch.randn_like(g) * std ** 2)


def noise_uniform(t, std):
    return t.register_hook(lambda g: g + torch.rand_like(g) * std)


def noise_one_number_for_all(t, std):
    return t.register_hook(lambda g: g + torch.randn(()) * std)


def noise_one_python_float_for_all(t, std):
    def hook(grad):
        shift = float(torch.normal(0.0, std, size=(1,)))     # one number, the same for every element
        return grad + shift
    return t.register_hook(hook)


def noise_returns_tensor_not_handle(t, std):
    t.register_hook(lambda g: g + torch.randn_like(g) * std)
    return t


def noise_registered_twice(t, std):
    t.register_hook(lambda g: g + torch.randn_like(g) * std / 2 ** 0.5)   # std right overall, but left behind
    return t.register_hook(lambda g: g + torch.randn_like(g) * std / 2 ** 0.5)


@pytest.mark.parametrize("answer", [run_solution("01.1")["add_grad_noise"], noise_with_normal,
                                    noise_via_named_function_and_scope])
def test_01_1_accepts_right_answers(answer):
    assert verdict("01.1", answer) == "correct"


def noise_forgets_return(t, std):
    t.register_hook(lambda g: g + torch.randn_like(g) * std)        # registered, but no handle handed back


def noise_hook_raises(t, std):
    return t.register_hook(lambda g: g + torch.randn(3) * std)      # wrong shape: backward raises


def noise_at_the_node_returns_another_handle(t, std):
    t.grad_fn.register_prehook(lambda grad_outputs: (grad_outputs[0] + torch.randn_like(grad_outputs[0]) * std,))
    return t.register_hook(lambda g: None)                          # removing this one leaves the noise on


def noise_and_drop_w_grad(t, std):
    w = t.grad_fn.next_functions[0][0].variable                     # the leaf behind t = w * 2
    w.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
    return t.register_hook(lambda g: g + torch.randn_like(g) * std)


def noise_with_global_hook(t, std):
    torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None)
    return t.register_hook(lambda g: g + torch.randn_like(g) * std)


@pytest.mark.parametrize("answer, reason", [
    (noise_in_place, "in-place"), (noise_not_returned, "not-returned"), (noise_with_variance, "noise-std"),
    (noise_uniform, "noise-mean"), (noise_one_number_for_all, "one-draw-for-all"),
    (noise_one_python_float_for_all, "one-draw-for-all"),
    (noise_returns_tensor_not_handle, "not-a-handle"), (noise_registered_twice, "hook-left-after-remove"),
    ("add_grad_noise", "not-a-function"), (noise_forgets_return, "returned-none"), (noise_hook_raises, "backward-raised"),
    (noise_at_the_node_returns_another_handle, "wrong-handle"), (noise_and_drop_w_grad, "no-grad"),
    (noise_with_global_hook, "global-hook-left")])
def test_01_1_rejects_wrong_answers(answer, reason):
    assert judged("01.1", answer) == ("wrong", reason)


def test_01_1_blank_start_is_not_solved():
    def add_grad_noise(t, std):
        # your code here
        pass
    assert verdict("01.1", add_grad_noise) == "not solved"
    assert verdict("01.1", None) == "not solved"


def test_01_1_says_why_an_in_place_edit_is_wrong():
    from hooklab.course import exercises
    status, zh, en, reason = exercises.verdict("01.1", noise_in_place)
    assert (status, reason) == ("wrong", "in-place") and "in place" in en and "原地" in zh


# ---- 01.2 replace nan gradients by 0 and count them -----------------------------------------

def nan_with_nan_to_num(t, replaced):
    def hook(grad):
        replaced.append(int((grad != grad).sum()))      # nan is the only value not equal to itself
        return torch.nan_to_num(grad, nan=0.0)
    return t.register_hook(hook)


def nan_with_masked_fill_on_a_copy(t, replaced):
    def hook(grad):
        mask = grad.isnan()
        replaced.append(mask.sum().item())              # .item() of an integer tensor is a Python int
        return grad.masked_fill(mask, 0)
    return t.register_hook(hook)


def nan_count_left_as_a_tensor(t, replaced):
    def hook(grad):
        mask = grad.isnan()
        replaced.append(mask.sum())                     # a 0-d tensor where the exercise asks for an int
        return grad.masked_fill(mask, 0)
    return t.register_hook(hook)


def nan_in_place(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        replaced.append(int(mask.sum()))
        grad[mask] = 0                                  # the sibling branch sees the zeros too
        return grad
    return t.register_hook(hook)


def nan_compared_with_equals(t, replaced):
    def hook(grad):
        mask = grad == float("nan")                     # always False
        replaced.append(int(mask.sum()))
        return torch.where(mask, torch.zeros_like(grad), grad)
    return t.register_hook(hook)


def nan_fraction_instead_of_count(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        replaced.append(mask.float().mean().item())
        return torch.where(mask, torch.zeros_like(grad), grad)
    return t.register_hook(hook)


def nan_counted_but_not_replaced(t, replaced):
    def hook(grad):
        replaced.append(int(torch.isnan(grad).sum()))
    return t.register_hook(hook)


def nan_replaced_by_one(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        replaced.append(int(mask.sum()))
        return torch.where(mask, torch.ones_like(grad), grad)
    return t.register_hook(hook)


def nan_counted_only_when_present(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        if mask.any():
            replaced.append(int(mask.sum()))
        return torch.where(mask, torch.zeros_like(grad), grad)
    return t.register_hook(hook)


@pytest.mark.parametrize("answer", [run_solution("01.2")["zero_nan_grads"], nan_with_nan_to_num,
                                    nan_with_masked_fill_on_a_copy])
def test_01_2_accepts_right_answers(answer):
    assert verdict("01.2", answer) == "correct"


def nan_count_as_a_float(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        replaced.append(float(mask.sum()))              # 3.0 where the exercise asks for the int 3
        return grad.masked_fill(mask, 0.0)
    return t.register_hook(hook)


def nan_counts_every_element(t, replaced):
    def hook(grad):
        replaced.append(grad.numel())
        return torch.nan_to_num(grad, nan=0.0)
    return t.register_hook(hook)


def nan_count_accumulated_over_passes(t, replaced):
    seen = {"nans": 0}

    def hook(grad):
        mask = grad.isnan()
        seen["nans"] += mask.sum().item()               # grows with every backward pass
        replaced.append(seen["nans"])
        return grad.masked_fill(mask, 0.0)
    return t.register_hook(hook)


@pytest.mark.parametrize("answer, reason", [
    (nan_count_accumulated_over_passes, "running-total"), (nan_in_place, "in-place"), (nan_compared_with_equals, "nan-equals"), (nan_fraction_instead_of_count, "fraction-not-count"),
    (nan_counted_but_not_replaced, "nan-left"), (nan_replaced_by_one, "not-only-nans"),
    (nan_counted_only_when_present, "one-count-per-backward"), (nan_count_left_as_a_tensor, "tensor-not-int"),
    (nan_count_as_a_float, "not-an-int"),
    (nan_counts_every_element, "nan-count")])
def test_01_2_rejects_wrong_answers(answer, reason):
    assert judged("01.2", answer) == ("wrong", reason)


def test_01_2_says_an_int_is_asked_for_not_a_tensor():
    from hooklab.course import exercises
    status, zh, en, reason = exercises.verdict("01.2", nan_count_left_as_a_tensor)
    assert (status, reason) == ("wrong", "tensor-not-int") and "not the tensor" in en and "int(mask.sum())" in en
    assert "张量" in zh and "int(mask.sum())" in zh


def test_01_2_blank_start_is_not_solved():
    def zero_nan_grads(t, replaced):
        # your code here
        pass
    assert verdict("01.2", zero_nan_grads) == "not solved"
    assert verdict("01.2", None) == "not solved"


# ---- 01.3 clip one parameter's gradient by its norm ------------------------------------------

def clip_with_get_parameter_and_tensor_min(model, name, max_norm):
    param = model.get_parameter(name)
    return param.register_hook(lambda g: g * torch.clamp(max_norm / g.norm(), max=1.0))


def clip_with_branch(model, name, max_norm):
    for pname, param in model.named_parameters():
        if pname == name:
            def clip(grad):
                norm = grad.norm()
                if norm > max_norm:
                    return grad / norm * max_norm
                return grad
            return param.register_hook(clip)


def clip_elementwise(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda g: g.clamp(-max_norm, max_norm))


def clip_always_rescale(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda g: g / g.norm() * max_norm)      # also scales small gradients UP


def clip_hard_coded_one(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda g: g * min(1.0, 1.0 / g.norm().item()))


def clip_every_parameter(model, name, max_norm):
    scope = hooklab.HookScope()
    for param in model.parameters():
        scope.add(param.register_hook(lambda g: g * min(1.0, max_norm / g.norm().item())))
    return scope                                        # has remove()... but clips the wrong parameters


def clip_late_binding_lambda(model, name, max_norm):
    handles = {}
    for pname, param in model.named_parameters():
        # `pname` is looked up when the hook RUNS: by then it is the last parameter's name
        handles[pname] = param.register_hook(
            lambda g: g * min(1.0, max_norm / g.norm().item()) if pname == name else g)
    return handles[name]


def clip_in_place_returning_grad(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    def clip(grad):
        return grad.mul_(min(1.0, max_norm / grad.norm().item()))   # right values, but edits the shared tensor
    return param.register_hook(clip)


def clip_in_place_returning_none(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    def clip(grad):
        norm = grad.norm()
        if norm > max_norm:
            grad.mul_(max_norm / norm)                  # returns None: relies on the in-place edit alone
    return param.register_hook(clip)


def clip_on_a_copy_in_place(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    def clip(grad):
        new = grad.clone()
        new.mul_(min(1.0, max_norm / new.norm().item()))   # in place on a NEW tensor: fine
        return new
    return param.register_hook(clip)


def clip_reading_dot_grad(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda g: param.grad * min(1.0, max_norm / param.grad.norm().item()))


@pytest.mark.parametrize("answer", [run_solution("01.3")["clip_param_grad"], clip_with_get_parameter_and_tensor_min,
                                    clip_with_branch, clip_on_a_copy_in_place])
def test_01_3_accepts_right_answers(answer):
    assert verdict("01.3", answer) == "correct"


def clip_spread_evenly(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    # the right norm, but every element of the same size: the direction is lost
    return param.register_hook(lambda g: g.sign() * max_norm / g.numel() ** 0.5 if g.norm() > max_norm else g)


def clip_to_nan(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda g: g * float("nan"))      # a nan norm is not "the right norm"


@pytest.mark.parametrize("answer, reason", [
    (clip_to_nan, "clip-norm"), (clip_spread_evenly, "clamped-elementwise"), (clip_elementwise, "clip-norm"), (clip_always_rescale, "scaled-below-limit"), (clip_hard_coded_one, "clip-norm"),
    (clip_every_parameter, "other-parameters"), (clip_late_binding_lambda, "clip-norm"),
    (clip_reading_dot_grad, "backward-raised"), (clip_in_place_returning_grad, "in-place"),
    (clip_in_place_returning_none, "in-place")])
def test_01_3_rejects_wrong_answers(answer, reason):
    assert judged("01.3", answer) == ("wrong", reason)


@pytest.mark.parametrize("answer", [clip_in_place_returning_grad, clip_in_place_returning_none])
def test_01_3_says_why_an_in_place_edit_is_wrong(answer):
    from hooklab.course import exercises
    status, zh, en, reason = exercises.verdict("01.3", answer)
    assert (status, reason) == ("wrong", "in-place") and "in place" in en and "原地" in zh


def test_01_3_checker_removes_its_own_watching_hook(monkeypatch):
    from hooklab.course.exercises import nb01
    cases = nb01._clip_cases()
    monkeypatch.setattr(nb01, "_clip_cases", lambda: cases)   # keep the checker's models to inspect them
    assert verdict("01.3", run_solution("01.3")["clip_param_grad"]) == "correct"
    assert all(hooklab.hook_inventory(model, include_global=False) == [] for model, *_ in cases)

    cases = nb01._clip_cases()
    assert verdict("01.3", clip_in_place_returning_grad) == "wrong"     # stops at the first case
    left = hooklab.hook_inventory(cases[0][0], include_global=False)
    assert [entry.kind for entry in left] == ["tensor"]                 # the learner's hook only, not the watcher


def test_01_3_blank_start_is_not_solved():
    def clip_param_grad(model, name, max_norm):
        # your code here
        pass
    assert verdict("01.3", clip_param_grad) == "not solved"
    assert verdict("01.3", None) == "not solved"

