"""Exercises of notebook 10 (distributed and mixed precision): a comm hook, an unscaled norm, hook runs.

10.1 runs the learner's communication hook under DDP in two local ``gloo`` processes
(:func:`hooklab.workers.run_workers`, killed after a deadline); 10.2 and 10.3 run in this process.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

from . import NotSolved, Wrong, call_answer, exercise, require_callable
from ._comm import ddp_and_plain, guard, run_checked


# ---- 10.1 an fp32 communication hook --------------------------------------------------------

def _train_with_hook(rank: int, world_size: int, hook: Any) -> dict:
    """Two DDP steps with ``hook``; what it returned, and .grad against the exact mean."""
    model, plain, ddp = ddp_and_plain(10)
    report: dict = {"calls": 0, "problem": None, "kinds": set()}

    ddp.register_comm_hook(None, guard(hook, report))
    for step in range(2):
        ddp.zero_grad()
        plain.zero_grad()
        torch.manual_seed(100 * step + rank)
        x = torch.randn(7, 6)
        ddp(x).square().mean().backward()
        plain(x).square().mean().backward()
        for p, q in zip(model.parameters(), plain.parameters()):
            mean = q.grad.clone()
            dist.all_reduce(mean)
            mean /= world_size
            report["kinds"].add(_what_grad_is(p.grad, q.grad, mean, world_size))
    return report


def _what_grad_is(grad: torch.Tensor | None, local: torch.Tensor, mean: torch.Tensor, world_size: int) -> str:
    """What DDP left in ``.grad``: "mean" (right), or which typical mistake it looks like."""
    if grad is None:
        return "none"
    if grad.dtype != torch.float32:
        return "dtype"
    close = lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-7)  # noqa: E731
    if close(grad, mean):
        return "mean"
    if close(grad, local):
        return "local"
    if close(grad, mean * world_size):
        return "sum"
    if close(grad, mean / world_size):
        return "twice"
    if torch.allclose(grad, mean, rtol=2e-2, atol=1e-4):
        return "rounded"
    return "other"


_GRAD_MESSAGES = {
    "none": ("反向之后有参数的 `.grad` 是 None：你的 Future 的结果要是与 `bucket.buffer()` 同形状的张量。",
             "a parameter's `.grad` is None after backward: your Future's result must be a tensor shaped like "
             "`bucket.buffer()`."),
    "dtype": ("反向之后的 `.grad` 不是 float32：把结果转回 float32 再交给 DDP。",
              "`.grad` after backward is not float32: cast the result back to float32 before handing it to DDP."),
    "local": ("反向之后的 `.grad` 仍是本进程自己的梯度：你的钩子没有在进程之间通信。对 `bucket.buffer()` 调用 "
              "`dist.all_reduce(..., async_op=True)`，返回它的 Future。",
              "`.grad` after backward is still this process's own gradient: your hook never communicated. Call "
              "`dist.all_reduce(..., async_op=True)` on `bucket.buffer()` and return its Future."),
    "sum": ("反向之后的 `.grad` 是两个进程梯度的**和**，不是平均值：除以 `dist.get_world_size()`。",
            "`.grad` after backward is the **sum** of the two processes' gradients, not their mean: divide by "
            "`dist.get_world_size()`."),
    "twice": ("反向之后的 `.grad` 是平均值再除以一次进程数：只除一次。",
              "`.grad` after backward is the mean divided by the number of processes once more: divide only once."),
    "rounded": ("反向之后的 `.grad` 接近平均值，但差了低精度的舍入误差：通信时不要转成 16 位，这道题要的是 float32 的精确平均值。",
                "`.grad` after backward is close to the mean but off by low-precision rounding: do not cast to 16 "
                "bits on the way; this exercise asks for the exact float32 mean."),
    "other": ("反向之后的 `.grad` 既不是平均值，也不是本进程的梯度或两个进程梯度的和：检查你的钩子对 `bucket.buffer()` 做了什么。",
              "`.grad` after backward is neither the mean nor this process's gradient nor the sum of both: check "
              "what your hook does to `bucket.buffer()`."),
}


def _blank(state, bucket):
    pass


@exercise("10.1",
          hint=("先把 `bucket.buffer()` 除以 `dist.get_world_size()`，再用 `dist.all_reduce(..., async_op=True)` 求和；"
                "`.get_future()` 得到 Future，用 `.then(lambda fut: fut.value()[0])` 取出结果张量。",
                "divide `bucket.buffer()` by `dist.get_world_size()`, then sum it with "
                "`dist.all_reduce(..., async_op=True)`; `.get_future()` gives the Future, and "
                "`.then(lambda fut: fut.value()[0])` takes the result tensor out of it."),
          solution='''
import torch.distributed as dist

def mean_hook(state, bucket):
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])
''')
def comm_hook(answer: Any) -> None:
    require_callable(answer, "mean_hook")
    code = getattr(answer, "__code__", None)
    if code is not None and code.co_code == _blank.__code__.co_code:  # only `pass`: no processes needed to say so
        raise NotSolved("你的钩子还没有返回任何值（返回了 None）；它要返回一个 Future。",
                        "your hook returns None so far; it must return a Future.")
    reports = run_checked(_train_with_hook, answer, not_solved=(
        "你的钩子还没有返回任何值（返回了 None）；它要返回一个 Future。",
        "your hook returns None so far; it must return a Future."))
    report = reports[0]
    if report["calls"] == 0:
        raise Wrong("DDP 没有调用你的钩子。", "DDP never called your hook.")
    kinds = set().union(*(r["kinds"] for r in reports)) - {"mean"}
    for kind in _GRAD_MESSAGES:  # the first mistake in this order names what is wrong
        if kind in kinds:
            raise Wrong(*_GRAD_MESSAGES[kind])


# ---- 10.2 a gradient norm the scale cannot fool -----------------------------------------------

def _scaled_backward(hooks_for: Any) -> tuple[list, list, list]:
    """Scaled backward of a fresh model; (scaled grads, unscaled norms, what the hooks recorded)."""
    torch.manual_seed(12)
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms: list = []
    handles = []
    try:
        if hooks_for is not None:
            for p in model.parameters():
                hook = call_answer(hooks_for, scaler, norms)
                if not callable(hook):
                    raise Wrong(f"`unscaled_norm_hook` 应返回一个钩子函数，收到的是 {type(hook).__name__}。",
                                f"`unscaled_norm_hook` must return a hook function, got a {type(hook).__name__}.")
                handles.append(p.register_hook(hook))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(9, 5)).float().square().mean()
        try:
            scaler.scale(loss).backward()
        except Exception as exc:
            raise Wrong(f"反向时你的钩子抛出了 {type(exc).__name__}: {exc}",
                        f"your hook raised {type(exc).__name__} during backward: {exc}") from exc
        scaled = [p.grad.clone() for p in model.parameters()]
        scaler.unscale_(optimizer)
        return scaled, [p.grad.norm().item() for p in model.parameters()], norms
    finally:
        for h in handles:
            h.remove()


@exercise("10.2",
          hint=("钩子里 `g` 是放大后的梯度：`(g / scaler.get_scale()).norm().item()` 是真实范数；"
                "用 `norms.append(...)` 记录，不要写 `return`。",
                "inside the hook `g` is the scaled gradient: `(g / scaler.get_scale()).norm().item()` is the true "
                "norm; record it with `norms.append(...)` and do not `return` anything."),
          solution='''
def unscaled_norm_hook(scaler, norms):
    def hook(g):
        norms.append((g / scaler.get_scale()).norm().item())
    return hook
''')
def unscaled_norm(answer: Any) -> None:
    require_callable(answer, "unscaled_norm_hook")
    reference_scaled, true_norms, _ = _scaled_backward(None)
    scaled, _, norms = _scaled_backward(answer)
    if any(not torch.equal(a, b) for a, b in zip(scaled, reference_scaled)):
        raise Wrong("你的钩子改变了梯度：观察用的钩子要返回 None。",
                    "your hook changed the gradients: an observing hook must return None.")
    if len(norms) != len(true_norms):
        raise Wrong(f"`norms` 里有 {len(norms)} 个值，模型有 {len(true_norms)} 个参数，每个参数的钩子应追加一个。",
                    f"`norms` holds {len(norms)} values for {len(true_norms)} parameters; each parameter's hook "
                    "should append one.")
    if not all(isinstance(n, float) for n in norms):
        raise Wrong("`norms` 里应是 Python float（用 `.item()`）。", "`norms` should hold Python floats (use `.item()`).")
    if not torch.allclose(torch.tensor(sorted(norms)), torch.tensor(sorted(true_norms)), rtol=1e-4):
        scale_hint = torch.allclose(torch.tensor(sorted(norms)), torch.tensor(sorted(true_norms)) * 2.0**10, rtol=1e-4)
        raise Wrong("记录的范数与 `unscale_` 之后的不一致" + ("：它们正好大了缩放因子倍，忘了除以 `scaler.get_scale()`。" if scale_hint else "。"),
                    "the recorded norms differ from those after `unscale_`" +
                    (": they are exactly the scale too large; divide by `scaler.get_scale()`." if scale_hint else "."))


# ---- 10.3 how many runs -----------------------------------------------------------------------

def _tensor_hook_runs(uses: int, reentrant: bool) -> int:
    torch.manual_seed(13)
    layer = nn.Linear(4, 4)
    runs = [0]
    layer.weight.register_hook(lambda g: runs.__setitem__(0, runs[0] + 1))
    h = torch.randn(2, 4, requires_grad=True)
    for _ in range(uses):
        h = torch.utils.checkpoint.checkpoint(layer, h, use_reentrant=reentrant).tanh()
    h.sum().backward()
    return runs[0]


@exercise("10.3",
          hint=("非可重入检查点属于同一次反向传播：三份梯度在到达 `AccumulateGrad` 之前已经相加；"
                "可重入检查点的每一段各自调用一次 `backward`。",
                "a non-reentrant checkpoint is part of the same backward pass: the three gradients are summed before "
                "they reach `AccumulateGrad`; each reentrant segment calls `backward` on its own."),
          solution='''
my_runs = [1, 3]
''')
def predict_runs(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把两个预测（非可重入、可重入各一个整数）按顺序填进 `my_runs`。",
                        "put your two predictions (one int each for non-reentrant and reentrant) into `my_runs`.")
    if (not isinstance(answer, (list, tuple)) or len(answer) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in answer)):
        raise Wrong("`my_runs` 应是两个整数组成的列表：先非可重入，后可重入。",
                    "`my_runs` must be a list of two ints: non-reentrant first, then reentrant.")
    truth = [_tensor_hook_runs(3, reentrant=False), _tensor_hook_runs(3, reentrant=True)]
    wrong_zh, wrong_en = [], []
    if answer[0] != truth[0]:
        wrong_zh.append(f"非可重入的 {answer[0]} 不对：三次使用的梯度在同一次反向里先相加，再到达 `AccumulateGrad`")
        wrong_en.append(f"the non-reentrant {answer[0]} is off: within one backward pass the three uses' gradients "
                        f"are summed before they reach `AccumulateGrad`")
    if answer[1] != truth[1]:
        wrong_zh.append(f"可重入的 {answer[1]} 不对：每个可重入的检查点段在反向时各自调用一次 `backward`，数一数有几段")
        wrong_en.append(f"the reentrant {answer[1]} is off: each reentrant segment calls `backward` on its own "
                        f"during backward; count the segments")
    if wrong_en:
        raise Wrong("；".join(wrong_zh) + "。可以用第 7 节的 `hook_runs` 改成三段验证。",
                    "; ".join(wrong_en) + ". Check it with section 7's `hook_runs` extended to three uses.")
