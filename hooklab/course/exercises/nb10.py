"""Exercises of notebook 10 (distributed and mixed precision): a comm hook, an unscaled norm, hook runs.

10.1 runs the learner's communication hook under DDP in two local ``gloo`` processes (:mod:`._comm`); 10.2 and
10.3 run in this process.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

from . import exercise
from ._comm import ddp_and_plain, guard, run_checked
from ._support import NotSolved, call_answer, expect, expect_no_slip, guarded

# ---- 10.1 an fp32 communication hook --------------------------------------------------------

def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def _train_with_hook(rank: int, world_size: int, hook: Any) -> dict:
    """Two DDP steps with ``hook``; what it returned, and what .grad is against the exact mean (:func:`_grad_is`)."""
    model, plain, ddp = ddp_and_plain(10)
    report: dict = {"kinds": set(), "reduces": 0, "most_reduces": 0}
    all_reduce = dist.all_reduce

    def counted(*args: Any, **kwargs: Any) -> Any:  # the all-reduces the hook starts (this process only)
        report["reduces"] += 1
        return all_reduce(*args, **kwargs)

    def counting(state, bucket):  # no annotations, as in _comm.guard
        report["reduces"], dist.all_reduce = 0, counted
        try:
            return hook(state, bucket)
        finally:
            dist.all_reduce = all_reduce
            report["most_reduces"] = max(report["most_reduces"], report["reduces"])

    ddp.register_comm_hook(None, guard(counting, report))
    for step in range(2):
        ddp.zero_grad()
        plain.zero_grad()
        torch.manual_seed(100 * step + rank)
        x = torch.randn(7, 6)
        ddp(x).square().mean().backward()
        plain(x).square().mean().backward()
        for p, local in zip(model.parameters(), _grads(plain)):
            mean = local.clone()
            dist.all_reduce(mean)
            report["kinds"].add(_grad_is(p.grad, local, mean / world_size, world_size))
    return report


def _grad_is(grad: torch.Tensor | None, local: torch.Tensor, mean: torch.Tensor, world_size: int) -> str:
    """What DDP left in ``.grad``: "mean" (right), or which typical mistake it looks like."""
    if grad is None or grad.dtype != torch.float32:
        return "no-grad" if grad is None else "not-float32"
    close = {"mean": mean, "local": local, "sum": mean * world_size, "divided-twice": mean / world_size}
    exact = [kind for kind, value in close.items() if torch.allclose(grad, value, rtol=1e-5, atol=1e-7)]
    return exact[0] if exact else "rounded" if torch.allclose(grad, mean, rtol=2e-2, atol=1e-4) else "other"


_BLANK_HOOK = ("你的钩子还没有返回任何值（返回了 None）；它要返回一个 Future。",
               "your hook returns None so far; it must return a Future.")


@exercise("10.1", answer="mean_hook")
def comm_hook(answer: Any) -> None:
    reports = run_checked(_train_with_hook, answer, not_solved=_BLANK_HOOK)
    kinds = set().union(*(r["kinds"] for r in reports))  # the first rule broken, in this order, names the mistake
    expect("no-grad" not in kinds, "no-grad", "反向之后有参数的 `.grad` 是 None：你的 Future 的结果要是与 `bucket.buffer()` 同形状的张量。",
           "a parameter's `.grad` is None after backward: your Future's result must be a tensor shaped like "
           "`bucket.buffer()`.")
    expect("not-float32" not in kinds, "not-float32", "反向之后的 `.grad` 不是 float32：把结果转回 float32 再交给 DDP。",
           "`.grad` after backward is not float32: cast the result back to float32 before handing it to DDP.")
    expect("local" not in kinds, "local", "反向之后的 `.grad` 仍是本进程自己的梯度：你的钩子没有在进程之间通信。对 "
           "`bucket.buffer()` 调用 `dist.all_reduce(..., async_op=True)`，返回它的 Future。",
           "`.grad` after backward is still this process's own gradient: your hook never communicated. Call "
           "`dist.all_reduce(..., async_op=True)` on `bucket.buffer()` and return its Future.")
    expect(kinds == {"mean"} or max(r["most_reduces"] for r in reports) < 2, "reduced-twice",
           "你的钩子对同一个桶调用了不止一次 `dist.all_reduce`：每一次都把各进程的值加起来，梯度被求和了两次。"
           "只发起一次 `all_reduce(..., async_op=True)`（之前或之后除以进程数），返回它的 Future。",
           "your hook calls `dist.all_reduce` more than once for one bucket: each call sums over the processes, so "
           "the gradient is summed twice. Start a single `all_reduce(..., async_op=True)` (dividing by the world "
           "size before or after it) and return its Future.")
    expect("sum" not in kinds, "sum", "反向之后的 `.grad` 是两个进程梯度的**和**，不是平均值：除以 `dist.get_world_size()`。",
           "`.grad` after backward is the **sum** of the two processes' gradients, not their mean: divide by "
           "`dist.get_world_size()`.")
    expect("divided-twice" not in kinds, "divided-twice", "反向之后的 `.grad` 是平均值再除以一次进程数：只除一次。",
           "`.grad` after backward is the mean divided by the number of processes once more: divide only once.")
    expect("rounded" not in kinds, "rounded", "反向之后的 `.grad` 接近平均值，但差了低精度的舍入误差：通信时不要转成 16 位，"
           "这道题要的是 float32 的精确平均值。",
           "`.grad` after backward is close to the mean but off by low-precision rounding: do not cast to 16 bits "
           "on the way; this exercise asks for the exact float32 mean.")
    expect(kinds == {"mean"}, "other", "反向之后的 `.grad` 既不是平均值，也不是本进程的梯度或两个进程梯度的和：检查你的钩子对 "
           "`bucket.buffer()` 做了什么。",
           "`.grad` after backward is neither the mean nor this process's gradient nor the sum of both: check what "
           "your hook does to `bucket.buffer()`.")


# ---- 10.2 a gradient norm the scale cannot fool -----------------------------------------------

_SCALE = 2.0**10


def _scaled_backward(hooks_for: Any) -> tuple[list, list, list]:
    """Scaled backward of a fresh model; (scaled grads, unscaled norms, what the hooks recorded)."""
    torch.manual_seed(12)
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2))
    scaler = torch.amp.GradScaler("cpu", init_scale=_SCALE)
    norms: list = []
    handles = []
    try:
        for p in model.parameters() if hooks_for is not None else ():
            hook = call_answer(hooks_for, scaler, norms)
            expect(callable(hook), "not-a-hook", f"`unscaled_norm_hook` 应返回一个钩子函数，收到的是 {type(hook).__name__}。",
                   f"`unscaled_norm_hook` must return a hook function, got a {type(hook).__name__}.")
            handles.append(p.register_hook(hook))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(9, 5)).float().square().mean()
        with guarded("raised-in-backward", "反向时你的钩子", "during backward your hook"):
            scaler.scale(loss).backward()
    finally:
        for h in handles:
            h.remove()
    scaled = [g.clone() for g in _grads(model)]
    scaler.unscale_(torch.optim.SGD(model.parameters(), lr=0.1))
    return scaled, [g.norm().item() for g in _grads(model)], norms


@exercise("10.2", answer="unscaled_norm_hook")
def unscaled_norm(answer: Any) -> None:
    reference_scaled, true_norms, _ = _scaled_backward(None)
    scaled, _, norms = _scaled_backward(answer)
    # bitwise: same computation, an observing hook leaves the same backward
    expect(all(torch.equal(a, b) for a, b in zip(scaled, reference_scaled)), "changes-gradient",
           "你的钩子改变了梯度：观察用的钩子要返回 None。", "your hook changed the gradients: an observing hook must return None.")
    expect(len(norms) == len(true_norms), "one-per-parameter",
           f"`norms` 里有 {len(norms)} 个值，模型有 {len(true_norms)} 个参数，每个参数的钩子应追加一个。",
           f"`norms` holds {len(norms)} values for {len(true_norms)} parameters; each parameter's hook should append one.")
    expect(all(isinstance(n, float) for n in norms), "not-a-float",
           "`norms` 里应是 Python float（用 `.item()`）。", "`norms` should hold Python floats (use `.item()`).")
    mine, truth = torch.tensor(sorted(norms)), torch.tensor(sorted(true_norms))
    if torch.allclose(mine, truth.square(), rtol=1e-4):  # each one squared: said with the norm farthest from 1
        i = int((truth - 1).abs().argmax())
        expect_no_slip(mine[i].item(), truth[i].item(), ("参数梯度的范数", "a parameter's gradient norm"))
    expect(not torch.allclose(mine, truth * _SCALE, rtol=1e-4), "still-scaled",
           "记录的范数与 `unscale_` 之后的不一致：它们正好大了缩放因子倍，忘了除以 `scaler.get_scale()`。",
           "the recorded norms differ from those after `unscale_`: they are exactly the scale too large; divide by "
           "`scaler.get_scale()`.")
    expect(torch.allclose(mine, truth, rtol=1e-4), "norm", "记录的范数与 `unscale_` 之后的不一致。",
           "the recorded norms differ from those after `unscale_`.")


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


_RUNS_WHY = (("非可重入的 {} 不对：三次使用的梯度在同一次反向里先相加，再到达 `AccumulateGrad`",
              "the non-reentrant {} is off: within one backward pass the three uses' gradients are summed before "
              "they reach `AccumulateGrad`"),
             ("可重入的 {} 不对：每个可重入的检查点段在反向时各自调用一次 `backward`，数一数有几段",
              "the reentrant {} is off: each reentrant segment calls `backward` on its own during backward; count "
              "the segments"))


@exercise("10.3", answer="my_runs", data=True)
def predict_runs(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把两个预测（非可重入、可重入各一个整数）按顺序填进 `my_runs`。",
                        "put your two predictions (one int each for non-reentrant and reentrant) into `my_runs`.")
    expect(isinstance(answer, (list, tuple)) and len(answer) == 2
           and all(isinstance(n, int) and not isinstance(n, bool) for n in answer), "two-ints",
           "`my_runs` 应是两个整数组成的列表：先非可重入，后可重入。",
           "`my_runs` must be a list of two ints: non-reentrant first, then reentrant.")
    truth = [_tensor_hook_runs(3, reentrant=False), _tensor_hook_runs(3, reentrant=True)]
    expect(list(answer) != truth[::-1] or truth[0] == truth[1], "swapped",
           "两个数都对，只是顺序反了：`my_runs` 里先放非可重入的次数，再放可重入的次数。",
           "both numbers are right but in the wrong order: `my_runs` holds the non-reentrant count first, then the "
           "reentrant one.")
    off = [(said, why) for said, real, why in zip(answer, truth, _RUNS_WHY) if said != real]
    expect(not off, "runs", "；".join(zh.format(said) for said, (zh, _) in off) + "。可以用第 7 节的 `hook_runs` 改成三段验证。",
           "; ".join(en.format(said) for said, (_, en) in off) + ". Check it with section 7's `hook_runs` extended "
           "to three uses.")
