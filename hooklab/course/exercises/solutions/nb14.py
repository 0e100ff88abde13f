"""Hints and reference solutions of notebook 14 (hooks in training frameworks)."""

HINTS = {
    "14.1": ("`torch.autograd.graph.register_multi_grad_hook(params, fn, mode=\"any\")` 在每次反向里、第一个梯度算好时运行一次 "
             "`fn`，即使有的参数没用上，即使上一次反向出了错；在 `fn` 里用 `torch.autograd.graph.queue_callback(on_done)` "
             "把 `on_done` 排到这次反向的末尾。返回它的句柄（放在列表里）。",
             "`torch.autograd.graph.register_multi_grad_hook(params, fn, mode=\"any\")` runs `fn` once in every "
             "backward pass, when the first gradient is computed, also when some parameter is unused and after a pass "
             "that failed; in `fn`, `torch.autograd.graph.queue_callback(on_done)` puts `on_done` at the end of that "
             "pass. Return its handle (in a list)."),
    "14.2": ("写一个 `TorchDispatchMode` 的子类：在 `__torch_dispatch__` 里先 `out = func(*args, **(kwargs or {}))`，"
             "再检查输出里的每个浮点张量（输出可能是元组），第一个有非有限值（`torch.isfinite`，不只是 NaN）的算子记下 "
             "`(阶段, func.overloadpacket.__name__)`，阶段看 `torch._C._current_graph_task_id() != -1`；最后返回 `out`。"
             "在 `with` 块里调用 `fn()`。",
             "subclass `TorchDispatchMode`; in `__torch_dispatch__`, first `out = func(*args, **(kwargs or {}))`, then "
             "check every floating-point tensor of the output (it may be a tuple): the first op with a non-finite "
             "value (`torch.isfinite`, not just NaN) gives `(phase, func.overloadpacket.__name__)`, the phase from "
             "`torch._C._current_graph_task_id() != -1`; return `out`. Call `fn()` inside the `with` block."),
    "14.3": ("`state` 就是注册时传入的那个字典：`state['calls'] += 1`，`state['values'] += bucket.buffer().numel()`；"
             "然后像 10.1 那样除以进程数、`all_reduce`，返回 Future。",
             "`state` is the very dict given at registration: `state['calls'] += 1`, "
             "`state['values'] += bucket.buffer().numel()`; then divide by the world size, `all_reduce` and return "
             "the Future as in 10.1."),
    "14.4": ("FSDP2 的前向前置钩子用 `prepend=True` 排在最前面，前向钩子普通注册：你的前向前置钩子普通注册，就在收集之后运行；"
             "前向钩子要 `prepend=True` 才排在释放之前。记下 `module.weight.detach().clone()`：前向结束后 FSDP2 会释放那块存储。",
             "FSDP2's forward pre-hook goes first (`prepend=True`) and its forward hook is registered plainly: a forward "
             "pre-hook of yours registered plainly runs after the gather; a forward hook needs `prepend=True` to run "
             "before the free. Record `module.weight.detach().clone()`: FSDP2 frees that storage once forward is over."),
}

# [14.1]
import torch


def once_per_backward(params, on_done):
    def first_gradient_of_the_pass(grads):
        torch.autograd.graph.queue_callback(on_done)
    return [torch.autograd.graph.register_multi_grad_hook(params, first_gradient_of_the_pass, mode="any")]

# [14.2]
from torch.utils._python_dispatch import TorchDispatchMode


class FirstNonFinite(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.found = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        if self.found is None and any(isinstance(t, torch.Tensor) and t.is_floating_point()
                                      and not torch.isfinite(t).all() for t in outputs):
            phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
            self.found = (phase, func.overloadpacket.__name__)
        return out

def first_nonfinite_op(fn):
    with FirstNonFinite() as mode:
        fn()
    return mode.found

# [14.3]
import torch.distributed as dist


def counting_mean_hook(state, bucket):
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])

# [14.4]
def watch_full_weight(module, record):
    def look(module, args):   # a plain forward pre-hook runs after FSDP2's gather (which is prepended)
        record(module.weight.detach().clone())
    return module.register_forward_pre_hook(look)
