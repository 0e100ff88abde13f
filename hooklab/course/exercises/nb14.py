"""Exercises of notebook 14 (hooks in training frameworks): end of backward, an op counter, a comm hook with state.

14.1 and 14.2 run in this process; 14.3 runs the learner's communication hook under DDP in two local ``gloo``
processes (:mod:`._comm`), as notebook 10's exercise 10.1 does.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ...meter import OpCounter
from . import exercise
from ._comm import ddp_and_plain, guard, run_checked
from ._support import call_answer, expect, fail, guarded


# ---- 14.1 a callback at the end of every backward pass ----------------------------------------

class _Tied(nn.Module):
    """A layer used twice and a bias used once: gradients arrive in several parts and in a set order."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.extra = nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.lin(x).tanh()) + self.extra


def _run_backwards(answer: Any) -> tuple[list, list, int]:
    """Three backward passes with the learner's hooks; (calls per pass, grads ready at each call, calls after removal)."""
    torch.manual_seed(14)
    model = _Tied()
    params = list(model.parameters())
    ready: list[bool] = []
    handles = call_answer(answer, params, lambda: ready.append(all(p.grad is not None for p in params)),
                          returns=("注册钩子得到的句柄列表", "the list of handles you got from registering the hooks"))
    expect(isinstance(handles, (list, tuple)) and all(hasattr(h, "remove") for h in handles), "not-handles",
           "`once_per_backward` 应返回注册钩子得到的句柄（handle）列表。",
           "`once_per_backward` must return the list of handles that registering the hooks gave you.")
    per_pass = []
    try:
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            before = len(ready)
            with guarded("raised-in-backward", "反向传播时你的钩子", "during backward your hooks"):
                model(torch.randn(3, 4)).square().sum().backward()
            per_pass.append(len(ready) - before)
    finally:
        for h in handles:
            h.remove()
    before = len(ready)
    model(torch.randn(3, 4)).sum().backward()
    return per_pass, ready, len(ready) - before


@exercise("14.1", answer="once_per_backward")
def end_of_backward(answer: Any) -> None:
    per_pass, ready, after_removal = _run_backwards(answer)
    expect(per_pass != [0, 0, 0], "never-called", "三次反向传播里 `on_done` 一次也没有被调用。",
           "`on_done` was never called in three backward passes.")
    expect(per_pass == [1, 1, 1], "not-once-per-pass",
           f"每次反向传播 `on_done` 应调用一次，实际是 {per_pass}：是不是每个钩子都排了一个回调？用一个标志只排一次。",
           f"`on_done` should run once per backward pass; it ran {per_pass} times: does every hook queue a callback? "
           "Use a flag to queue it once.")
    expect(all(ready), "grads-not-ready", "调用 `on_done` 时还有参数的 `.grad` 没有写好：它必须在反向传播结束时运行"
           "（`torch.autograd.graph.queue_callback`），而不是在某个钩子里直接调用。",
           "when `on_done` ran, some parameters' `.grad` was not written yet: it must run at the end of the backward "
           "pass (`torch.autograd.graph.queue_callback`), not be called from a hook directly.")
    expect(not after_removal, "handle-missing", "句柄全部 `remove()` 之后，`on_done` 仍被调用：返回的句柄没有覆盖你注册的每个钩子。",
           "`on_done` still ran after every returned handle was removed: the handles you return do not cover every "
           "hook you registered.")


# ---- 14.2 count every aten op of forward and backward ------------------------------------------

def _step(seed: int) -> Callable[[], None]:
    """A fresh forward + backward to be counted (``fn`` for the learner's ``count_ops``)."""
    def fn() -> None:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3), nn.Softmax(dim=-1))
        model(torch.randn(6, 5)).log().mean().backward()
    return fn


@exercise("14.2", answer="count_ops")
def count_ops(answer: Any) -> None:
    for seed in (1, 2):
        with OpCounter() as truth:  # hooklab's own dispatch-mode counter
            _step(seed)()
        counts = call_answer(answer, _step(seed), returns=("一个字典：算子名 -> 次数", "a dict from op name to count"))
        expect(isinstance(counts, dict), "not-a-dict", f"`count_ops` 应返回一个字典（算子名 -> 次数），收到的是 {type(counts).__name__}。",
               f"`count_ops` must return a dict (op name -> count), got a {type(counts).__name__}.")
        counts, expected = {k: v for k, v in counts.items() if v}, dict(truth.counts)
        if counts == expected:
            continue
        expect(not any(isinstance(k, str) and k.startswith("aten.") for k in counts), "full-op-names",
               "键应是算子包的名字，如 `addmm`（`func.overloadpacket.__name__`），而不是 `aten.addmm.default`。",
               "keys should be op packet names such as `addmm` (`func.overloadpacket.__name__`), not `aten.addmm.default`.")
        expect("linear" not in counts, "function-mode",
               "你数的是 Python 层的函数（`linear`），这是 `TorchFunctionMode` 看到的；用 `TorchDispatchMode` 数 aten 算子。",
               "you counted Python-level functions (`linear`), which is what a `TorchFunctionMode` sees; count aten "
               "ops with a `TorchDispatchMode`.")
        expect(not counts or {"threshold_backward", "mm"} & set(counts), "no-backward-ops",
               "计数里没有反向传播的算子（如 `mm`、`threshold_backward`）：`fn()` 里的 `backward()` 也要在模式之内运行。",
               "the counts have no backward ops (such as `mm`, `threshold_backward`): the `backward()` inside `fn()` "
               "must run inside the mode too.")
        diff = [k for k in sorted(set(counts) | set(expected), key=str) if counts.get(k) != expected.get(k)][:3]
        fail("counts", f"计数与实际不符，例如 {', '.join(f'{k}: 你的 {counts.get(k, 0)}，实际 {expected.get(k, 0)}' for k in diff)}。",
               f"the counts differ from what ran, e.g. "
               f"{', '.join(f'{k}: yours {counts.get(k, 0)}, actual {expected.get(k, 0)}' for k in diff)}.")


# ---- 14.3 a communication hook with state, under gradient accumulation -----------------------

def _accumulate_with_hook(rank: int, world_size: int, hook: Any) -> dict:
    """Three micro-batches (two under no_sync) with ``hook`` and a state dict; what the state and .grad say."""
    model, plain, ddp = ddp_and_plain(14)
    state = {"calls": 0, "values": 0}
    report: dict = {}
    ddp.register_comm_hook(state, guard(hook, report))
    for micro in range(3):
        torch.manual_seed(10 * micro + rank)
        x = torch.randn(4, 6)
        with ddp.no_sync() if micro < 2 else nullcontext():  # accumulate twice, then communicate
            ddp(x).square().mean().backward()
        plain(x).square().mean().backward()
    match = True
    for p, q in zip(model.parameters(), plain.parameters()):
        mean = torch.as_tensor(q.grad).clone()
        dist.all_reduce(mean)
        match = match and p.grad is not None and torch.allclose(p.grad, mean / world_size, rtol=1e-5, atol=1e-7)
    report.update(state=dict(state), match=match, numel=sum(p.numel() for p in model.parameters()))
    return report


@exercise("14.3", answer="counting_mean_hook")
def stateful_comm_hook(answer: Any) -> None:
    reports = run_checked(_accumulate_with_hook, answer, not_solved=(
        "你的钩子还没有返回任何值（返回了 None）；它要更新 `state` 并返回一个 Future。",
        "your hook returns None so far; it must update `state` and return a Future."))
    report = reports[0]
    calls, values = report["state"]["calls"], report["state"]["values"]
    expect(calls == report["calls"], "calls-not-counted",
           f"DDP 调用了你的钩子 {report['calls']} 次，`state['calls']` 却是 {calls}：每次调用加 1。",
           f"DDP called your hook (calls counted: {report['calls']}) but `state['calls']` is {calls}: add 1 per call.")
    expect(values == report["numel"], "values-not-counted", f"`state['values']` 是 {values}，而这一步通信的梯度共有 "
           f"{report['numel']} 个数：加上每个桶的 `bucket.buffer().numel()`。",
           f"`state['values']` is {values}, but the step communicated {report['numel']} gradient values: add each "
           "bucket's `bucket.buffer().numel()`.")
    expect(all(r["match"] for r in reports), "not-mean", "反向之后的 `.grad` 不是三个微批次累加梯度在两个进程上的平均值：是不是忘了除以进程数？",
           "`.grad` after the last backward is not the mean over both processes of the gradient accumulated over "
           "three micro-batches: did you forget to divide by the number of processes?")
