"""Exercises of notebook 03 (module forward hooks).

03.1 ``clamp_inputs(module, low, high)``: register a forward pre-hook that clamps the input, return its handle.
03.2 ``double_c(module, args, kwargs)``: a ``with_kwargs=True`` pre-hook that doubles ``c`` however it is passed.
03.3 ``count_calls(model, x)``: count the calls of each module class in one forward pass with global hooks.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..attempt import first_sentence
from ...inventory import hook_inventory
from . import (NotSolved, Wrong, call_answer, drop_global_hooks_added_since, exercise, global_hook_ids,
               no_hooks_left, require_callable)

def _short(exc: BaseException) -> str:
    """An exception's first sentence, without the value reprs some torch messages append."""
    text = first_sentence(exc).split(", but got")[0]
    return text if len(text) <= 160 else text[:157] + "..."


def _tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-6)


# ---- 03.1 clamp the input with a forward pre-hook, return the handle -----------------------

@exercise("03.1",
          hint=("在函数里定义一个前向前置钩子 `def clamp(module, args): return args[0].clamp(low, high)`（返回新张量，"
                "不要用原地的 `clamp_`），用 `module.register_forward_pre_hook(clamp)` 注册，并把它返回的句柄 `return` 出去；"
                "不要放进 `with HookScope()`，否则函数返回时钩子已被移除。",
                "inside the function define a pre-hook `def clamp(module, args): return args[0].clamp(low, high)` "
                "(a new tensor, not the in-place `clamp_`), register it with `module.register_forward_pre_hook(clamp)` "
                "and `return` the handle that call gives you; no `with HookScope()` here, or the hook is gone by the "
                "time the function returns."),
          solution='''
def clamp_inputs(module, low, high):
    def clamp(module, args):
        return args[0].clamp(low, high)  # one tensor: PyTorch wraps it into (tensor,)
    return module.register_forward_pre_hook(clamp)
''')
def clamp_inputs(answer) -> None:
    require_callable(answer, "clamp_inputs")
    for seed, (n_in, n_out), (low, high), scale in [(1, (3, 2), (-1.0, 1.0), 2.0), (4, (5, 3), (-0.5, 0.25), 1.5),
                                                     (8, (2, 4), (0.0, 2.0), 3.0)]:
        torch.manual_seed(seed)
        module = nn.Linear(n_in, n_out)
        inputs = [torch.randn(4, n_in) * scale, torch.randn(2, n_in) * scale]
        where = f"nn.Linear({n_in}, {n_out}), low={low}, high={high}"
        globals_before = global_hook_ids()
        try:
            handle = call_answer(answer, module, low, high,
                                 returns=("`register_forward_pre_hook` 给你的句柄（handle）", "the handle that "
                                          "`register_forward_pre_hook` gave you"))
        finally:
            leaked_global = drop_global_hooks_added_since(globals_before)
        if leaked_global:
            raise Wrong("你的函数注册了全局钩子；这里只需要在 `module` 上注册一个前向前置钩子。",
                        "your function registered a global hook; register one forward pre-hook on `module` only.")
        if not callable(getattr(handle, "remove", None)):
            raise Wrong(f"应返回 `register_forward_pre_hook` 给出的句柄（有 `.remove()` 方法），收到的是 {type(handle).__name__}。",
                        f"return the handle `register_forward_pre_hook` gives you (it has `.remove()`), "
                        f"not a {type(handle).__name__}.")
        kinds = [entry.kind for entry in hook_inventory(module, include_global=False)]
        if not kinds:
            raise Wrong("函数返回时模块上已经没有钩子了：`with HookScope()` 在离开时会移除钩子。这里要让钩子留下，"
                        "由调用者用你返回的句柄移除。",
                        "no hook is left on the module when your function returns: a `with HookScope()` block removes it "
                        "on exit. Here the hook must stay, and the caller removes it with the handle you return.")
        if "forward_pre" not in kinds:
            raise Wrong(f"模块上挂的是 {', '.join(sorted(set(kinds)))} 钩子；裁剪输入要用前向**预**钩子 `register_forward_pre_hook`。",
                        f"the module carries a {', '.join(sorted(set(kinds)))} hook; clamping the input needs a forward "
                        f"*pre*-hook, `register_forward_pre_hook`.")
        with torch.no_grad():
            for x in inputs:
                before = x.clone()
                try:
                    out = module(x)
                except Exception as exc:  # the learner's hook failed inside the module call
                    raise Wrong(f"带着你的钩子调用 {where} 时抛出 {type(exc).__name__}: {_short(exc)}",
                                f"calling {where} with your hook raised {type(exc).__name__}: {_short(exc)}") from exc
                if not torch.equal(x, before):
                    raise Wrong("调用者传入的张量被原地修改了（`clamp_`）；钩子应返回一个新张量 `args[0].clamp(low, high)`。",
                                "the caller's tensor was modified in place (`clamp_`); the hook should return a new "
                                "tensor, `args[0].clamp(low, high)`.")
                truth = F.linear(x.clamp(low, high), module.weight, module.bias)
                if isinstance(out, torch.Tensor) and _tensors_equal(out, truth):
                    continue
                if isinstance(out, torch.Tensor) and _tensors_equal(out, F.linear(x, module.weight, module.bias)):
                    raise Wrong("有钩子时输出没变：前向前置钩子要**返回**裁剪后的输入，返回值才会替换 `args`。",
                                "the output did not change with your hook: the pre-hook must *return* the clamped input, "
                                "which then replaces `args`.")
                if isinstance(out, torch.Tensor) and _tensors_equal(out, F.linear(x.clamp(-1, 1), module.weight, module.bias)):
                    raise Wrong(f"输入被裁剪到了 [-1, 1]，而这次调用要求 [{low}, {high}]：用参数 `low`、`high`。",
                                f"the input was clamped to [-1, 1], but this call asks for [{low}, {high}]: use the "
                                f"arguments `low` and `high`.")
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                diff = f"{(out - truth).abs().max().item():.3g}" if isinstance(out, torch.Tensor) and out.shape == truth.shape else "?"
                raise Wrong(f"{where}：输出应等于 `F.linear(x.clamp(low, high), W, b)`（形状 {tuple(truth.shape)}），"
                            f"收到形状 {got}，最大偏差 {diff}。",
                            f"{where}: the output should equal `F.linear(x.clamp(low, high), W, b)` (shape "
                            f"{tuple(truth.shape)}); got shape {got}, largest difference {diff}.")
        handle.remove()
        if hook_inventory(module, include_global=False):
            raise Wrong("调用 `handle.remove()` 之后模块上还有钩子：只注册一个钩子，并返回它的句柄。",
                        "a hook is still on the module after `handle.remove()`: register one hook and return its handle.")
        with torch.no_grad():
            if not torch.equal(module(inputs[0]), F.linear(inputs[0], module.weight, module.bias)):
                raise Wrong("调用 `handle.remove()` 之后模块的输出仍不等于 `F.linear(x, W, b)`；除了注册钩子，函数不应改动模块。",
                            "after `handle.remove()` the module's output is still not `F.linear(x, W, b)`; your function "
                            "should change nothing about the module except registering the hook.")


# ---- 03.2 double c, passed positionally or as a keyword ------------------------------------

class ThreeInputs(nn.Module):
    """``forward(a, b, c)`` stacks what it received, so the checker sees each argument."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.stack((a, b, c))


_CALLS: list[tuple[str, Callable[..., Any]]] = [
    ("net(a, b, c)", lambda net, a, b, c: net(a, b, c)),
    ("net(a, b, c=c)", lambda net, a, b, c: net(a, b, c=c)),
    ("net(a, b=b, c=c)", lambda net, a, b, c: net(a, b=b, c=c)),
]


def _factor(received: torch.Tensor, sent: torch.Tensor) -> float | None:
    """k when ``received == k * sent`` (None otherwise)."""
    k = float((received * sent).sum() / (sent * sent).sum())
    return round(k, 4) if torch.allclose(received, k * sent, atol=1e-5) else None


@exercise("03.2",
          hint=("`c` 按位置传入时在 `args[2]`（`len(args) > 2`），否则在 `kwargs['c']`。两种情况都返回 `(新的 args, 新的 kwargs)`，"
                "用 `(*args[:2], args[2] * 2)` 或 `{**kwargs, 'c': kwargs['c'] * 2}` 构造新值，不要原地修改（`*=`）。",
                "passed positionally, `c` is `args[2]` (`len(args) > 2`); otherwise it is `kwargs['c']`. In both cases "
                "return `(new_args, new_kwargs)`, built as `(*args[:2], args[2] * 2)` or `{**kwargs, 'c': kwargs['c'] * 2}`; "
                "do not change tensors in place (`*=`)."),
          solution='''
def double_c(module, args, kwargs):
    if len(args) > 2:  # c was passed positionally
        return (*args[:2], args[2] * 2), kwargs
    return args, {**kwargs, "c": kwargs["c"] * 2}
''')
def double_c(answer) -> None:
    require_callable(answer, "double_c")
    returned = []

    def probe(module, args, kwargs):
        result = answer(module, args, kwargs)
        returned.append(result)
        return result

    failures = []
    for seed, (call, run) in zip((2, 5, 9), _CALLS):
        torch.manual_seed(seed)
        shape = (seed % 3 + 2,)
        a, b, c = torch.randn(shape), torch.randn(shape), torch.randn(shape)
        sent = (a.clone(), b.clone(), c.clone())
        net = ThreeInputs()
        handle = net.register_forward_pre_hook(probe, with_kwargs=True)
        try:
            out = run(net, a, b, c)
        except Exception as exc:  # the learner's hook, or what torch made of its return value, failed
            raise Wrong(f"调用 `{call}` 时抛出 {type(exc).__name__}: {_short(exc)}",
                        f"calling `{call}` raised {type(exc).__name__}: {_short(exc)}") from exc
        finally:
            handle.remove()
        for name, tensor, original in zip("abc", (a, b, c), sent):
            if not torch.equal(tensor, original):
                raise Wrong(f"调用 `{call}` 之后，调用者的 `{name}` 被原地修改了；用 `kwargs['c'] * 2` 这样的新张量，"
                            f"不要用 `*=`。",
                            f"after `{call}` the caller's `{name}` was modified in place; build a new tensor such as "
                            f"`kwargs['c'] * 2` instead of using `*=`.")
        failures += [(call, name, _factor(received, original), expected)
                     for name, received, original, expected in zip("abc", out, sent, (1.0, 1.0, 2.0))
                     if not torch.allclose(received, expected * original, atol=1e-6)]
    if all(r is None for r in returned) and len(failures) == len(_CALLS) \
            and all(name == "c" and factor == 1.0 for _, name, factor, _ in failures):  # nothing changed anywhere
        raise NotSolved("你的钩子还没有返回任何值（返回了 None），所以什么都没改变。",
                        "your hook returns None so far, so it changes nothing.")
    if failures:
        call, name, factor, expected = failures[0]
        if factor == 1.0:
            how_zh, how_en = "没有变", "unchanged"
        elif factor is not None:
            how_zh, how_en = f"乘以了 {factor:g}", f"multiplied by {factor:g}"
        else:
            how_zh, how_en = "被改成了别的值", "changed in some other way"
        want_zh = "乘以 2" if name == "c" else "保持不变"
        want_en = "doubled" if name == "c" else "unchanged"
        raise Wrong(f"调用 `{call}` 时，`forward` 收到的 `{name}` {how_zh}，应当{want_zh}。",
                    f"called as `{call}`, `forward` received `{name}` {how_en}; it should be {want_en}.")


# ---- 03.3 count the calls of each module class with global forward hooks -------------------

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
    plain = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    x_plain = torch.randn(3, 4)
    torch.manual_seed(6)
    nested = nn.Sequential(nn.Linear(5, 6), nn.Sequential(nn.Tanh(), nn.Linear(6, 6), nn.ReLU()), nn.Linear(6, 2))
    x_nested = torch.randn(2, 5)
    torch.manual_seed(12)
    shared_lin, shared_act = nn.Linear(3, 3), nn.ReLU()
    shared = nn.Sequential(shared_lin, shared_act, shared_lin, shared_act, Block(3))  # the same modules twice
    x_shared = torch.randn(4, 3)
    return [
        (("`nn.Sequential(Linear, ReLU, Linear)`", "`nn.Sequential(Linear, ReLU, Linear)`"), plain, x_plain,
         {"Linear": 2, "ReLU": 1, "Sequential": 1}),
        (("一个嵌套了 `Sequential` 的 `Sequential`", "a `Sequential` nested in a `Sequential`"), nested, x_nested,
         {"Linear": 3, "ReLU": 1, "Sequential": 2, "Tanh": 1}),
        (("一个把同一个 `Linear` 和同一个 `ReLU` 各用两次、最后接一个 `Block` 的 `Sequential`"
          "（`Block` 的 `forward` 调用自己的 `fc` 两次，中间用 `F.relu`）",
          "a `Sequential` that uses one `Linear` and one `ReLU` twice each, then a `Block` (whose `forward` calls "
          "its `fc` twice, with `F.relu` in between)"), shared, x_shared,
         {"Block": 1, "Linear": 4, "ReLU": 2, "Sequential": 1}),
    ]


def _show(counts: Mapping) -> str:
    return "{" + ", ".join(f"{k!r}: {counts[k]!r}" for k in sorted(counts, key=str)) + "}"


@exercise("03.3",
          hint=("在 `with hooklab.HookScope() as scope:` 里用 `torch.nn.modules.module.register_module_forward_hook` 注册"
                "一个全局钩子，每次调用把 `type(module).__name__` 计数一次，然后运行 `model(x)`。同一个模块被调用两次就要数两次，"
                "所以不能只数 `model.modules()`。",
                "inside `with hooklab.HookScope() as scope:` register one global hook with "
                "`torch.nn.modules.module.register_module_forward_hook` that counts `type(module).__name__` on every call, "
                "then run `model(x)`. A module called twice counts twice, so counting `model.modules()` is not enough."),
          solution='''
def count_calls(model, x):
    import torch.nn.modules.module as module_globals
    counts = {}

    def count(module, args, output):
        name = type(module).__name__
        counts[name] = counts.get(name, 0) + 1

    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(count))
        model(x)
    return counts
''')
def count_calls(answer) -> None:
    require_callable(answer, "count_calls")
    for (what_zh, what_en), model, x, truth in _call_count_cases():
        with no_hooks_left(model):
            result = call_answer(answer, model, x)
        if not isinstance(result, Mapping):
            raise Wrong(f"应返回一个字典 {{类名: 调用次数}}，收到的是 {type(result).__name__}。",
                        f"return a dict {{class name: number of calls}}, not a {type(result).__name__}.")
        if any(not isinstance(key, str) for key in result):
            raise Wrong("字典的键应是类名字符串，例如 `type(module).__name__`。",
                        "the dict's keys should be class names as strings, e.g. `type(module).__name__`.")
        if dict(result) != truth:
            raise Wrong(f"对{what_zh}，一次前向中各类模块的调用次数是 {_show(truth)}，你的函数返回 {_show(result)}。",
                        f"for {what_en}, one forward pass calls the module classes {_show(truth)} times; your "
                        f"function returned {_show(result)}.")
