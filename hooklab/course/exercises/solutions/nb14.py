"""Hints and reference solutions of notebook 14 (hooks in training frameworks)."""

HINTS = {
    "14.1": ("每个参数挂一个累加后钩子；第一个运行的钩子用 `torch.autograd.graph.queue_callback(...)` 排一个回调，"
             "并用一个标志记住“这次反向已经排过了”，回调运行时把标志复位。",
             "put a post-accumulate-grad hook on every parameter; the first one to run queues a callback with "
             "`torch.autograd.graph.queue_callback(...)` and sets a flag saying this backward pass has one "
             "queued; the callback clears the flag when it runs."),
    "14.2": ("写一个 `TorchDispatchMode` 的子类，在 `__torch_dispatch__` 里按 `func.overloadpacket.__name__` 计数，"
             "再调用 `func(*args, **(kwargs or {}))` 把结果返回；在 `with` 块里调用 `fn()`。",
             "subclass `TorchDispatchMode`; in `__torch_dispatch__` count `func.overloadpacket.__name__`, then "
             "call `func(*args, **(kwargs or {}))` and return its result; call `fn()` inside the `with` block."),
    "14.3": ("`state` 就是注册时传入的那个字典：`state['calls'] += 1`，`state['values'] += bucket.buffer().numel()`；"
             "然后像 10.1 那样除以进程数、`all_reduce`，返回 Future。",
             "`state` is the very dict given at registration: `state['calls'] += 1`, "
             "`state['values'] += bucket.buffer().numel()`; then divide by the world size, `all_reduce` and return "
             "the Future as in 10.1."),
}

# [14.1]
import torch

def once_per_backward(params, on_done):
    queued = [False]

    def finish():
        queued[0] = False
        on_done()

    def hook(param):
        if not queued[0]:
            queued[0] = True
            torch.autograd.graph.queue_callback(finish)

    return [p.register_post_accumulate_grad_hook(hook) for p in params]

# [14.2]
from collections import Counter
from torch.utils._python_dispatch import TorchDispatchMode

class Counting(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

def count_ops(fn):
    with Counting() as mode:
        fn()
    return dict(mode.counts)

# [14.3]
import torch.distributed as dist

def counting_mean_hook(state, bucket):
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])
