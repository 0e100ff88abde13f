"""Exercises of notebook 13 (debugging with hooks): find the producer, a hook without a cycle, the first NaN Node and
the module that made it, the gradients of a module that returns a dict.

13.1 runs the learner's ``first_nonfinite(model, x)`` on fresh models (call order unlike definition order,
a module called twice whose second output is inf, a tuple output, a bad input) and compares with the truth found by
plain global hooks; 13.2 checks, on models of two depths, that the learner's counting hooks are there, count right
after each of two forwards and leave no reference cycle (with the garbage collector off, the model and every
submodule and parameter must be freed by ``del`` alone); 13.3
compares the learner's ``first_nan_node`` with the Node ``torch.autograd.detect_anomaly`` names and with the module
whose forward created it (found with a node-creation hook); 13.4 compares the gradients the learner's hooks store
for a dict output with the gradients known in closed form.
"""
from __future__ import annotations

import collections
import gc
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from . import exercise
from ._support import call_answer, collector_sees_only_new_objects, expect, guarded, is_handle, run

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


def _cases() -> list[tuple[str, str, nn.Module, torch.Tensor, tuple[str, int]]]:
    """(zh, en, model, input, (first module, which call)): the truth is checked by :func:`_truth` too."""
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
        ("一个调用顺序与定义顺序不同的模型", "a model called in another order than it is defined", reordered,
         torch.randn(3, 4), ("norm", 1)),
        ("一个被调用两次的模块", "a module called twice", twice, torch.full((1, 3), 5.0), ("exp", 2)),  # exp(exp(5)) = inf
        ("一个返回元组的模块", "a module that returns a tuple", _Pair(), torch.tensor([[-1.0, 2.0, 3.0]]), ("split", 1)),
        ("一个本来就含 NaN 的输入", "an input that is already NaN", healthy, bad, ("0", 1)),
    ]


def _output_has_nan(model: nn.Module, x: torch.Tensor, call: tuple[str, int]) -> bool:
    """Does the output of module call ``call`` (name, which call) hold a NaN (not only inf)?"""
    seen: list[bool] = []
    module = dict(model.named_modules())[call[0]]

    def look(m: nn.Module, args: Any, output: Any) -> None:
        outputs = output if isinstance(output, tuple) else (output,)
        seen.append(any(bool(torch.isnan(t).any()) for t in outputs if isinstance(t, torch.Tensor)))

    handle = module.register_forward_hook(look)
    try:
        model(x)
    finally:
        handle.remove()
    return seen[call[1] - 1]


def _tuple_output(model: nn.Module, x: torch.Tensor, call: tuple[str, int]) -> bool:
    """Is the output of module call ``call`` (name, which call) a tuple?"""
    seen: list[bool] = []
    handle = dict(model.named_modules())[call[0]].register_forward_hook(
        lambda m, args, output: seen.append(isinstance(output, tuple)))
    try:
        model(x)
    finally:
        handle.remove()
    return seen[call[1] - 1]


def _sees_every_element(answer: Any) -> bool:
    """Does the answer find a NaN (not an inf) in the second element of a tuple output? Told apart from missing
    inf: an answer that looks at ``output[0]`` only misses this NaN too."""
    torch.manual_seed(13)
    model = _Pair()
    model.split.fn = lambda x: (x.clone(), x / x)  # relu(-1) = 0 and 0 / 0 = NaN: in the second element only
    got = run(answer, model, torch.tensor([[-1.0, 2.0, 3.0]]), leak_free=tuple(model.modules()))
    return got == ("split", 1)


def _first_bad_input(model: nn.Module, x: torch.Tensor) -> tuple[str, int] | None:
    """The first module call that *received* a non-finite input (a usual mistake: the one after the producer)."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    names = {id(m): n for n, m in model.named_modules() if n}
    calls: collections.Counter = collections.Counter()
    found: list[tuple[str, int]] = []

    def look(module: nn.Module, args: Any) -> None:
        if id(module) in names:
            calls[names[id(module)]] += 1
            if not found and not all(bool(torch.isfinite(t).all()) for t in args if isinstance(t, torch.Tensor)):
                found.append((names[id(module)], calls[names[id(module)]]))

    with torch.no_grad():
        handle = register_module_forward_pre_hook(look)
        try:
            model(x)
        finally:
            handle.remove()
    return found[0] if found else None


def _checks_inputs(answer: Any) -> bool:
    """Does the answer name the module after a producer that comes first in both call and definition order (the
    one whose input is non-finite)? Told apart from searching in ``named_modules()`` order, which finds the
    producer here."""
    model = nn.Sequential(_Fn(lambda x: x / x), nn.Linear(3, 1))  # 0 / 0 = NaN in the first module's output
    return run(answer, model, torch.tensor([[0.0, 1.0, 2.0]]), leak_free=tuple(model.modules())) == ("1", 1)


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
    for zh, en, model, x, expected in _cases():
        assert _truth(model, x) == expected, en  # the cases are what they claim to be
        got = run(answer, model, x, leak_free=tuple(model.modules()),
                  returns=("`(模块名, 第几次调用)`", "`(module name, call number)`"))
        expect(isinstance(got, tuple) and len(got) == 2, "not-a-pair", f"应返回 `(模块名, 第几次调用)`，收到的是 {got!r}。",
               f"return `(module name, call number)`, got {got!r}.")
        expect(got[0] != expected[0] or got == expected, "call-number",
               f"{zh}：模块 {got[0]!r} 对了，但出问题的是它的第 {expected[1]} 次调用，不是第 {got[1]} 次。",
               f"{en}: module {got[0]!r} is right, but it is its call {expected[1]}, not {got[1]}.")
        if got != expected and got == _first_bad_input(model, x):
            expect(not _checks_inputs(answer), "checked-inputs",
                   f"{zh}：第一个输出非有限值的是 {expected[0]!r} 的第 {expected[1]} 次调用，你的函数给出的 {got[0]!r} "
                   "是它后面那个**收到**非有限输入的模块：你检查的是每次调用的输入。要看每次调用的输出"
                   "（前向钩子，不是前向前置钩子）。",
                   f"{en}: the first non-finite output is that of {expected[0]!r}, call {expected[1]}; your function "
                   f"says {got[0]!r}, the module after it, which *received* the non-finite value: you checked each "
                   "call's inputs. Check each call's output instead (a forward hook, not a forward pre-hook).")
        if got != expected and _tuple_output(model, x, expected):
            expect(_sees_every_element(answer), "tuple-element",
                   f"{zh}：第一个输出非有限值的是 {expected[0]!r} 的第 {expected[1]} 次调用，它返回一个元组，非有限值在第二个元素里，"
                   f"你的函数给出 {got[0]!r}。元组输出要检查每一个元素，不只是 `output[0]`。",
                   f"{en}: the first non-finite output is that of {expected[0]!r}, call {expected[1]}; it returns a "
                   f"tuple whose second element is non-finite, and your function says {got[0]!r}. Check every element "
                   "of a tuple output, not only `output[0]`.")
        expect(got == expected or _output_has_nan(model, x, expected), "inf-missed",
               f"{zh}：第一个输出非有限值的是 {expected[0]!r} 的第 {expected[1]} 次调用，它的输出里是 inf 而不是 NaN，你的函数给出 "
               f"{got[0]!r}。非有限值不只有 NaN：`torch.isnan` 看不到 inf，用 `torch.isfinite`。",
               f"{en}: the first non-finite output is that of {expected[0]!r}, call {expected[1]}, and it holds inf, "
               f"not NaN; your function says {got[0]!r}. NaN is not the only non-finite value: `torch.isnan` misses "
               "inf, `torch.isfinite` does not.")
        expect(got == expected, "module", f"{zh}：第一个输出非有限值的模块调用是 {expected[0]!r}，你的函数给出 {got[0]!r}"
               "（按调用顺序找，不是 `named_modules()` 的顺序；元组输出要看每个元素）。",
               f"{en}: the first module call whose output is non-finite is {expected[0]!r}, your function says "
               f"{got[0]!r} (search in call order, not in `named_modules()` order; check every element of a tuple output).")


# ---- 13.2 a hook without a reference cycle ------------------------------------------------------

# (layers, forward calls before the first look, more calls before the second): two forwards on models of two depths,
# the counts looked at after each (the dict the answer returned must keep counting: its hooks fill it), so that no
# fixed dict is right
_CASES_13_2 = ((3, 1, 1), (5, 1, 1))


def _fresh_model(layers: int = 3) -> nn.Sequential:
    torch.manual_seed(14)
    widths = [4 + i % 2 for i in range(layers // 2 + 1)] + [2]
    modules: list[nn.Module] = []
    for i in range(layers):
        modules.append(nn.Linear(widths[i // 2], widths[i // 2 + 1]) if i % 2 == 0 else nn.ReLU())
    return nn.Sequential(*modules)


def _has_forward_hooks(model: nn.Module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@exercise("13.2", answer="count_calls")
@collector_sees_only_new_objects()  # its collections look at the checker's objects, not at the whole process
def no_cycle(answer: Any) -> None:
    for layers, first, more in _CASES_13_2:
        _no_cycle_on(answer, layers, first, more)


def _no_cycle_on(answer: Any, layers: int, first: int, more: int) -> None:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # the model must be freed by `del` alone: reference counting, no cycle collector
    try:
        model = _fresh_model(layers)
        counts = call_answer(answer, model, returns=("计数的字典", "the dict of counts"))
        expect(isinstance(counts, dict), "not-a-dict", f"应返回计数的字典，收到的是 {type(counts).__name__}。",
               f"return the dict of counts, got a {type(counts).__name__}.")
        expect(_has_forward_hooks(model), "no-hook",
               "你的函数返回后，模型的子模块上没有前向钩子：计数要由钩子在每次前向时记下，而不是写死在字典里。",
               "after your function returned, no forward hook is on the model's submodules: the counts must be "
               "written by hooks at every forward call, not fixed in the dict.")
        inputs = torch.randn(3, 4)  # every model starts with a Linear(4, ...)
        done = 0
        for calls in (first, first + more):
            for _ in range(calls - done):
                model(inputs)
            done = calls
            expected = {str(i): calls for i in range(layers)}
            expect(counts == expected, "counts",
                   f"{layers} 层的模型调用 {calls} 次前向之后，计数应是 {expected}，你的字典是 {counts}。",
                   f"after {calls} forward call{'s' if calls > 1 else ''} of a model of {layers} layers the counts "
                   f"should be {expected}; "
                   f"your dict holds {counts}.")
        refs = [(name or "model", weakref.ref(m)) for name, m in model.named_modules()]
        refs += [(name, weakref.ref(p)) for name, p in model.named_parameters()]
        del model
        alive = [name for name, ref in refs if ref() is not None]
    finally:
        gc.collect()  # free what a wrong answer kept, whatever happened
        if was_enabled:
            gc.enable()
    expect("model" not in alive, "cycle", "`del model` 之后模型仍然活着，要等垃圾回收器才会释放：你的钩子通过闭包（或绑定方法）引用了模型，"
           "模型又通过 `_forward_hooks` 引用钩子，形成了引用环。用钩子的 `module` 参数。",
           "the model is still alive after `del model` and waits for the garbage collector: your hook refers to the "
           "model through its closure (or a bound method), and the model refers to the hook through `_forward_hooks`: "
           "a reference cycle. Use the hook's `module` argument.")
    expect(not alive, "submodule-cycle", f"`del model` 之后模型本身被释放了，但 {', '.join(alive)} 仍然活着，要等垃圾回收器："
           "钩子的闭包引用了一个以子模块本身为键（或值）的字典，子模块又通过 `_forward_hooks` 引用钩子，形成了引用环。"
           "字典的键用 `id(module)` 或名字，或者用 `weakref`。",
           f"the model itself is freed by `del model`, but {', '.join(alive)} are still alive, waiting for the garbage "
           "collector: the hook's closure holds a dict keyed by (or holding) the submodules themselves, and each "
           "submodule holds the hook through `_forward_hooks`: a reference cycle. Key the dict by `id(module)` or by "
           "name, or use a `weakref`.")


# ---- 13.3 the first Node that makes a NaN gradient, and the module that created it -----------------

class _SqrtInOwnForward(nn.Module):
    """The NaN-making square root sits in the model's own forward, in no submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.out = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        return self.out(torch.where(h > 0, h.sqrt(), 0.0))


def _backward_cases() -> list[tuple[str, str, nn.Module, torch.Tensor]]:
    def zero_first_unit(first: nn.Linear) -> None:
        with torch.no_grad():
            first.weight[0].zero_(), first.bias[0].zero_()  # the first unit is exactly 0: its NaN gradient flows on

    def net(middle: nn.Module, width: int) -> nn.Module:
        torch.manual_seed(15)
        first = nn.Linear(3, 3)
        model = nn.Sequential(first, middle, nn.Linear(width, 1))
        zero_first_unit(first)
        return model

    torch.manual_seed(15)
    own = _SqrtInOwnForward()
    zero_first_unit(own.first)
    torch.manual_seed(16)
    x = torch.randn(4, 3)
    # finite forwards; at x == 0 the backward of log computes 0 / 0, that of sqrt 0 * inf
    return [("一个“安全的”对数", "a safe log", net(_Fn(lambda t: torch.where(t > 0, t.log(), 0.0)), 3), x),
            ("一个“安全的”平方根", "a safe square root", net(_Fn(lambda t: torch.where(t > 0, t.sqrt(), 0.0)), 3), x),
            ("写在模型自己的 forward 里的平方根", "a square root in the model's own forward", own, x),
            ("一个梯度全部有限的模型", "a model whose gradients are all finite", net(nn.Tanh(), 3), x)]


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


def _creating_modules(model: nn.Module, x: torch.Tensor) -> dict[str, set[str]]:
    """{Node name: names of the innermost modules whose forward created a Node of that name} ("": the model itself),
    found with a node-creation hook and a stack of the modules running (not the way the learner is asked to)."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    names = {id(m): n for n, m in model.named_modules()}
    running: list[str] = []
    created: dict[str, set[str]] = collections.defaultdict(set)

    def enter(module: nn.Module, args: Any) -> None:
        running.append(names.get(id(module), "?"))

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        running.pop()

    handles = [register_module_forward_pre_hook(enter), register_module_forward_hook(leave)]
    try:
        with torch.autograd.graph.node_creation_hook(lambda node: created[node.name()].add(running[-1])):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return created


@exercise("13.3", answer="first_nan_node")
def first_nan_node(answer: Any) -> None:
    for zh, en, model, x in _backward_cases():
        node = _anomaly_node(model, x)
        assert (node is None) == en.startswith("a model whose"), en  # the cases are what they claim to be
        modules = _creating_modules(model, x).get(node, set()) if node else set()
        assert node is None or len(modules) == 1, en
        truth = (node, modules.pop()) if node else None
        model.zero_grad(set_to_none=True)
        got = run(answer, model, x, leak_free=tuple(model.modules()), allow_none=truth is None,
                  returns=("`(节点名, 模块名)`", "`(Node name, module name)`"))
        expect(truth is not None or got is None, "expected-none",
               f"{zh}：没有任何节点产生非有限梯度，应返回 None，你的函数返回了 {got!r}。",
               f"{en}: no Node makes a non-finite gradient, so return None; your function returned {got!r}.")
        if truth is None:
            continue
        expect(isinstance(got, tuple) and len(got) == 2, "not-a-pair",
               f"{zh}：应返回 `(节点名, 模块名)`，收到的是 {got!r}。", f"{en}: return `(Node name, module name)`, got {got!r}.")
        expect(got[0] == truth[0], "node", f"{zh}：第一个算出 NaN 梯度的节点是 {truth[0]}，你的函数给出 {got[0]!r}"
               "（检查节点算出的梯度 `grad_inputs`，不是它收到的 `grad_outputs`；要第一个，不是最后一个）。",
               f"{en}: the first Node that computed a NaN gradient is {truth[0]}, your function says {got[0]!r} (check "
               "the gradients a Node computed, `grad_inputs`, not those it received, `grad_outputs`; the first one, not "
               "the last).")
        where_zh = "模型自己（`\"\"`）" if truth[1] == "" else repr(truth[1])
        where_en = "the model itself (`\"\"`)" if truth[1] == "" else repr(truth[1])
        expect(got[1] == truth[1], "module",
               f"{zh}：节点 {truth[0]} 对了，但创建它的是 {where_zh} 的 forward，你的函数给出 {got[1]!r}。一个节点属于创建它的"
               "最内层模块：每个模块的前向钩子从它的输出往回走到它的输入为止，只认领其间还没有被认领的节点（内层模块先结束，先认领）；"
               "剩下的属于外层模块。",
               f"{en}: Node {truth[0]} is right, but it was created by the forward of {where_en}, and your function "
               f"says {got[1]!r}. A Node belongs to the innermost module that created it: each module's forward hook "
               "walks back from its output to its inputs and claims the Nodes in between that no module has claimed "
               "yet (inner modules finish, and claim, first); what is left belongs to the outer module.")


# ---- 13.4 the gradients of a module that returns a dict ------------------------------------------

class _DictBlock(nn.Module):
    """Returns a dict, as Hugging Face blocks do."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.lin(x)
        return {"hidden": h.tanh(), "gate": h.sigmoid()}


def _dict_step(block: nn.Module, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward + backward of block: (input gradient, the gradient of each output, known in closed form)."""
    torch.manual_seed(seed)
    x, weights = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    out = block(x)
    ((out["hidden"] * weights).sum() + out["gate"].square().sum()).backward()  # d/d hidden = weights, d/d gate = 2 gate
    assert x.grad is not None
    return x.grad, {"hidden": weights, "gate": 2 * out["gate"].detach()}


class _Seen(dict):
    """The learner's ``store``: a dict that also keeps every ``store[key] = value`` made into it."""

    def __init__(self) -> None:
        super().__init__()
        self.sets: list[tuple[Any, Any]] = []

    def __setitem__(self, key: Any, value: Any) -> None:
        self.sets.append((key, value))
        super().__setitem__(key, value)


def _stored_under_another_key(sets: list[tuple[Any, Any]], truth: dict[str, torch.Tensor]) -> tuple[str, Any] | None:
    """``(output key, key it was stored under)`` for a gradient stored under another output's key."""
    for key, value in sets:
        for name, grad in truth.items():
            if name == key or key not in truth or not isinstance(value, torch.Tensor) or value.shape != grad.shape:
                continue
            if torch.allclose(value, grad) and not torch.allclose(grad, truth[key]):
                return name, key
    return None


@exercise("13.4", answer="watch_output_grads")
def dict_output_grads(answer: Any) -> None:
    torch.manual_seed(17)
    block = _DictBlock()
    plain = _DictBlock()
    plain.load_state_dict(block.state_dict())
    store = _Seen()
    handle = run(answer, block, store, returns=("前向钩子的句柄", "the handle of your forward hook"))
    expect(is_handle(handle), "not-a-handle", f"应返回注册前向钩子得到的句柄，收到的是 {type(handle).__name__}。",
           f"return the handle that registering your forward hook gave you, not a {type(handle).__name__}.")
    previous: dict = {}
    for seed in (1, 2):  # store is not emptied between the two: after each backward it holds that backward's own
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a full backward hook's "module output should be a Tensor or a tuple"
            store.sets.clear()
            with guarded("raised-in-backward", "前向或反向时你的钩子", "during forward or backward your hooks"):
                x_grad, truth = _dict_step(block, seed)
        expect(store or not (block._backward_hooks or block._backward_pre_hooks), "full-backward-hook",
               "反向之后 `store` 是空的：模块返回字典时，完整反向钩子和反向前置钩子一次也不会触发（第 13 课第 5 节）。"
               "在前向钩子里给输出的每个张量注册张量钩子。",
               "`store` is empty after backward: for a module that returns a dict, full backward hooks and backward "
               "pre-hooks never fire (notebook 13, section 5). Register a tensor hook on each tensor of the output from "
               "a forward hook.")
        misplaced = None if set(store) == set(truth) else _stored_under_another_key(store.sets, truth)
        expect(misplaced is None, "late-bound-key",
               f"输出 {misplaced and misplaced[0]!r} 的梯度被存到了键 {misplaced and misplaced[1]!r} 下：循环里定义的 lambda "
               "在反向时才读循环变量 `key`，那时循环早已结束，它的值是最后一个键。定义时就把它绑定下来："
               "`lambda grad, key=key: ...`（或者用一个接收 key 的函数来生成钩子）。",
               f"the gradient of output {misplaced and misplaced[0]!r} was stored under the key "
               f"{misplaced and misplaced[1]!r}: a lambda made in the loop reads the loop variable `key` when it runs, "
               "in backward, long after the loop ended, when it holds the last key. Bind it when the lambda is made: "
               "`lambda grad, key=key: ...` (or make each hook with a function that takes the key).")
        expect(set(store) == set(truth), "keys", f"`store` 的键应是输出字典的键 {sorted(truth)}，现在是 {sorted(store, key=str)}。",
               f"`store` should be keyed by the output dict's keys {sorted(truth)}; it holds {sorted(store, key=str)}.")
        expect(not previous or not all(isinstance(store[k], torch.Tensor) and store[k].shape == truth[k].shape
                                       and torch.allclose(store[k], previous[k] + truth[k]) for k in truth),
               "accumulated", "第二次反向之后，`store` 里是两次反向梯度的和：每次反向要存这一次的梯度（替换旧的），不要加到上一次的上面。",
               "after the second backward `store` holds the sum of both backward passes' gradients: store each "
               "backward's own gradient (replacing the old one), do not add it to the one before.")
        expect(all(isinstance(store[k], torch.Tensor) and store[k].shape == truth[k].shape
                   and torch.allclose(store[k], truth[k]) for k in truth), "wrong-grad",
               "`store` 里的张量不是对应输出的梯度：张量钩子收到的参数就是它。",
               "the tensors in `store` are not the gradients of the outputs: a tensor hook receives exactly that.")
        plain_grad, _ = _dict_step(plain, seed)
        expect(torch.allclose(x_grad, plain_grad), "changed-gradient",
               "你的钩子改变了流向输入的梯度：只观察的张量钩子要返回 None（不要返回修改过的梯度，也不要就地修改它）。",
               "your hooks changed the gradient that flows on to the input: a tensor hook that only observes returns "
               "None (return no changed gradient, and do not change it in place).")
        previous = truth
    handle.remove()
    store.clear()
    _dict_step(block, 3)
    expect(not store and not block._forward_hooks, "handle-missing",
           "`remove()` 了你返回的句柄之后，钩子仍在记录（或模块上还留着前向钩子）：返回的句柄要覆盖你注册的前向钩子。",
           "after `remove()` of the handle you returned, hooks still record (or a forward hook is left on the module): "
           "the handle you return must be that of your forward hook.")
