"""Hints and reference solutions of notebook 01 (tensor hooks)."""
import torch

HINTS = {
    "01.1": ("钩子里返回 `grad + torch.randn_like(grad) * std`（一个新张量，形状和 dtype 都与 `grad` 相同）；"
             "`register_hook` 的返回值就是要交回的句柄。",
             "the hook returns `grad + torch.randn_like(grad) * std` (a new tensor with `grad`'s shape and "
             "dtype); what `register_hook` returns is the handle to hand back."),
    "01.2": ("`mask = torch.isnan(grad)` 找出 nan（`grad == float('nan')` 永远是 False）；"
             "`replaced.append(int(mask.sum()))`，再返回 `torch.where(mask, torch.zeros_like(grad), grad)`。",
             "find the nans with `mask = torch.isnan(grad)` (`grad == float('nan')` is always False); "
             "`replaced.append(int(mask.sum()))`, then return `torch.where(mask, torch.zeros_like(grad), grad)`."),
    "01.3": ("`param = dict(model.named_parameters())[name]`，钩子返回 "
             "`grad * min(1.0, max_norm / grad.norm().item())`；交回 `param.register_hook(...)` 的句柄。",
             "`param = dict(model.named_parameters())[name]`; the hook returns "
             "`grad * min(1.0, max_norm / grad.norm().item())`; hand back what `param.register_hook(...)` returns."),
}

# [01.1]
def add_grad_noise(t, std):
    def noisy(grad):
        return grad + torch.randn_like(grad) * std
    return t.register_hook(noisy)

# [01.2]
def zero_nan_grads(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        replaced.append(int(mask.sum()))
        return torch.where(mask, torch.zeros_like(grad), grad)
    return t.register_hook(hook)

# [01.3]
def clip_param_grad(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    def clip(grad):
        return grad * min(1.0, max_norm / grad.norm().item())
    return param.register_hook(clip)
