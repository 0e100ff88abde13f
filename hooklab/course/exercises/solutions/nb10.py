"""Hints and reference solutions of notebook 10 (distributed and mixed precision)."""

HINTS = {
    "10.1": ("先把 `bucket.buffer()` 除以 `dist.get_world_size()`，再用 `dist.all_reduce(..., async_op=True)` 求和；"
             "`.get_future()` 得到 Future，用 `.then(lambda fut: fut.value()[0])` 取出结果张量。",
             "divide `bucket.buffer()` by `dist.get_world_size()`, then sum it with "
             "`dist.all_reduce(..., async_op=True)`; `.get_future()` gives the Future, and "
             "`.then(lambda fut: fut.value()[0])` takes the result tensor out of it."),
    "10.2": ("钩子里 `g` 是放大后的梯度：`(g / scaler.get_scale()).norm().item()` 是真实范数；"
             "用 `norms.append(...)` 记录，不要写 `return`。",
             "inside the hook `g` is the scaled gradient: `(g / scaler.get_scale()).norm().item()` is the true "
             "norm; record it with `norms.append(...)` and do not `return` anything."),
    "10.3": ("非可重入检查点属于同一次反向传播：三份梯度在到达 `AccumulateGrad` 之前已经相加；"
             "可重入检查点的每一段各自调用一次 `backward`。",
             "a non-reentrant checkpoint is part of the same backward pass: the three gradients are summed before "
             "they reach `AccumulateGrad`; each reentrant segment calls `backward` on its own."),
}

# [10.1]
import torch.distributed as dist


def mean_hook(state, bucket):
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])

# [10.2]
def unscaled_norm_hook(scaler, norms):
    def hook(g):
        norms.append((g / scaler.get_scale()).norm().item())
    return hook

# [10.3]
my_runs = [1, 3]
