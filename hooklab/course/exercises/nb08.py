"""Exercises of notebook 08 (pitfalls): each one is a classic pitfall to avoid."""
from __future__ import annotations

from collections import OrderedDict
from functools import partial
from typing import Any

import torch
from torch import nn

from ..._torch_internals import module_hook_dicts
from ...inventory import hook_inventory
from . import exercise
from ._support import NotSolved, call_answer, drop_global_hooks_added_since, expect, fail, global_hook_ids, guarded, run


def _branchy(width: int) -> nn.Sequential:
    """Linear layers of different widths, some nested, so that a mix-up of names shows."""
    return nn.Sequential(OrderedDict(encoder=nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, width + 2)),
                                     act=nn.ReLU(), head=nn.Linear(width + 2, 1)))


@exercise("08.1", answer="linear_output_shapes")
def linear_output_shapes(answer: Any) -> None:
    for seed, width, batch in [(0, 4, 2), (1, 7, 5)]:
        torch.manual_seed(seed)
        model, x = _branchy(width), torch.randn(batch, 3)
        truth = {"encoder.0": (batch, width), "encoder.2": (batch, width + 2), "head": (batch, 1)}
        hooked: dict[str, bool] = {}  # whether a forward hook was on the layer when it ran

        def watch(module: nn.Module, args: Any, name: str) -> None:
            hooked.setdefault(name, any(entry.kind == "forward" for entry in hook_inventory(module)))
        watching = [model.get_submodule(name).register_forward_pre_hook(partial(watch, name=name)) for name in truth]
        try:
            result = run(answer, model, x, leak_free=(model,))
        finally:
            for handle in watching:
                handle.remove()
        expect(isinstance(result, dict), "not-a-dict", f"应返回字典 {{层名: 形状}}，收到的是 {type(result).__name__}。",
               f"return a dict {{layer name: shape}}, not a {type(result).__name__}.")
        got = {k: tuple(v) if isinstance(v, (tuple, list, torch.Size)) else v for k, v in result.items()}
        bare = [name for name in truth if hooked.get(name) is False]
        expect(not bare or set(got) != {name for name in truth if name not in bare}, "nested-not-hooked",
               f"嵌套在子模块里的 {bare} 运行时身上没有前向钩子，所以你只得到 {sorted(got)}：`named_children()`"
               "（或直接遍历 `model`）只给出最外一层的模块；`named_modules()` 会递归走进每个子模块。",
               f"the nested layers {bare} had no forward hook when they ran, so you only got {sorted(got)}: "
               "`named_children()` (or a loop over `model`) gives only the top-level modules; `named_modules()` "
               "walks into every submodule.")
        expect(len(got) != 1 or not set(got) <= {"head", "encoder.2"}, "late-binding",
               f"只得到一个名字 {list(got)}：所有钩子都读到了循环最后的 `name`（延迟绑定）。",
               f"only one name, {list(got)}: every hook read the loop's last `name` (late binding).")
        expect(set(got) == set(truth), "layer-names",
               f"层名应为 {sorted(truth)}（`named_modules()` 的名字，只要 `nn.Linear`），你返回的是 {sorted(got)}。",
               f"the names should be {sorted(truth)} (names from `named_modules()`, `nn.Linear` only); "
               f"you returned {sorted(got)}.")
        for k, shape in truth.items():
            expect(got[k] == shape, "shape", f"`{k}` 的输出形状是 {shape}，你返回的是 {got[k]}。",
                   f"the output of `{k}` has shape {shape}; you returned {got[k]}.")


def _run_cell_twice(answer: Any, model: nn.Module, x: torch.Tensor) -> tuple[int, int, bool]:
    """Someone else's hook on ``model``; the learner's cell run twice, then 3 forward passes: the count, how
    often the other hook fired, and whether a global hook was left (removed, like every hook on ``model``)."""
    other: list[int] = []
    counts: dict = {}
    other_handle = model.register_forward_hook(lambda m, a, out: other.append(1))
    globals_before = global_hook_ids()
    try:
        call_answer(answer, model, counts, allow_none=True)  # the learner's cell, run once ...
        call_answer(answer, model, counts, allow_none=True)  # ... and then run again
        for _ in range(3):
            model(x)
    finally:
        other_handle.remove()
        leaked_global = drop_global_hooks_added_since(globals_before)
        for _attr, _kind, hooks in module_hook_dicts(model):  # the learner's hooks must not outlive the check
            hooks.clear()
    return counts.get("calls", 0), len(other), leaked_global


@exercise("08.2", answer="install_call_counter")
def install_call_counter(answer: Any) -> None:
    torch.manual_seed(0)
    calls, other, leaked_global = _run_cell_twice(answer, nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2))
    if calls == 0:
        raise NotSolved("`counts[\"calls\"]` 一直没有增加：函数返回后，模型上还没有计数的钩子。",
                        "`counts[\"calls\"]` never grew: no counting hook is attached once your function has returned.",
                        reason="no-counting-hook")
    expect(other == 3, "removed-others-hooks",
           "模型上原有的另一个钩子不再触发：你删掉了不属于你的钩子（例如清空了 `_forward_hooks`）。",
           "another hook that was already on the model stopped firing: you removed hooks that are not yours "
           "(for example by clearing `_forward_hooks`).")
    expect(not leaked_global, "global-hook", "请在模型上注册钩子，而不是全局钩子。",
           "register the hook on the model, not a global hook.")
    zh = f"单元格运行两次后做了 3 次前向，计数应为 3，实际是 {calls}："
    en = f"after running the cell twice and 3 forward passes the count should be 3, it is {calls}"
    expect(calls != 6, "hooks-stacked", zh + "第一次运行的钩子没有被移除，钩子叠加了。",
           en + ": the first run’s hook was not removed, so hooks stacked up.")
    expect(calls == 3, "call-count", zh + "计数不对。", en + ".")


class _InPlaceAfterReLU(nn.Module):
    """ReLU outputs, one of which the next step overwrites in place; with ``reuse``, ``act1`` runs twice."""

    def __init__(self, width: int, reuse: bool = False) -> None:
        super().__init__()
        self.fc1, self.act1 = nn.Linear(3, width), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(width, width), nn.ReLU()
        self.mid = nn.Linear(width, width) if reuse else None

    def pre_activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """What each ReLU call receives, in call order (computed afresh, without the model's hooks)."""
        inputs = [self.fc1(x)]
        if self.mid is not None:
            inputs.append(self.mid(torch.relu(inputs[-1])))
        inputs.append(self.fc2(torch.relu(inputs[-1])))
        return inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.fc1(x))
        if self.mid is not None:
            h = self.act1(self.mid(h))  # the same ReLU module, called a second time
        h = self.act2(self.fc2(h))
        return h.add_(1.0).sum(dim=1)  # in place: overwrites act2's output after its hook ran


@exercise("08.3", answer="keep_relu_outputs")
def keep_relu_outputs(answer: Any) -> None:
    for seed, width, reuse in [(2, 4, False), (3, 6, False), (4, 5, True)]:
        torch.manual_seed(seed)
        model, x = _InPlaceAfterReLU(width, reuse), torch.randn(2, 3, requires_grad=True)
        with torch.no_grad():
            inputs = model.pre_activations(x)
            truth = [torch.relu(t) for t in inputs]
        ran: list[bool] = []  # whether the model's output was in the graph, when it ran with grad enabled
        watching = model.register_forward_hook(
            lambda m, args, out: ran.append(out.requires_grad) if torch.is_grad_enabled() else None)
        try:
            result = run(answer, model, x, leak_free=(model,))
        finally:
            watching.remove()
        expect(isinstance(result, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in result),
               "not-a-list-of-tensors", "应返回张量列表（按调用顺序，每个 ReLU 一个）。",
               "return a list of tensors, one per ReLU, in call order.")
        calls = "（其中 `act1` 被调用了两次）" if reuse else ""
        en_calls = " (`act1` is called twice)" if reuse else ""
        # a dict keyed by module or name: one tensor per ReLU module, in first-call order, holding its last call
        # (act2's output cloned, or overwritten in place after the hook)
        per_module = reuse and len(result) == 2 and all(
            t.shape == r.shape and (torch.allclose(t, r) or torch.allclose(t, r + 1.0))
            for t, r in zip(result, truth[1:]))
        expect(not per_module, "one-per-module",
               f"这次前向调用了 {len(truth)} 次 ReLU{calls}，你只返回了 {len(result)} 个张量，`act1` 只剩最后一次调用的输出："
               "按层名（或模块）存进字典，同一个模块的第二次调用覆盖了第一次。每次调用追加一个到列表里。",
               f"this forward pass calls a ReLU {len(truth)} times{en_calls}, you returned {len(result)} tensors, "
               "and `act1` keeps only its last call's output: kept in a dict by layer name (or module), the same "
               "module's second call replaced its first. Append one tensor per call to a list.")
        expect(len(result) == len(truth), "relu-count",
               f"这次前向调用了 {len(truth)} 次 ReLU{calls}，应返回 {len(truth)} 个张量，你返回了 {len(result)} 个。",
               f"this forward pass calls a ReLU {len(truth)} times{en_calls}, so {len(truth)} tensors are expected; "
               f"you returned {len(result)}.")
        expect(all(ran), "output-replaced",
               "模型的输出不在计算图里了：你的钩子返回了一个值（比如存下的那份 `detach()` 副本），它替换了 ReLU 的输出，"
               "把之前的层从图上切断了。只观察的钩子什么也不要返回（返回 None）。",
               "the model's output is no longer in the graph: your hook returned a value (such as the `detach()`ed "
               "copy it keeps), which replaced the ReLU's output and cut the layers before it off the graph. A hook "
               "that only looks returns nothing (None).")
        for i, (kept, true) in enumerate(zip(result, truth), start=1):
            expect(not kept.requires_grad and kept.grad_fn is None, "attached",
                   f"第 {i} 个张量仍连着计算图（requires_grad=True）：存下它就让整张图留在内存里。用 `detach()`。",
                   f"tensor {i} is still attached to the graph (requires_grad=True): keeping it keeps the whole "
                   "graph in memory. Use `detach()`.")
            if kept.shape == true.shape and torch.allclose(kept, true):
                continue
            expect(kept.shape != true.shape or not torch.allclose(kept, inputs[i - 1]), "relu-input",
                   f"第 {i} 个张量是进入 ReLU 的值（它的输入 `args[0]`，也就是前一层的输出），负值还没被置零：要存的是 "
                   "`nn.ReLU` 上前向钩子的第三个参数 `output`。",
                   f"tensor {i} is what goes into the ReLU (its input `args[0]`, the previous layer's output), its "
                   "negative values not yet zeroed: keep the third argument, `output`, of a forward hook on the "
                   "`nn.ReLU`.")
            expect(kept.shape != true.shape or not torch.allclose(kept, true + 1.0), "overwritten-in-place",
                   f"第 {i} 个张量的值不对：它在钩子之后被模型原地改写了（detach 与原输出共享内存，再 clone 一份）。",
                   f"tensor {i} has the wrong values: the model overwrote it in place after your hook ran (detach "
                   "shares memory with the output; clone it).")
            fail("values", f"第 {i} 个张量的值不对。", f"tensor {i} has the wrong values.")


@exercise("08.4", answer="halve")
def halve(answer: Any) -> None:
    probe = torch.arange(1.0, 4.0)
    # bitwise: copy, the probe untouched, or changed in place by the answer
    if call_answer(answer, probe, allow_none=True) is None and torch.equal(probe, torch.arange(1.0, 4.0)):
        raise NotSolved("你的钩子还没有返回任何值（返回 None 表示梯度不变）。",
                        "your hook returns None so far (None leaves the gradient unchanged).", reason="returned-none")
    for seed in (0, 1):
        torch.manual_seed(seed)
        x, b, weight = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True), torch.randn(4)
        handle = x.register_hook(answer)
        try:
            with guarded("hook-raised", "反向传播时你的钩子", "your hook, during backward,"):
                ((x + b) * weight).sum().backward()  # x + b hands the same gradient tensor to both inputs
        finally:
            handle.remove()
        expect(b.grad is not None and torch.allclose(b.grad, weight), "in-place",
               "`x` 的梯度减半了，但另一个输入 `b` 的梯度也被改了：你原地修改了共享的梯度张量。返回一个新张量。",
               "`x`'s gradient is halved, but so is the other input `b`'s: you edited the shared gradient tensor in "
               "place. Return a new tensor instead.")
        expect(x.grad is None or not torch.allclose(x.grad, 2 * weight), "doubled",
               f"`x.grad` 应为 {[round(v, 3) for v in (0.5 * weight).tolist()]}，你的是它的 4 倍、原梯度的 2 倍：钩子把梯度"
               "翻倍了。要减半，就乘以 0.5（或除以 2）。",
               f"`x.grad` should be {[round(v, 3) for v in (0.5 * weight).tolist()]}; yours is four times that, twice "
               "the original: your hook doubles the gradient. To halve it, multiply by 0.5 (or divide by 2).")
        expect(x.grad is not None and torch.allclose(x.grad, 0.5 * weight), "not-halved",
               f"`x.grad` 应为 {[round(v, 3) for v in (0.5 * weight).tolist()]}，实际是 "
               f"{[round(v, 3) for v in x.grad.tolist()] if x.grad is not None else None}。",
               f"`x.grad` should be {[round(v, 3) for v in (0.5 * weight).tolist()]}; it is "
               f"{[round(v, 3) for v in x.grad.tolist()] if x.grad is not None else None}.")
