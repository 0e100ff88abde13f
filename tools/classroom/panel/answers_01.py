"""Honest answers to notebook 01's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import functools

import torch

from tools.classroom.panel import answer

# --- 01.1: add Gaussian noise to a tensor's gradient -----------------------------------------------------------------


@answer("01.1", right=True)
def add_grad_noise_with_randn_like(t, std):
    def noisy(grad):
        return grad + std * torch.randn_like(grad)

    return t.register_hook(noisy)


def _add_noise(grad, std):
    return grad + torch.normal(0.0, std, size=grad.shape, dtype=grad.dtype, device=grad.device)


@answer("01.1", right=True)
def add_grad_noise_with_partial_and_normal(t, std):
    return t.register_hook(functools.partial(_add_noise, std=std))


@answer("01.1", mistake="in-place-grad", says="adds the noise to grad in place (add_) inside the hook instead of "
        "returning a new tensor, so a branch sharing that gradient tensor gets the noise too")
def add_grad_noise_in_place(t, std):
    def noisy(grad):
        grad.add_(torch.randn_like(grad) * std)
        return grad

    return t.register_hook(noisy)


@answer("01.1", mistake="no-return", says="registers the hook but does not return its handle")
def add_grad_noise_without_returning_the_handle(t, std):
    t.register_hook(lambda grad: grad + std * torch.randn_like(grad))


@answer("01.1", mistake="no-return", says="the hook computes the noisy gradient but returns None, so the gradient "
        "flows on unchanged")
def add_grad_noise_hook_without_return(t, std):
    def noisy(grad):
        noisy_grad = grad + std * torch.randn_like(grad)  # noqa: F841 - the learner forgot the return

    return t.register_hook(noisy)


@answer("01.1", mistake="logic", says="scales the standard normal noise by std squared (the variance) instead of std")
def add_grad_noise_scaled_by_the_variance(t, std):
    return t.register_hook(lambda grad: grad + std ** 2 * torch.randn_like(grad))


@answer("01.1", mistake="logic", says="draws one noise value for the whole gradient instead of one per element, so "
        "every element is shifted by the same amount")
def add_grad_noise_one_draw_for_all(t, std):
    def noisy(grad):
        return grad + std * torch.randn(()).item()

    return t.register_hook(noisy)


@answer("01.1", mistake="logic", says="uses torch.rand_like (uniform on [0, 1)) instead of torch.randn_like, so the "
        "noise has mean std / 2 and is not Gaussian")
def add_grad_noise_uniform(t, std):
    return t.register_hook(lambda grad: grad + std * torch.rand_like(grad))


# --- 01.2: replace nan by 0 in the gradient, and count them ----------------------------------------------------------


@answer("01.2", right=True)
def zero_nan_grads_with_where(t, replaced):
    def fix(grad):
        nans = torch.isnan(grad)
        replaced.append(int(nans.sum()))
        return torch.where(nans, torch.zeros_like(grad), grad)

    return t.register_hook(fix)


class _NanZeroer:
    def __init__(self, replaced):
        self.replaced = replaced

    def __call__(self, grad):
        mask = grad.isnan()
        self.replaced.append(mask.sum().item())
        return grad.masked_fill(mask, 0.0)


@answer("01.2", right=True)
def zero_nan_grads_with_a_callable_class(t, replaced):
    return t.register_hook(_NanZeroer(replaced))


@answer("01.2", mistake="in-place-grad", says="writes the zeros into grad in place (grad[mask] = 0) inside the hook "
        "instead of returning a new tensor")
def zero_nan_grads_in_place(t, replaced):
    def fix(grad):
        mask = torch.isnan(grad)
        replaced.append(int(mask.sum()))
        grad[mask] = 0.0

    return t.register_hook(fix)


@answer("01.2", mistake="logic", says="counts the nans with grad == nan, which is always False since nan != nan, so "
        "it always appends 0 (the replacement itself is right)")
def zero_nan_grads_counting_with_equality(t, replaced):
    def fix(grad):
        replaced.append(int((grad == float("nan")).sum()))
        return torch.nan_to_num(grad, nan=0.0, posinf=float("inf"), neginf=float("-inf"))

    return t.register_hook(fix)


@answer("01.2", mistake="shape-or-dtype", says="appends the count as a 0-dim tensor instead of an int")
def zero_nan_grads_appending_a_tensor(t, replaced):
    def fix(grad):
        mask = torch.isnan(grad)
        replaced.append(mask.sum())
        return torch.where(mask, torch.zeros_like(grad), grad)

    return t.register_hook(fix)


@answer("01.2", mistake="stale-state", says="keeps a running total across backward passes and appends the total, "
        "not the number replaced this time")
def zero_nan_grads_appending_a_running_total(t, replaced):
    total = [0]

    def fix(grad):
        mask = torch.isnan(grad)
        total[0] += int(mask.sum())
        replaced.append(total[0])
        return grad.masked_fill(mask, 0.0)

    return t.register_hook(fix)


@answer("01.2", mistake="count", says="appends the count only when some nan was replaced, so a backward pass without "
        "nan appends nothing instead of 0")
def zero_nan_grads_appending_only_when_found(t, replaced):
    def fix(grad):
        mask = torch.isnan(grad)
        found = int(mask.sum())
        if found:
            replaced.append(found)
        return torch.where(mask, torch.zeros_like(grad), grad)

    return t.register_hook(fix)


# --- 01.3: clip one parameter's gradient to a maximum norm -----------------------------------------------------------


@answer("01.3", right=True)
def clip_param_grad_with_named_parameters(model, name, max_norm):
    param = dict(model.named_parameters())[name]

    def clip(grad):
        norm = grad.norm()
        if norm > max_norm:
            return grad * (max_norm / norm)
        return None

    return param.register_hook(clip)


@answer("01.3", right=True)
def clip_param_grad_without_a_branch(model, name, max_norm):
    param = model.get_parameter(name)

    def clip(grad):
        scale = torch.clamp(max_norm / grad.norm(), max=1.0)
        return grad * scale

    return param.register_hook(clip)


@answer("01.3", right=True)
def clip_param_grad_with_a_loop(model, name, max_norm):
    for param_name, param in model.named_parameters():
        if param_name == name:
            def clip(grad):
                norm = torch.linalg.vector_norm(grad)
                return grad * (max_norm / norm) if norm > max_norm else grad
            return param.register_hook(clip)
    raise KeyError(name)


@answer("01.3", mistake="wrong-target", says="registers the clipping hook on every parameter of the model instead "
        "of only the one called name")
def clip_param_grad_on_every_parameter(model, name, max_norm):
    handle = None
    for param_name, param in model.named_parameters():
        def clip(grad):
            norm = grad.norm()
            return grad * (max_norm / norm) if norm > max_norm else grad
        h = param.register_hook(clip)
        if param_name == name:
            handle = h
    return handle


@answer("01.3", mistake="logic", says="clamps each element to [-max_norm, max_norm] instead of scaling the whole "
        "gradient down to norm max_norm")
def clip_param_grad_element_wise(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda grad: grad.clamp(-max_norm, max_norm))


@answer("01.3", mistake="logic", says="always rescales the gradient to norm max_norm, also when its norm is already "
        "smaller")
def clip_param_grad_always_rescaling(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    return param.register_hook(lambda grad: grad * (max_norm / grad.norm()))


@answer("01.3", mistake="in-place-grad", says="scales the gradient in place (mul_) inside the hook instead of "
        "returning a new tensor")
def clip_param_grad_in_place(model, name, max_norm):
    param = dict(model.named_parameters())[name]

    def clip(grad):
        norm = grad.norm()
        if norm > max_norm:
            grad.mul_(max_norm / norm)

    return param.register_hook(clip)


@answer("01.3", mistake="logic", says="the scale factor is inverted (norm / max_norm), so a large gradient is made "
        "even larger")
def clip_param_grad_inverted_factor(model, name, max_norm):
    param = dict(model.named_parameters())[name]

    def clip(grad):
        norm = grad.norm()
        if norm > max_norm:
            return grad * (norm / max_norm)
        return grad

    return param.register_hook(clip)
