"""Hints and reference solutions of notebook 09 (hooks beyond autograd)."""
import torch

HINTS = {
    "09.1": ("钩子原地修改 `state_dict`：若 `local_metadata.get(\"version\", 1) < 2`，就 `pop` 出 `prefix + \"fc.weight\"`，"
             "`squeeze(-1)` 后存为 `prefix + \"head.weight\"`；`fc.bias` 同理；再用 `state_dict.setdefault(prefix + "
             "\"temperature\", torch.ones(()))` 补上缓冲区。所有键都要以 `prefix` 开头。",
             "edit `state_dict` in place: if `local_metadata.get(\"version\", 1) < 2`, `pop` `prefix + \"fc.weight\"`, "
             "`squeeze(-1)` it and store it as `prefix + \"head.weight\"`; the same for `fc.bias`; then fill the buffer "
             "with `state_dict.setdefault(prefix + \"temperature\", torch.ones(()))`. Every key starts with `prefix`."),
    "09.2": ("在钩子里检查 `all(torch.isfinite(p.grad).all() for g in optimizer.param_groups for p in g[\"params\"] "
             "if p.grad is not None)`；不全是有限值时，把**每个**参数的 `p.grad` 设为 `None`（不是清零：清零后动量和权重衰减"
             "仍会移动参数）。用 `optimizer.register_step_pre_hook` 注册并返回句柄。",
             "in the hook check `all(torch.isfinite(p.grad).all() for g in optimizer.param_groups for p in g[\"params\"] "
             "if p.grad is not None)`; when not all are finite, set **every** parameter's `p.grad` to `None` (not zero: "
             "momentum and weight decay still move a parameter whose gradient is zero). Register it with "
             "`optimizer.register_step_pre_hook` and return the handle."),
}

# [09.1]
def upgrade(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    for name in ("weight", "bias"):
        old_key = f"{prefix}fc.{name}"
        if old_key in state_dict:
            value = state_dict.pop(old_key)
            state_dict[f"{prefix}head.{name}"] = value.squeeze(-1) if name == "weight" else value
    state_dict.setdefault(f"{prefix}temperature", torch.ones(()))

# [09.2]
def skip_nonfinite(optimizer):
    def hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad = None  # built-in optimizers skip parameters without a gradient
    return optimizer.register_step_pre_hook(hook)
