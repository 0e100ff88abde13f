"""Exercises of notebook 14 (hooks in training frameworks): end of backward, the first non-finite op, a comm hook
with state, a hook that sees FSDP2's full weight.

14.1 and 14.2 run in this process; 14.3 runs the learner's communication hook under DDP in two local ``gloo``
processes (:mod:`._comm`), as notebook 10's exercise 10.1 does; 14.4 runs the learner's hooks on an FSDP2 unit in
two processes.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..._torch_internals import TorchDispatchMode, tree_flatten
from . import _comm, exercise
from ._comm import ddp_and_plain, guard, run_checked
from ._support import NotSolved, call_answer, expect, fail, guarded, started

# ---- 14.1 a callback at the end of every backward pass ----------------------------------------

class _Tied(nn.Module):
    """A layer used twice and a bias used once (or not at all): gradients arrive in several parts and in a set order."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.extra = nn.Parameter(torch.zeros(4))
        self.use_extra = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(self.lin(x).tanh())
        return out + self.extra if self.use_extra else out


class _FailedOnPurpose(Exception):
    """The checker makes one backward pass fail, late, after some of the learner's hooks have run."""


def _fail(grad: torch.Tensor) -> None:
    raise _FailedOnPurpose


# the passes: "plain" uses every parameter, "unused" leaves `extra` out, "fails" raises from the input's gradient hook
_PASSES = ("plain", "plain", "plain", "unused", "fails", "plain", "plain")


def _run_backwards(answer: Any) -> tuple[list[tuple[str, list[list[bool]]]], list[bool], int]:
    """The passes with the learner's hooks: [(kind, [which .grad were written, at each on_done call])], which .grad a
    pass without `extra` writes, and the number of calls in a pass after the handles were removed."""
    torch.manual_seed(14)
    model = _Tied()
    params = list(model.parameters())
    calls: list[list[bool]] = []
    handles = call_answer(answer, params, lambda: calls.append([p.grad is not None for p in params]),
                          returns=("注册钩子得到的句柄列表", "the list of handles you got from registering the hooks"))
    expect(isinstance(handles, (list, tuple)) and all(hasattr(h, "remove") for h in handles), "not-handles",
           "`once_per_backward` 应返回注册钩子得到的句柄（handle）列表。",
           "`once_per_backward` must return the list of handles that registering the hooks gave you.")
    passes = []
    try:
        for kind in _PASSES:
            model.zero_grad(set_to_none=True)
            model.use_extra = kind != "unused"
            x = torch.randn(3, 4, requires_grad=kind == "fails")
            if kind == "fails":
                x.register_hook(_fail)   # the input's gradient comes last: most hooks have run by then
            before = len(calls)
            with guarded("raised-in-backward", "反向传播时你的钩子", "during backward your hooks"):
                try:
                    model(x).square().sum().backward()
                except _FailedOnPurpose:
                    pass
            passes.append((kind, calls[before:]))
    finally:
        for h in handles:
            h.remove()
    before = len(calls)
    model.use_extra = True
    model(torch.randn(3, 4)).sum().backward()
    return passes, [p is not model.extra for p in params], len(calls) - before


@exercise("14.1", answer="once_per_backward")
def end_of_backward(answer: Any) -> None:
    passes, written_without_extra, after_removal = _run_backwards(answer)
    first_plain = [len(c) for kind, c in passes[:3]]
    expect(any(c for _, c in passes), "never-called", "几次反向传播里 `on_done` 一次也没有被调用。",
           "`on_done` was never called in several backward passes.")
    expect(first_plain == [1, 1, 1], "not-once-per-pass",
           f"每次反向传播 `on_done` 应调用一次，实际是 {first_plain}：是不是每个钩子都排了一个回调？用一个标志只排一次。",
           f"`on_done` should run once per backward pass; it ran {first_plain} times: does every hook queue a callback? "
           "Use a flag to queue it once.")
    expect(all(all(ready) for _, c in passes[:3] for ready in c), "grads-not-ready",
           "调用 `on_done` 时还有参数的 `.grad` 没有写好：它必须在反向传播结束时运行"
           "（`torch.autograd.graph.queue_callback`），而不是在某个钩子里直接调用。",
           "when `on_done` ran, some parameters' `.grad` was not written yet: it must run at the end of the backward "
           "pass (`torch.autograd.graph.queue_callback`), not be called from a hook directly.")
    unused = passes[3][1]
    expect(len(unused) == 1 and unused[0] == written_without_extra, "unused-parameter",
           f"在一次有参数没用上的反向传播里（`extra` 没有参与），`on_done` 运行了 {len(unused)} 次，应是 1 次："
           "等“每个参数都报到了”再调用的办法，遇到没用上的参数就永远等不到。在这次反向里第一个运行的钩子排回调，"
           "或者用 `register_multi_grad_hook(params, fn, mode=\"any\")`。",
           f"in a backward pass that leaves a parameter unused (`extra` takes no part), `on_done` ran {len(unused)} "
           "times instead of once: waiting until every parameter has reported never ends when one is unused. Queue "
           "the callback from the first hook that runs in the pass, or use `register_multi_grad_hook(params, fn, "
           "mode=\"any\")`.")
    after_failure = [len(c) for _, c in passes[5:]]
    expect(after_failure == [1, 1], "stuck-after-error",
           f"一次反向传播出错之后，接下来的两次里 `on_done` 运行了 {after_failure} 次：你的标志在排回调时置上、只由回调复位，"
           "而出错的那次反向不会运行它的回调（第 5.1 节），标志就一直置着。让标志跟着这一次反向走"
           "（比如记下 `torch._C._current_graph_task_id()`），或者用 `register_multi_grad_hook(params, fn, mode=\"any\")`："
           "它每次反向重新开始。",
           f"after a backward pass that failed, `on_done` ran {after_failure} times in the next two: your flag is set when "
           "the callback is queued and cleared only by the callback, and a failed backward never runs its callbacks "
           "(section 5.1), so the flag stays set. Tie the flag to the pass (record "
           "`torch._C._current_graph_task_id()`, say), or use `register_multi_grad_hook(params, fn, mode=\"any\")`, "
           "which starts afresh in every pass.")
    expect(not after_removal, "handle-missing", "句柄全部 `remove()` 之后，`on_done` 仍被调用：返回的句柄没有覆盖你注册的每个钩子。",
           "`on_done` still ran after every returned handle was removed: the handles you return do not cover every "
           "hook you registered.")


# ---- 14.2 the first op whose output is not finite, forward or backward -------------------------

class _FirstNonFinite(TorchDispatchMode):
    """The truth: (phase, op) of the first aten op whose output holds NaN or inf, and of the first that holds NaN;
    and of the first op whose *input* does (a usual mistake: the op after the producer)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: tuple[str, str] | None = None
        self.first_nan: tuple[str, str] | None = None
        self.first_bad_input: tuple[str, str] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        where = ("backward" if torch._C._current_graph_task_id() != -1 else "forward", func.overloadpacket.__name__)
        inputs = [t for t in tree_flatten((args, kwargs or {})) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if self.first_bad_input is None and not all(bool(torch.isfinite(t).all()) for t in inputs):
            self.first_bad_input = where
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if self.found is None and not all(bool(torch.isfinite(t).all()) for t in tensors):
            self.found = where
        if self.first_nan is None and any(bool(torch.isnan(t).any()) for t in tensors):
            self.first_nan = where
        return out


class _Exp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


class _SafeSqrt(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x.sqrt(), 0.0)   # sqrt makes NaN for x < 0; where hides it from the output


class _RootOfAbs(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.abs().sqrt()   # finite at 0, but its derivative there is inf


def _fn_cases() -> list[tuple[str, str, Callable[[], None]]]:
    def make(middle: Callable[[], nn.Module], x: Callable[[], torch.Tensor], zero_first_unit: bool) -> Callable[[], None]:
        torch.manual_seed(14)
        first = nn.Linear(3, 3)
        model = nn.Sequential(first, middle(), nn.Linear(3, 1))  # made outside fn: `empty` holds whatever memory did
        if zero_first_unit:
            with torch.no_grad():
                first.weight[0].zero_(), first.bias[0].zero_()

        def fn() -> None:           # one forward + backward, the learner's `fn`, the same ops at every call
            model.zero_grad(set_to_none=True)
            torch.manual_seed(15)
            model(x()).sum().backward()
        return fn

    return [("前向中溢出的 exp", "an exp that overflows in forward", make(_Exp, lambda: torch.full((2, 3), 300.0), False)),
            ("前向有限、反向为 inf 的平方根", "a square root that is finite in forward and inf in backward",
             make(_RootOfAbs, lambda: torch.randn(2, 3), True)),
            ("被 where 遮住的 NaN", "a NaN that torch.where hides", make(_SafeSqrt, lambda: torch.randn(2, 3), False)),
            ("一切都有限", "everything finite", make(nn.Tanh, lambda: torch.randn(2, 3), False))]


@exercise("14.2", answer="first_nonfinite_op")
def first_nonfinite_op(answer: Any) -> None:
    if not started(answer):
        raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
    for zh, en, fn in _fn_cases():
        with _FirstNonFinite() as truth:
            fn()
        assert (truth.found is None) == en.startswith("everything"), en  # the cases are what they claim to be
        got = call_answer(answer, fn, allow_none=True)
        if truth.found is None:
            expect(got is None, "expected-none", f"{zh}：每个算子的输出都是有限的，应返回 None，你的函数返回了 {got!r}。",
                   f"{en}: every op's output is finite, so return None; your function returned {got!r}.")
            continue
        phase, op = truth.found
        where_zh = f"{'反向' if phase == 'backward' else '前向'}的 {op!r}"
        if got is None:
            expect(phase != "backward", "no-backward",
                   f"{zh}：第一个非有限值出现在反向里（{op}），你的函数什么也没找到：`fn()` 里的 `backward()` 也要在你的模式之内"
                   "运行，而且要用 `TorchDispatchMode`（`TorchFunctionMode` 看不到反向里运行的算子）。",
                   f"{en}: the first non-finite value appears in backward ({op}), and your function found none: the "
                   "`backward()` inside `fn()` must run inside your mode too, and it must be a `TorchDispatchMode` (a "
                   "`TorchFunctionMode` does not see the ops backward runs).")
            expect(truth.first_nan is not None, "inf-missed",
                   f"{zh}：第一个输出非有限值的算子是{where_zh}，它的输出里是 inf；你的函数什么也没找到。"
                   "`torch.isnan` 看不到 inf，用 `torch.isfinite`。",
                   f"{en}: the first op whose output is non-finite is {op!r} in {phase}, and it holds inf; your "
                   "function found nothing. `torch.isnan` misses inf, `torch.isfinite` does not.")
            fail("not-found", f"{zh}：第一个输出非有限值的算子是{where_zh}，它的输出里有 NaN，你的函数却返回了 None："
                 "NaN 和 inf 都要查（`torch.isfinite`），模块的输出之外、被后面的算子遮住的值也算。",
                 f"{en}: the first op whose output is non-finite is {op!r} in {phase}, and it holds NaN; your function "
                 "returned None: look for NaN as well as inf (`torch.isfinite`), also in values a later op hides.")
        expect(isinstance(got, tuple) and len(got) == 2, "not-a-pair", f"{zh}：应返回 `(阶段, 算子名)`，收到的是 {got!r}。",
               f"{en}: return `(phase, op name)`, got {got!r}.")
        expect(not (isinstance(got[1], str) and got[1].startswith("aten.")), "full-op-names",
               "算子名应是算子包的名字，如 `exp`（`func.overloadpacket.__name__`），而不是 `aten.exp.default`。",
               "the op name should be the op packet's name such as `exp` (`func.overloadpacket.__name__`), not "
               "`aten.exp.default`.")
        expect(got == truth.found or tuple(got) != truth.first_nan, "inf-missed",
               f"{zh}：第一个输出非有限值的算子是{where_zh}，它的输出里是 inf 而不是 NaN，你的函数给出的是第一个出现 NaN 的 "
               f"{got!r}。`torch.isnan` 看不到 inf，用 `torch.isfinite`。",
               f"{en}: the first op whose output is non-finite is {op!r} in {phase}, and it holds inf, not NaN; your "
               f"function gives the first one with a NaN, {got!r}. `torch.isnan` misses inf, `torch.isfinite` does not.")
        expect(got == truth.found or tuple(got) != truth.first_bad_input, "checked-inputs",
               f"{zh}：第一个输出非有限值的算子是{where_zh}，你的函数给出的 {got!r} 是它之后第一个**收到**非有限输入的算子："
               "你检查的是算子的输入。先运行 `func(*args, **kwargs)`，再检查它的输出。",
               f"{en}: the first op whose output is non-finite is {op!r} in {phase}; your function says {got!r}, the "
               "first op after it that *received* a non-finite input: you checked the ops' inputs. Run "
               "`func(*args, **kwargs)` first, then check its output.")
        expect(got[1] == op, "not-first", f"{zh}：第一个输出非有限值的算子是{where_zh}，你的函数给出 {got!r}："
               "要按算子运行的顺序找第一个（非有限值会一路传下去，后面的算子多半也不有限）。",
               f"{en}: the first op whose output is non-finite is {op!r} in {phase}, your function says {got!r}: look "
               "for the first in the order the ops run (a non-finite value spreads, so later ops are mostly non-finite too).")
        expect(got[0] == phase, "phase", f"{zh}：算子 {op!r} 对了，但它运行在{'反向' if phase == 'backward' else '前向'}里"
               f"（`{phase}`），不是 `{got[0]}`。反向里 `torch._C._current_graph_task_id()` 不等于 -1。",
               f"{en}: op {op!r} is right, but it ran in {phase} (`{phase}`), not `{got[0]}`. In backward, "
               "`torch._C._current_graph_task_id()` is not -1.")


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
    match = divided_twice = True
    for p, q in zip(model.parameters(), plain.parameters()):
        mean = torch.as_tensor(q.grad).clone()
        dist.all_reduce(mean)
        mean /= world_size
        match = match and p.grad is not None and torch.allclose(p.grad, mean, rtol=1e-5, atol=1e-7)
        divided_twice = divided_twice and p.grad is not None and torch.allclose(p.grad, mean / world_size,
                                                                                 rtol=1e-5, atol=1e-7)
    report.update(state=dict(state), match=match, divided_twice=divided_twice,
                  numel=sum(p.numel() for p in model.parameters()))
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
    expect(all(r["match"] for r in reports) or not all(r["divided_twice"] for r in reports), "divided-twice",
           "反向之后的 `.grad` 是三个微批次累加梯度在两个进程上的平均值，又多除了一次进程数：通信之前或之后只除一次。",
           "`.grad` after the last backward is the mean over both processes of the gradient accumulated over three "
           "micro-batches, divided by the number of processes once more: divide once, before or after the "
           "communication.")
    expect(all(r["match"] for r in reports), "not-mean", "反向之后的 `.grad` 不是三个微批次累加梯度在两个进程上的平均值：是不是忘了除以进程数？",
           "`.grad` after the last backward is not the mean over both processes of the gradient accumulated over "
           "three micro-batches: did you forget to divide by the number of processes?")


# ---- 14.4 a hook that sees FSDP2's full weight --------------------------------------------------

def _watch_in_fsdp(rank: int, world_size: int, answer: Any) -> dict:
    """model[0] as an FSDP2 unit of its own, the learner's hooks on it, two steps; what the hooks recorded."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    torch.manual_seed(14)
    unit = nn.Linear(4, 4)
    model = nn.Sequential(unit, nn.Linear(4, 2))
    full = unit.weight.detach().clone()
    fully_shard(unit)
    fully_shard(model)
    recorded: list = []
    report: dict = {"problem": None}
    try:
        handles = answer(unit, recorded.append)
    except Exception as exc:  # noqa: BLE001 - reported as the verdict
        return {"problem": ("raised", f"{type(exc).__name__}: {exc}")}
    if handles is None:
        return {"problem": ("returned-none", "")}
    handles = list(handles) if isinstance(handles, (list, tuple)) else [handles]
    if not all(hasattr(h, "remove") for h in handles):
        return {"problem": ("not-handles", "")}
    try:
        for step in range(2):
            torch.manual_seed(step + 10 * rank)
            model(torch.randn(3, 4)).sum().backward()
    except Exception as exc:  # noqa: BLE001 - the learner's hooks broke the step
        return {"problem": ("raised-in-step", f"{type(exc).__name__}: {exc}")}
    report["seen"] = [("DTensor" if isinstance(t, DTensor) else type(t).__name__,
                       tuple(t.shape) if isinstance(t, torch.Tensor) else None,
                       isinstance(t, torch.Tensor) and not isinstance(t, DTensor) and t.untyped_storage().nbytes() > 0
                       # bitwise: copy, FSDP's all-gather puts the shards' values back together
                       and t.shape == full.shape and bool(torch.equal(t.detach(), full)),
                       isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() == 0)
                      for t in recorded]
    for h in handles:
        h.remove()
    before = len(recorded)
    model(torch.randn(3, 4)).sum().backward()
    report["after removal"] = len(recorded) - before
    return report


@exercise("14.4", answer="watch_full_weight")
def full_weight_under_fsdp(answer: Any) -> None:
    if not started(answer):
        raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
    reports = _comm.run_two(_watch_in_fsdp, answer, reason="fsdp-failed",
                            failed=("运行 FSDP2 时出错", "FSDP2 failed with your hooks"),
                            waiting=("你的钩子是不是在等一个永远不会来的结果？", "does your hook wait for something that never comes?"))
    report = reports[0]
    kind, detail = report["problem"] or ("", "")
    expect(kind != "raised", "raised", f"你的函数抛出了 {detail}。", f"your function raised {detail}.")
    expect(kind != "returned-none", "returned-none", "你的函数运行了，却返回了 None；请返回注册钩子得到的句柄。",
           "your function ran but returned None: return the handle(s) that registering your hook(s) gave you.")
    expect(kind != "not-handles", "not-handles", "`watch_full_weight` 应返回注册钩子得到的句柄（一个，或一个列表）。",
           "`watch_full_weight` must return the handle(s) that registering your hook(s) gave you (one, or a list).")
    expect(kind != "raised-in-step", "raised-in-step", f"前向或反向时你的钩子抛出了 {detail}。",
           f"during forward or backward your hooks raised {detail}.")
    seen = report["seen"]
    expect(seen, "never-called", "两步训练里 `record` 一次也没有被调用。", "`record` was never called in two training steps.")
    expect(all(kind != "DTensor" for kind, _, _, _ in seen), "sees-shard",
           "你的钩子看到的是分片的 `DTensor`：它在 FSDP 的收集之前（用 `prepend=True` 的前向前置钩子）或释放之后（普通注册的前向钩子）"
           "运行。前向前置钩子普通注册，或者前向钩子用 `prepend=True`，才排在收集之后、释放之前（第 2 节）。",
           "your hook saw the sharded `DTensor`: it ran before FSDP's gather (a forward pre-hook with `prepend=True`) or "
           "after its free (a forward hook registered plainly). A forward pre-hook registered plainly, or a forward "
           "hook with `prepend=True`, runs after the gather and before the free (section 2).")
    expect(not any(freed for _, _, _, freed in seen), "not-cloned",
           "你记下的是完整权重本身，而 FSDP2 在前向之后用 `resize_(0)` 释放了它的存储，现在它是空的（第 1 节）。"
           "记下一份拷贝：`weight.detach().clone()`。",
           "you recorded the full weight itself, and FSDP2 freed its storage after forward with `resize_(0)`: it is "
           "empty now (section 1). Record a copy: `weight.detach().clone()`.")
    expect(len(seen) == 2, "once-per-forward", f"两次前向里 `record` 被调用了 {len(seen)} 次，应是每次前向一次。",
           f"`record` ran {len(seen)} times in two forward passes: it should run once per forward pass.")
    expect(all(right for _, _, right, _ in seen), "wrong-values",
           "记下的不是这个单元完整的权重（形状 (4, 4)，值与分片前相同）。",
           "what was recorded is not this unit's full weight (shape (4, 4), the values it had before sharding).")
    expect(not report["after removal"], "handle-missing", "句柄全部 `remove()` 之后，`record` 仍被调用：返回的句柄没有覆盖你注册的每个钩子。",
           "`record` still ran after every returned handle was removed: the handles you return do not cover every "
           "hook you registered.")
