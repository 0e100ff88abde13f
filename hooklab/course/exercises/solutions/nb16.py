"""Hints and reference solutions of notebook 16 (hooks across a training run)."""
import torch

import hooklab

HINTS = {
    "16.1": ("每个参数一个 `torch.optim.SGD([p], lr=lr)`；在它的累加后钩子里数这个参数的梯度到达了几次，"
             "次数是 `micro_batches` 的倍数时才 `step()`，然后 `p.grad = None`。把每个句柄交给一个 `hooklab.HookScope` 并返回它。",
             "one `torch.optim.SGD([p], lr=lr)` per parameter; in its post-accumulate-grad hook count how often this "
             "parameter's gradient arrived, and only when the count is a multiple of `micro_batches` call `step()`, "
             "then `p.grad = None`. Hand every handle to a `hooklab.HookScope` and return it."),
    "16.2": ("`torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])` 是一个张量；"
             "`history[step % len(history)] = norm` 原地写进去。`norm > limit` 也是一个（布尔）张量，`spikes += norm > limit` "
             "原地加上 0 或 1：不调用 `.item()`，也不用 `if` 判断张量。",
             "`torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])` is a tensor; "
             "`history[step % len(history)] = norm` writes it in place. `norm > limit` is a (boolean) tensor too, and "
             "`spikes += norm > limit` adds 0 or 1 in place: no `.item()`, no `if` on a tensor."),
    "16.3": ("第 6 节：每个 epoch 注册一次的钩子越积越多；`AveragedModel` 用 `deepcopy` 复制模型，也复制了当时层上所有的钩子。",
             "section 6: a hook registered every epoch piles up; `AveragedModel` copies the model with `deepcopy`, "
             "and with it every hook the layer had at that moment."),
}

# [16.1]
def attach_optimizer_in_backward(model, lr, micro_batches):
    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    arrived = {p: 0 for p in model.parameters()}

    def step_on_the_last_micro_batch(p):
        arrived[p] += 1
        if arrived[p] % micro_batches == 0:
            optimizers[p].step()
            p.grad = None

    scope = hooklab.HookScope()
    for p in model.parameters():
        scope.add(p.register_post_accumulate_grad_hook(step_on_the_last_micro_batch))
    return scope

# [16.2]
def log_norm(history, spikes, step, model, limit):
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    history[step % len(history)] = norm
    spikes += norm > limit    # a tensor op: 0 or 1 added on the device, nothing read on the host

# [16.3]
my_calls = [9, 3]
