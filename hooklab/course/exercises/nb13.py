"""Exercises of notebook 13 (debugging with hooks): find the producer, a hook without a cycle, the first NaN Node.

13.1 runs the learner's ``first_nonfinite(model, x)`` on fresh models (call order unlike definition order,
a module called twice, a tuple output, a bad input) and compares with the truth found by plain global hooks;
13.2 checks that the learner's counting hooks count right and leave no reference cycle (with the garbage
collector off, the model must be freed by ``del`` alone); 13.3 compares the learner's ``first_nan_node``
with the Node ``torch.autograd.detect_anomaly`` names.
"""
from __future__ import annotations

import collections
import gc
import weakref
from typing import Any, Callable

import torch
from torch import nn

from . import exercise
from ._support import call_answer, collector_sees_only_new_objects, expect, run


# ---- 13.1 find the producer ---------------------------------------------------------------------

class _Fn(nn.Module):
    """A module that applies ``fn``: the steps of the models below, each with a name in ``named_modules()``."""

    def __init__(self, fn: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


class _Reordered(nn.Module):
    """Defined head, norm, body; called body, norm, head."""

    def __init__(self) -> None:
        super().__init__()
        self.head, self.norm = nn.Linear(4, 2), _Fn(lambda x: x / x.sum(dim=-1, keepdim=True))  # 0 / 0 = NaN for a row of 0
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(x)))


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale, self.exp, self.out = nn.Linear(3, 3), _Fn(torch.exp), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.exp(self.exp(self.scale(x))))


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.relu, self.split, self.out = nn.ReLU(), _Fn(lambda x: (x.clone(), torch.log(x))), nn.Linear(3, 1)  # log(0) = -inf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.split(self.relu(x))[1])


def _cases() -> list[tuple[str, nn.Module, torch.Tensor, tuple[str, int]]]:
    """(what, model, input, (first module, which call)): the truth is checked by :func:`_truth` too."""
    torch.manual_seed(13)
    reordered = _Reordered()
    with torch.no_grad():
        for layer in reordered.body.modules():
            if isinstance(layer, nn.Linear):
                layer.bias.fill_(-100.0)  # every ReLU output is 0: the division makes 0 / 0
    twice = _Twice()
    with torch.no_grad():
        twice.scale.weight.copy_(torch.eye(3)), twice.scale.bias.zero_()
    healthy = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    bad = torch.randn(2, 3)
    bad[1, 2] = float("nan")
    return [
        ("a model called in another order than it is defined", reordered, torch.randn(3, 4), ("norm", 1)),
        ("a module called twice", twice, torch.full((1, 3), 5.0), ("exp", 2)),  # exp(5) finite, exp(exp(5)) inf
        ("a module that returns a tuple", _Pair(), torch.tensor([[-1.0, 2.0, 3.0]]), ("split", 1)),
        ("an input that is already NaN", healthy, bad, ("0", 1)),
    ]


def _truth(model: nn.Module, x: torch.Tensor) -> tuple[str, int] | None:
    """The first module call with a non-finite output, by global hooks (the reference solution uses per-module ones)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names = {id(m): n for n, m in model.named_modules() if n}
    calls: collections.Counter = collections.Counter()
    found: list[tuple[str, int]] = []

    def count(module: nn.Module, args: Any) -> None:
        calls[names.get(id(module))] += 1

    def look(module: nn.Module, args: Any, output: Any) -> None:
        tensors = [t for t in (output if isinstance(output, tuple) else (output,)) if isinstance(t, torch.Tensor)]
        if not found and id(module) in names and not all(bool(torch.isfinite(t).all()) for t in tensors):
            found.append((names[id(module)], calls[names[id(module)]]))

    pre, post = register_module_forward_pre_hook(count), register_module_forward_hook(look)
    try:
        model(x)
    finally:
        pre.remove()
        post.remove()
    return found[0] if found else None


@exercise("13.1", answer="first_nonfinite")
def first_producer(answer: Any) -> None:
    for what, model, x, expected in _cases():
        assert _truth(model, x) == expected, what  # the cases are what they claim to be
        got = run(answer, model, x, leak_free=tuple(model.modules()),
                  returns=("`(模块名, 第几次调用)`", "`(module name, call number)`"))
        expect(isinstance(got, tuple) and len(got) == 2, "not-a-pair", f"应返回 `(模块名, 第几次调用)`，收到的是 {got!r}。",
               f"return `(module name, call number)`, got {got!r}.")
        expect(got[0] != expected[0] or got == expected, "call-number",
               f"{what}：模块 {got[0]!r} 对了，但出问题的是它的第 {expected[1]} 次调用，不是第 {got[1]} 次。",
               f"{what}: module {got[0]!r} is right, but it is its call {expected[1]}, not {got[1]}.")
        expect(got == expected, "module", f"{what}：第一个输出非有限值的模块调用是 {expected[0]!r}，你的函数给出 {got[0]!r}"
               "（按调用顺序找，不是 `named_modules()` 的顺序；元组输出要看每个元素）。",
               f"{what}: the first module call whose output is non-finite is {expected[0]!r}, your function says "
               f"{got[0]!r} (search in call order, not in `named_modules()` order; check every element of a tuple output).")


# ---- 13.2 a hook without a reference cycle ------------------------------------------------------

def _fresh_model() -> nn.Module:
    torch.manual_seed(14)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


@exercise("13.2", answer="count_calls")
@collector_sees_only_new_objects()  # its collections look at the checker's objects, not at the whole process
def no_cycle(answer: Any) -> None:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # the model must be freed by `del` alone: reference counting, no cycle collector
    try:
        model = _fresh_model()
        counts = call_answer(answer, model, returns=("计数的字典", "the dict of counts"))
        expect(isinstance(counts, dict), "not-a-dict", f"应返回计数的字典，收到的是 {type(counts).__name__}。",
               f"return the dict of counts, got a {type(counts).__name__}.")
        for _ in range(2):
            model(torch.randn(3, 4))
        expected = {"0": 2, "1": 2, "2": 2}
        expect(counts == expected, "counts", f"调用两次前向之后，计数应是 {expected}，你的字典是 {counts}。",
               f"after two forward calls the counts should be {expected}; your dict holds {counts}.")
        ref = weakref.ref(model)
        del model
        alive = ref() is not None
    finally:
        gc.collect()  # free what a wrong answer kept, whatever happened
        if was_enabled:
            gc.enable()
    expect(not alive, "cycle", "`del model` 之后模型仍然活着，要等垃圾回收器才会释放：你的钩子通过闭包（或绑定方法）引用了模型，"
           "模型又通过 `_forward_hooks` 引用钩子，形成了引用环。用钩子的 `module` 参数。",
           "the model is still alive after `del model` and waits for the garbage collector: your hook refers to the "
           "model through its closure (or a bound method), and the model refers to the hook through `_forward_hooks`: "
           "a reference cycle. Use the hook's `module` argument.")


# ---- 13.3 the first Node that makes a NaN gradient ----------------------------------------------

def _backward_cases() -> list[tuple[str, nn.Module, torch.Tensor]]:
    def net(middle: nn.Module, width: int) -> nn.Module:
        torch.manual_seed(15)
        first = nn.Linear(3, 3)
        model = nn.Sequential(first, middle, nn.Linear(width, 1))
        with torch.no_grad():
            first.weight[0].zero_(), first.bias[0].zero_()  # the first unit is exactly 0: its NaN
        return model                                         # gradient flows on into the first Linear

    torch.manual_seed(16)
    x = torch.randn(4, 3)
    # finite forwards; at x == 0 the backward of log computes 0 / 0, that of sqrt 0 * inf
    return [("a safe log", net(_Fn(lambda t: torch.where(t > 0, t.log(), 0.0)), 3), x),
            ("a safe square root", net(_Fn(lambda t: torch.where(t > 0, t.sqrt(), 0.0)), 3), x),
            ("a model whose gradients are all finite", net(nn.Tanh(), 3), x)]


def _anomaly_node(model: nn.Module, x: torch.Tensor) -> str | None:
    """The Node torch.autograd.detect_anomaly names as the first to return NaN (None: no NaN)."""
    import re
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode announces itself and prints the forward stack
        with torch.autograd.detect_anomaly():
            try:
                model(x).sum().backward()
            except RuntimeError as err:
                found = re.search(r"Function '(\w+)' returned nan values", str(err))
                if found is None:
                    raise
                return found.group(1)
    return None


@exercise("13.3", answer="first_nan_node")
def first_nan_node(answer: Any) -> None:
    for what, model, x in _backward_cases():
        truth = _anomaly_node(model, x)
        assert (truth is None) == what.startswith("a model whose"), what  # the cases are what they claim to be
        model.zero_grad(set_to_none=True)
        got = call_answer(answer, model, x, allow_none=truth is None)
        expect(truth is not None or got is None, "expected-none",
               f"{what}：没有任何节点产生非有限梯度，应返回 None，你的函数返回了 {got!r}。",
               f"{what}: no Node makes a non-finite gradient, so return None; your function returned {got!r}.")
        expect(got == truth, "node", f"{what}：第一个算出 NaN 梯度的节点是 {truth}，你的函数给出 {got!r}"
               "（检查节点算出的梯度 `grad_inputs`，不是它收到的 `grad_outputs`；要第一个，不是最后一个）。",
               f"{what}: the first Node that computed a NaN gradient is {truth}, your function says {got!r} (check the "
               "gradients a Node computed, `grad_inputs`, not those it received, `grad_outputs`; the first one, not "
               "the last).")
