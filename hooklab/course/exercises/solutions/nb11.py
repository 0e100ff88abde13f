"""Hints and reference solutions of notebook 11 (hooks with compilers and function transforms)."""
import torch

import hooklab

HINTS = {
    "11.1": ("把参数取成字典 `params = {k: v.detach() for k, v in model.named_parameters()}`，写一个单样本损失 "
             "`def loss(params, xi, yi): return F.mse_loss(functional_call(model, params, (xi,)), yi)`，"
             "然后 `vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)` 给出每个参数的逐样本梯度"
             "（第一维是批）。把每个梯度展平成 `(batch, -1)`，沿第 1 维拼起来，再求每行的范数。",
             "take the parameters as a dict, `params = {k: v.detach() for k, v in model.named_parameters()}`, "
             "write a one-sample loss `def loss(params, xi, yi): return F.mse_loss(functional_call(model, params, "
             "(xi,)), yi)`, then `vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)` gives each parameter's "
             "per-sample gradients (batch first). Flatten each to `(batch, -1)`, concatenate along dim 1, and take "
             "the norm of each row."),
    "11.2": ("`torch.enable_grad()` 离不开 `torch.inference_mode()`：把整个计算包在 "
             "`with torch.inference_mode(False), torch.enable_grad():` 里；在里面，如果 `x.is_inference()`，"
             "先 `x = x.clone()`。钩子交给 `hooklab.HookScope`，最后返回 `cam.detach()`。",
             "`torch.enable_grad()` does not leave `torch.inference_mode()`: wrap the whole computation in "
             "`with torch.inference_mode(False), torch.enable_grad():`; inside, if `x.is_inference()`, "
             "`x = x.clone()` first. Give the hooks to a `hooklab.HookScope`, and return `cam.detach()`."),
    "11.3": ("钩子里只做张量运算：`store[\"last\"] = output.detach()`（字典的同一个键，不要 `append` 到列表），"
             "`store[\"calls\"].add_(1)`（在张量上原地加一，不要用 Python 整数，也不要 `.item()`），不要 `print`，"
             "也不要返回值。",
             "keep the hook to tensor operations: `store[\"last\"] = output.detach()` (the same dict key, no `append` "
             "to a list), `store[\"calls\"].add_(1)` (add one in place on the tensor; no Python int, no `.item()`), "
             "no `print`, and return nothing."),
}

# [11.1]
def per_sample_grad_norms(model, x, y):
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, xi, yi):
        return F.mse_loss(functional_call(model, params, (xi,)), yi)

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    flat = torch.cat([g.reshape(len(x), -1) for g in grads.values()], dim=1)
    return flat.norm(dim=1)

# [11.2]
def robust_grad_cam(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad(), hooklab.HookScope() as scope:
        if x.is_inference():
            x = x.clone()  # inference tensors cannot be saved for backward
        scope.add(layer.register_forward_hook(keep))
        model(x)[:, target].sum().backward()
    weights = store["grad"].mean(dim=(2, 3), keepdim=True)
    return (weights * store["act"]).sum(1).relu().detach()

# [11.3]
def make_monitor(store):
    def monitor(module, args, output):
        store["last"] = output.detach()   # a fixed key: no guard on a growing list
        store["calls"].add_(1)            # a tensor op: no .item(), no Python int
    return monitor
