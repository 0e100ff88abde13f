"""Exercises of notebook 08 (pitfalls): each one is a classic pitfall to avoid."""
from __future__ import annotations

import torch
from torch import nn

from ..._torch_internals import module_hook_dicts
from ...inventory import hook_inventory
from . import NotSolved, Wrong, call_answer, exercise, no_hooks_left, require_callable


class _Branchy(nn.Module):
    """Linear layers of different widths, nested and reused, so that a mix-up of names shows."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, width + 2))
        self.act = nn.ReLU()
        self.head = nn.Linear(width + 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.encoder(x)))


@exercise("08.1",
          hint=("在 `for name, module in model.named_modules():` 里注册钩子时，lambda 在**调用**时才读 `name`，"
                "那时循环早已结束。用默认参数 `lambda m, a, out, name=name: ...`，或写一个返回钩子的工厂函数。",
                "a lambda registered in `for name, module in model.named_modules():` reads `name` when it is "
                "*called*, long after the loop ended. Bind it now with a default argument "
                "`lambda m, a, out, name=name: ...`, or use a function that returns the hook."),
          solution='''
def linear_output_shapes(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(
                    lambda m, args, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
        model(x)
    return shapes
''')
def linear_output_shapes(answer) -> None:
    require_callable(answer, "linear_output_shapes")
    for seed, width, batch in [(0, 4, 2), (1, 7, 5)]:
        torch.manual_seed(seed)
        model, x = _Branchy(width), torch.randn(batch, 3)
        truth = {"encoder.0": (batch, width), "encoder.2": (batch, width + 2), "head": (batch, 1)}
        with no_hooks_left(model):
            result = call_answer(answer, model, x)
        if not isinstance(result, dict):
            raise Wrong(f"应返回字典 {{层名: 形状}}，收到的是 {type(result).__name__}。",
                        f"return a dict {{layer name: shape}}, not a {type(result).__name__}.")
        got = {k: tuple(v) if isinstance(v, (tuple, list, torch.Size)) else v for k, v in result.items()}
        if len(got) == 1 and set(got) <= {"head", "encoder.2"} and len(truth) > 1:
            raise Wrong(f"只得到一个名字 {list(got)}：所有钩子都读到了循环最后的 `name`（延迟绑定）。",
                        f"only one name, {list(got)}: every hook read the loop's last `name` (late binding).")
        if set(got) != set(truth):
            raise Wrong(f"层名应为 {sorted(truth)}（`named_modules()` 的名字，只要 `nn.Linear`），你返回的是 {sorted(got)}。",
                        f"the names should be {sorted(truth)} (names from `named_modules()`, `nn.Linear` only); "
                        f"you returned {sorted(got)}.")
        wrong = [k for k in truth if got[k] != truth[k]]
        if wrong:
            k = wrong[0]
            raise Wrong(f"`{k}` 的输出形状是 {truth[k]}，你返回的是 {got[k]}。",
                        f"the output of `{k}` has shape {truth[k]}; you returned {got[k]}.")


@exercise("08.2",
          hint=("每次运行都先移除上一次注册的钩子：`scope = hooklab.named_scope(\"call-counter\")` 会先清掉同名作用域里的钩子，"
                "再 `scope.add(model.register_forward_hook(...))`。不要清空 `model._forward_hooks`：那会删掉别人的钩子。",
                "remove what the previous run registered before registering again: "
                "`scope = hooklab.named_scope(\"call-counter\")` first empties the scope of that name, then "
                "`scope.add(model.register_forward_hook(...))`. Do not clear `model._forward_hooks`: that "
                "deletes other people's hooks too."),
          solution='''
def install_call_counter(model, counts):
    scope = hooklab.named_scope("call-counter")
    def count(module, args, output):
        counts["calls"] = counts.get("calls", 0) + 1
    scope.add(model.register_forward_hook(count))
''')
def install_call_counter(answer) -> None:
    require_callable(answer, "install_call_counter")
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2)
    other = []  # someone else's hook, registered before the learner's cell runs
    other_handle = model.register_forward_hook(lambda m, a, out: other.append(1))
    globals_before = len(hook_inventory(None))
    try:
        counts: dict = {}
        call_answer(answer, model, counts, allow_none=True)  # the learner's cell, run once ...
        call_answer(answer, model, counts, allow_none=True)  # ... and then run again
        for _ in range(3):
            model(x)
        calls = counts.get("calls", 0)
        if calls == 0:
            raise NotSolved("`counts[\"calls\"]` 一直没有增加：函数返回后，模型上还没有计数的钩子。",
                            "`counts[\"calls\"]` never grew: no counting hook is attached once your function has returned.")
        if len(other) != 3:
            raise Wrong("模型上原有的另一个钩子不再触发：你删掉了不属于你的钩子（例如清空了 `_forward_hooks`）。",
                        "another hook that was already on the model stopped firing: you removed hooks that are "
                        "not yours (for example by clearing `_forward_hooks`).")
        if len(hook_inventory(None)) != globals_before:
            raise Wrong("请在模型上注册钩子，而不是全局钩子。", "register the hook on the model, not a global hook.")
        if calls != 3:
            raise Wrong(f"单元格运行两次后做了 3 次前向，计数应为 3，实际是 {calls}："
                        f"{'第一次运行的钩子没有被移除，钩子叠加了。' if calls == 6 else '计数不对。'}",
                        f"after running the cell twice and 3 forward passes the count should be 3, it is {calls}"
                        f"{': the first run’s hook was not removed, so hooks stacked up.' if calls == 6 else '.'}")
    finally:
        other_handle.remove()
        for _attr, _kind, hooks in module_hook_dicts(model):  # the learner's hooks must not outlive the check
            hooks.clear()


class _InPlaceAfterReLU(nn.Module):
    """ReLU outputs, one of which the next step overwrites in place."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.act1 = nn.Linear(3, width), nn.ReLU()
        self.fc2, self.act2 = nn.Linear(width, width), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.fc1(x))
        h = self.act2(self.fc2(h))
        return h.add_(1.0).sum(dim=1)  # in place: overwrites act2's output after its hook ran


@exercise("08.3",
          hint=("`output.detach()` 切断与计算图的联系，但和原输出共享内存；模型随后的原地操作会改写它。"
                "存 `output.detach().clone()`。",
                "`output.detach()` cuts the link to the graph but shares memory with the output, so a later "
                "in-place op of the model rewrites it. Store `output.detach().clone()`."),
          solution='''
def keep_relu_outputs(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(
                    lambda m, args, out: kept.append(out.detach().clone())))
        model(x)
    return kept
''')
def keep_relu_outputs(answer) -> None:
    require_callable(answer, "keep_relu_outputs")
    for seed, width in [(2, 4), (3, 6)]:
        torch.manual_seed(seed)
        model, x = _InPlaceAfterReLU(width), torch.randn(2, 3, requires_grad=True)
        with torch.no_grad():
            first = torch.relu(model.fc1(x))
            truth = [first, torch.relu(model.fc2(first))]
        with no_hooks_left(model):
            result = call_answer(answer, model, x)
        if not isinstance(result, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in result):
            raise Wrong("应返回张量列表（按调用顺序，每个 ReLU 一个）。", "return a list of tensors, one per ReLU, in call order.")
        if len(result) != len(truth):
            raise Wrong(f"模型有 {len(truth)} 个 ReLU，应返回 {len(truth)} 个张量，你返回了 {len(result)} 个。",
                        f"the model has {len(truth)} ReLUs, so {len(truth)} tensors are expected; you returned {len(result)}.")
        for i, (kept, true) in enumerate(zip(result, truth)):
            if kept.requires_grad or kept.grad_fn is not None:
                raise Wrong(f"第 {i + 1} 个张量仍连着计算图（requires_grad=True）：存下它就让整张图留在内存里。用 `detach()`。",
                            f"tensor {i + 1} is still attached to the graph (requires_grad=True): keeping it keeps "
                            f"the whole graph in memory. Use `detach()`.")
            if kept.shape != true.shape or not torch.allclose(kept, true):
                late = kept.shape == true.shape and torch.allclose(kept, true + 1.0)
                raise Wrong(f"第 {i + 1} 个张量的值不对{'：它在钩子之后被模型原地改写了（detach 与原输出共享内存，再 clone 一份）' if late else ''}。",
                            f"tensor {i + 1} has the wrong values{': the model overwrote it in place after your hook ran (detach shares memory with the output; clone it)' if late else ''}.")


@exercise("08.4",
          hint=("钩子收到的梯度张量可能同时被图中其他分支使用；不要 `grad.mul_(...)`，而是返回一个新张量：`return grad * 0.5`。",
                "the gradient a hook receives may be the very tensor other branches of the graph use too; "
                "do not `grad.mul_(...)`, return a new tensor instead: `return grad * 0.5`."),
          solution='''
def halve(grad):
    return grad * 0.5
''')
def halve(answer) -> None:
    require_callable(answer, "halve")
    probe = torch.arange(1.0, 4.0)
    returned = call_answer(answer, probe, allow_none=True)
    if returned is None and torch.equal(probe, torch.arange(1.0, 4.0)):
        raise NotSolved("你的钩子还没有返回任何值（返回 None 表示梯度不变）。",
                        "your hook returns None so far (None leaves the gradient unchanged).")
    for seed in (0, 1):
        torch.manual_seed(seed)
        x, b, weight = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True), torch.randn(4)
        handle = x.register_hook(answer)
        try:
            ((x + b) * weight).sum().backward()  # x + b hands the same gradient tensor to both inputs
        except Exception as exc:
            raise Wrong(f"反向传播时你的钩子抛出了 {type(exc).__name__}: {exc}",
                        f"your hook raised {type(exc).__name__} during backward: {exc}") from exc
        finally:
            handle.remove()
        if not torch.allclose(b.grad, weight):
            raise Wrong("`x` 的梯度减半了，但另一个输入 `b` 的梯度也被改了：你原地修改了共享的梯度张量。返回一个新张量。",
                        "`x`'s gradient is halved, but so is the other input `b`'s: you edited the shared gradient "
                        "tensor in place. Return a new tensor instead.")
        if not torch.allclose(x.grad, 0.5 * weight):
            raise Wrong(f"`x.grad` 应为 {[round(v, 3) for v in (0.5 * weight).tolist()]}，实际是 "
                        f"{[round(v, 3) for v in x.grad.tolist()]}。",
                        f"`x.grad` should be {[round(v, 3) for v in (0.5 * weight).tolist()]}; it is "
                        f"{[round(v, 3) for v in x.grad.tolist()]}.")

