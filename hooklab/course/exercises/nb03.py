"""Exercises of notebook 03 (module forward hooks).

03.1 ``clamp_inputs(module, low, high)``: register a forward pre-hook that clamps the input, return its handle.
03.2 ``double_c(module, args, kwargs)``: a ``with_kwargs=True`` pre-hook that doubles ``c`` however it is passed.
03.3 ``count_calls(model, x)``: count the calls of each module class in one forward pass with global hooks.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_globals

from ...inventory import hook_inventory
from . import exercise
from ._support import NotSolved, call_answer, expect, expect_fresh, fail, guarded, no_hooks_left, run
from .nb01 import expect_handle, expect_removed


def _same(out: Any, truth: torch.Tensor) -> bool:
    return isinstance(out, torch.Tensor) and out.shape == truth.shape and torch.allclose(out, truth, atol=1e-6)


# ---- 03.1 clamp the input with a forward pre-hook, return the handle -------------------------------------

_CLAMP_CASES = [(1, (3, 2), (-1.0, 1.0), 2.0), (4, (5, 3), (-0.5, 0.25), 1.5), (8, (2, 4), (0.0, 2.0), 3.0)]
_PRE_HOOK_HANDLE = ("`register_forward_pre_hook` 给你的句柄（handle）", "the handle that `register_forward_pre_hook` gave you")


@torch.no_grad()
def _expect_clamped(module: nn.Linear, x: torch.Tensor, low: float, high: float, where: str) -> None:
    """One call of the hooked module: the caller's ``x`` untouched, the output that of ``x.clamp(low, high)``."""
    def linear(t: torch.Tensor) -> torch.Tensor:
        return F.linear(t, module.weight, module.bias)
    before = x.clone()
    with guarded("forward-raised", f"带着你的钩子调用 {where} 时", f"calling {where} with your hook"):
        out = module(x)
    # bitwise: copy, a clone taken before the call
    expect(torch.equal(x, before), "in-place", "调用者传入的张量被原地修改了（`clamp_`）；钩子应返回一个新张量 `args[0].clamp(low, high)`。",
           "the caller's tensor was modified in place (`clamp_`); the hook should return a new tensor, "
           "`args[0].clamp(low, high)`.")
    truth = linear(x.clamp(low, high))
    if _same(out, truth):
        return
    expect(not _same(out, linear(torch.full_like(x, low))), "bounds-swapped",
           f"每个输入元素都变成了 low={low}：`clamp(min, max)` 的参数顺序是先下界后上界，你把 `high` 当成了 min。"
           "写成 `clamp(low, high)`（或 `clamp(min=low, max=high)`）。",
           f"every input element became low={low}: `clamp` takes the lower bound first, and with `high` as min and "
           "`low` as max everything is set to `low`. Write `clamp(low, high)` (or `clamp(min=low, max=high)`).")
    expect(not _same(out, linear(x)), "not-returned", "有钩子时输出没变：前向前置钩子要**返回**裁剪后的输入，返回值才会替换 `args`。",
           "the output did not change with your hook: the pre-hook must *return* the clamped input, which then "
           "replaces `args`.")
    expect(not _same(out, linear(x.clamp(-1, 1))), "hard-coded-limits",
           f"输入被裁剪到了 [-1, 1]，而这次调用要求 [{low}, {high}]：用参数 `low`、`high`。",
           f"the input was clamped to [-1, 1], but this call asks for [{low}, {high}]: use the arguments `low` and `high`.")
    tensor = isinstance(out, torch.Tensor)
    got = tuple(out.shape) if tensor else type(out).__name__
    diff = f"{(out - truth).abs().max().item():.3g}" if tensor and out.shape == truth.shape else "?"
    fail("output", f"{where}：输出应等于 `F.linear(x.clamp(low, high), W, b)`（形状 {tuple(truth.shape)}），收到形状 {got}，"
         f"最大偏差 {diff}。", f"{where}: the output should equal `F.linear(x.clamp(low, high), W, b)` (shape "
         f"{tuple(truth.shape)}); got shape {got}, largest difference {diff}.")


@exercise("03.1", answer="clamp_inputs")
def clamp_inputs(answer: Any) -> None:
    for seed, (n_in, n_out), (low, high), scale in _CLAMP_CASES:
        torch.manual_seed(seed)
        module = nn.Linear(n_in, n_out)
        inputs = [torch.randn(4, n_in) * scale, torch.randn(2, n_in) * scale]
        pre_hooks_before = set(module_globals._global_forward_pre_hooks)
        with no_hooks_left():
            handle = call_answer(answer, module, low, high, returns=_PRE_HOOK_HANDLE)
            expect(set(module_globals._global_forward_pre_hooks) <= pre_hooks_before
                   or hook_inventory(module, include_global=False), "global-not-on-module",
                   "你注册的是全局前向预钩子（`register_module_forward_pre_hook`），它会裁剪进程里**每个**模块的输入，"
                   "而不只是这个模块的（检查已把它删除）。要挂在这个模块上：`module.register_forward_pre_hook(...)`。",
                   "you registered a global forward pre-hook (`register_module_forward_pre_hook`): it clamps the input "
                   "of *every* module in the process, not only this one's (the check has removed it). Register it on "
                   "the module: `module.register_forward_pre_hook(...)`.")
        expect_handle(handle, "clamp_inputs")
        kinds = sorted({entry.kind for entry in hook_inventory(module, include_global=False)})
        expect(kinds, "removed-on-return", "函数返回时模块上已经没有钩子了：`with HookScope()` 在离开时会移除钩子。这里要让钩子留下，"
               "由调用者用你返回的句柄移除。", "no hook is left on the module when your function returns: a `with "
               "HookScope()` block removes it on exit. Here the hook must stay, and the caller removes it with the "
               "handle you return.")
        expect("forward_pre" in kinds, "not-a-pre-hook",
               f"模块上挂的是 {', '.join(kinds)} 钩子；裁剪输入要用前向**预**钩子 `register_forward_pre_hook`。",
               f"the module carries a {', '.join(kinds)} hook; clamping the input needs a forward *pre*-hook, "
               "`register_forward_pre_hook`.")
        for x in inputs:
            _expect_clamped(module, x, low, high, f"nn.Linear({n_in}, {n_out}), low={low}, high={high}")
        expect_removed(handle, module, ("模块", "the module"), None)
        with torch.no_grad():
            # bitwise: same computation, nn.Linear's forward is this F.linear call
            expect(torch.equal(module(inputs[0]), F.linear(inputs[0], module.weight, module.bias)), "module-changed",
                   "调用 `handle.remove()` 之后模块的输出仍不等于 `F.linear(x, W, b)`；除了注册钩子，函数不应改动模块。",
                   "after `handle.remove()` the module's output is still not `F.linear(x, W, b)`; your function "
                   "should change nothing about the module except registering the hook.")


# ---- 03.2 double c, passed positionally or as a keyword --------------------------------------------------

class ThreeInputs(nn.Module):
    """``forward(a, b, c)`` stacks what it received, so the checker sees each argument."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.stack((a, b, c))


_CALLS: list[tuple[int, str, Callable[..., Any]]] = [  # seed, how the checker calls the module
    (2, "net(a, b, c)", lambda net, a, b, c: net(a, b, c)),
    (5, "net(a, b, c=c)", lambda net, a, b, c: net(a, b, c=c)),
    (9, "net(a, b=b, c=c)", lambda net, a, b, c: net(a, b=b, c=c)),
]


def _factor(received: torch.Tensor, sent: torch.Tensor) -> float | None:
    """k when ``received == k * sent`` (None otherwise)."""
    k = float((received * sent).sum() / (sent * sent).sum())
    return round(k, 4) if torch.allclose(received, k * sent, atol=1e-5) else None


def _received(answer: Callable, returned: list, seed: int, call: str, run_call: Callable) -> list:
    """Call ``ThreeInputs`` as ``call`` with the learner's pre-hook: ``(call, name, factor, expected)`` of each
    argument that ``forward`` did not receive as it should (``c`` doubled, ``a`` and ``b`` unchanged)."""
    torch.manual_seed(seed)
    a, b, c = (torch.randn(seed % 3 + 2) for _ in range(3))
    sent, net = (a.clone(), b.clone(), c.clone()), ThreeInputs()

    def probe(module: nn.Module, args: tuple, kwargs: dict) -> Any:
        returned.append(answer(module, args, kwargs))
        return returned[-1]
    handle = net.register_forward_pre_hook(probe, with_kwargs=True)
    try:
        with guarded("call-raised", f"调用 `{call}` 时", f"calling `{call}`"):
            out = run_call(net, a, b, c)
    finally:
        handle.remove()
    for name, tensor, original in zip("abc", (a, b, c), sent):
        # bitwise: copy, clones taken before the call
        expect(torch.equal(tensor, original), "in-place",
               f"调用 `{call}` 之后，调用者的 `{name}` 被原地修改了；用 `kwargs['c'] * 2` 这样的新张量，不要用 `*=`。",
               f"after `{call}` the caller's `{name}` was modified in place; build a new tensor such as "
               "`kwargs['c'] * 2` instead of using `*=`.")
    return [(call, name, _factor(received, original), expected)
            for name, received, original, expected in zip("abc", out, sent, (1.0, 1.0, 2.0))
            if not torch.allclose(received, expected * original, atol=1e-6)]


@exercise("03.2", answer="double_c")
def double_c(answer: Any) -> None:
    returned: list = []
    failures = [f for seed, call, run_call in _CALLS for f in _received(answer, returned, seed, call, run_call)]
    # bitwise: rounded, _factor rounds k to 4 decimals
    if all(r is None for r in returned) and len(failures) == len(_CALLS) \
            and all(name == "c" and factor == 1.0 for _, name, factor, _ in failures):  # nothing changed anywhere
        raise NotSolved("你的钩子还没有返回任何值（返回了 None），所以什么都没改变。",
                        "your hook returns None so far, so it changes nothing.", reason="hook-returned-none")
    if failures:
        call, name, factor, _ = failures[0]
        # bitwise: rounded, _factor rounds k to 4 decimals
        how = (("没有变", "unchanged") if factor == 1.0 else ("被改成了别的值", "changed in some other way")
               if factor is None else (f"乘以了 {factor:g}", f"multiplied by {factor:g}"))
        want = ("乘以 2", "doubled") if name == "c" else ("保持不变", "unchanged")
        said = (f"调用 `{call}` 时，`forward` 收到的 `{name}` {how[0]}，应当{want[0]}。",
                f"called as `{call}`, `forward` received `{name}` {how[1]}; it should be {want[1]}.")
        expect(name == "c", "other-argument-changed", *said)
        # bitwise: rounded, _factor rounds k to 4 decimals
        expect(factor != 1.0, "c-unchanged", *said)
        fail("c-wrong-value", *said)


# ---- 03.3 count the calls of each module class with global forward hooks ---------------------------------

class Block(nn.Module):
    """Uses its Linear twice and ``F.relu`` (a function, not a module) in between."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.fc(x)))


def _call_count_cases() -> list[tuple[tuple[str, str], nn.Module, torch.Tensor, dict[str, int]]]:
    """Fresh models with the number of calls per class known by construction (no hooks needed)."""
    torch.manual_seed(3)
    plain = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)), torch.randn(3, 4)
    torch.manual_seed(6)
    nested = (nn.Sequential(nn.Linear(5, 6), nn.Sequential(nn.Tanh(), nn.Linear(6, 6), nn.ReLU()), nn.Linear(6, 2)),
              torch.randn(2, 5))
    torch.manual_seed(12)
    lin, act = nn.Linear(3, 3), nn.ReLU()
    shared = nn.Sequential(lin, act, lin, act, Block(3)), torch.randn(4, 3)  # the same modules twice
    return [(("`nn.Sequential(Linear, ReLU, Linear)`", "`nn.Sequential(Linear, ReLU, Linear)`"), *plain,
             {"Linear": 2, "ReLU": 1, "Sequential": 1}),
            (("一个嵌套了 `Sequential` 的 `Sequential`", "a `Sequential` nested in a `Sequential`"), *nested,
             {"Linear": 3, "ReLU": 1, "Sequential": 2, "Tanh": 1}),
            (("一个把同一个 `Linear` 和同一个 `ReLU` 各用两次、最后接一个 `Block` 的 `Sequential`"
              "（`Block` 的 `forward` 调用自己的 `fc` 两次，中间用 `F.relu`）",
              "a `Sequential` that uses one `Linear` and one `ReLU` twice each, then a `Block` (whose `forward` calls "
              "its `fc` twice, with `F.relu` in between)"), *shared, {"Block": 1, "Linear": 4, "ReLU": 2, "Sequential": 1})]


def _show(counts: Mapping) -> str:
    return "{" + ", ".join(f"{k!r}: {counts[k]!r}" for k in sorted(counts, key=str)) + "}"


@exercise("03.3", answer="count_calls")
def count_calls(answer: Any) -> None:
    results: list[Any] = []
    truths: list[dict[str, int]] = []
    for (what_zh, what_en), model, x, truth in _call_count_cases():
        result = run(answer, model, x, leak_free=(model,))
        expect(isinstance(result, Mapping), "not-a-dict", f"应返回一个字典 {{类名: 调用次数}}，收到的是 {type(result).__name__}。",
               f"return a dict {{class name: number of calls}}, not a {type(result).__name__}.")
        expect(all(isinstance(key, str) for key in result), "keys-not-names",
               "字典的键应是类名字符串，例如 `type(module).__name__`。",
               "the dict's keys should be class names as strings, e.g. `type(module).__name__`.")
        results.append(dict(result))
        truths.append(truth)
        expect_fresh(results, truths)
        expect(dict(result) == truth, "counts", f"对{what_zh}，一次前向中各类模块的调用次数是 {_show(truth)}，你的函数返回 {_show(result)}。",
               f"for {what_en}, one forward pass calls the module classes {_show(truth)} times; your function "
               f"returned {_show(result)}.")
