"""Exercises of notebook 02 (Node hooks and the firing order).

02.1 is a prediction checked against a trace the checker records itself; 02.2 asks for a
Node pre-hook (its handle is returned, as in notebook 01); 02.3 asks for a training loop
that steps Adam from post-accumulate-grad hooks, compared with the usual loop on a copy.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from ...inventory import hook_inventory
from ...tracer import Tracer
from . import NotSolved, Wrong, call_answer, exercise, require_callable
from ._support import guarded
from .nb01 import expect_handle as require_handle


def hooks_count() -> int:  # interim, until notebook 02 is converted
    return len(hook_inventory(None))


def run_backward(loss: torch.Tensor, **kwargs: Any) -> None:  # interim, until notebook 02 is converted
    with guarded("backward-raised", "带着你的钩子做反向传播时", "backward with your hook attached"):
        loss.backward(**kwargs)


# ---- 02.1 predict the trace of z = (a * b).exp() ------------------------------------------

def _recorded_trace() -> list[tuple[str, str]]:
    """The exercise's trace, recorded now: what ``tr.sequence()`` gives."""
    a = torch.tensor([0.5, -1.0], requires_grad=True)
    b = torch.tensor([2.0, 0.3], requires_grad=True)
    with Tracer() as tr:
        ab = a * b
        z = ab.exp()
        tr.tensor(ab, "ab")
        tr.tensor(a, "a")
        tr.tensor(b, "b")
        tr.node(ab.grad_fn, "MulBackward0")
        tr.post_accumulate(a, "a")
        tr.post_accumulate(b, "b")
        z.sum().backward()
    return tr.sequence()


def _pair(item: Any) -> tuple[str, str] | None:
    if isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(s, str) for s in item):
        return item[0], item[1]
    return None


@exercise("02.1",
          hint=("反向传播从 `ab` 开始：先是它的张量钩子，然后是它的 `grad_fn`（`MulBackward0`）的前置、后置钩子；"
                "之后才轮到叶子。每个叶子先触发张量钩子，再累加、触发 `post_accumulate`；"
                "两个叶子按它们在 `a * b` 里的位置依次处理。",
                "backward starts at `ab`: its tensor hook, then the pre- and post-hook of its `grad_fn` "
                "(`MulBackward0`); the leaves come after. Each leaf fires its tensor hook, then accumulates "
                "and fires `post_accumulate`; the two leaves are handled in the order they appear in `a * b`."),
          solution='''
my_trace = [("tensor", "ab"), ("node_pre", "MulBackward0"), ("node_post", "MulBackward0"),
            ("tensor", "a"), ("post_accumulate", "a"), ("tensor", "b"), ("post_accumulate", "b")]
''')
def predict_trace(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把 7 个 `(kind, name)` 对按你预测的顺序填进 `my_trace`。",
                        "put the 7 `(kind, name)` pairs into `my_trace` in the order you predict.")
    truth = _recorded_trace()
    pairs = [_pair(item) for item in answer] if isinstance(answer, (list, tuple)) else [None]
    if None in pairs:
        raise Wrong("`my_trace` 的每一项应是 `(kind, name)` 这样的二元组，和 `tr.sequence()` 给出的一样，"
                    "例如 `(\"tensor\", \"ab\")`。",
                    "each item of `my_trace` should be a `(kind, name)` pair, as `tr.sequence()` gives them, "
                    "e.g. `(\"tensor\", \"ab\")`.")
    if sorted(pairs) != sorted(truth):
        listed = ", ".join(f"{k}/{n}" for k, n in sorted(truth))
        raise Wrong(f"`my_trace` 应恰好包含这 7 个事件各一次（顺序另说）：{listed}。",
                    f"`my_trace` must hold each of these 7 events once (in some order): {listed}.")
    if pairs != truth:
        first = next(i for i, (p, t) in enumerate(zip(pairs, truth)) if p != t)
        raise Wrong(f"第 {first + 1} 个事件是 `{truth[first]}`，不是 `{pairs[first]}`。用 `hooklab.Tracer` 记录一次看看。",
                    f"event {first + 1} is `{truth[first]}`, not `{pairs[first]}`. Record it with "
                    "`hooklab.Tracer` to see.")


# ---- 02.2 clip with a Node pre-hook -------------------------------------------------------

@exercise("02.2",
          hint=("`y.grad_fn.register_prehook(hook)`，其中 `hook(grad_outputs)` 返回一个**元组**："
                "`(grad_outputs[0].clamp(-limit, limit),)`。不要用 `y.register_hook`，也不要原地 `clamp_`。",
                "`y.grad_fn.register_prehook(hook)` where `hook(grad_outputs)` returns a **tuple**: "
                "`(grad_outputs[0].clamp(-limit, limit),)`. Not `y.register_hook`, and no in-place `clamp_`."),
          solution='''
def clip_at_node(y, limit):
    def clip(grad_outputs):
        return (grad_outputs[0].clamp(-limit, limit),)
    return y.grad_fn.register_prehook(clip)
''')
def clip_at_node(answer: Any) -> None:
    require_callable(answer, "clip_at_node")
    for seed, n, limit in [(1, 6, 1.0), (2, 10, 0.25), (3, 8, 2.5)]:
        torch.manual_seed(seed)
        u, w = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
        x = torch.rand(n) * 3 + 0.5                 # never 1: clipping dL/dy differs from clipping dL/dw
        v = torch.randn(n) * 3 * limit              # dL/dy = v, much of it outside [-limit, limit]
        c = u * 3                                   # made first, so its branch runs after y's
        y = w * x
        y.retain_grad()
        loss = ((c + y) * v).sum()
        globals_before = hooks_count()
        handle = call_answer(answer, y, limit, returns=("`register_prehook` 给你的句柄（handle）",
                                                        "the handle that `register_prehook` gave you"))
        require_handle(handle, "clip_at_node")
        if any(e.kind == "tensor" for e in hook_inventory(y, include_global=False)):
            raise Wrong("你在 `y` 上注册了张量钩子；这道题要用节点的前置钩子：`y.grad_fn.register_prehook`。",
                        "you registered a tensor hook on `y`; this exercise asks for a Node pre-hook: "
                        "`y.grad_fn.register_prehook`.")
        run_backward(loss, retain_graph=True)
        if not torch.allclose(u.grad, 3 * v):
            raise Wrong("另一支（`c = u * 3`）的梯度也被裁剪了：你原地修改了 `grad_outputs[0]`，而加法把同一个"
                        "梯度张量也交给了另一支。请返回新元组。",
                        "the other branch's gradient (`c = u * 3`) was clipped too: you changed `grad_outputs[0]` "
                        "in place, and the addition hands that same tensor to the other branch. Return a new tuple.")
        expected = v.clamp(-limit, limit) * x
        if not torch.allclose(w.grad, expected):
            if torch.allclose(w.grad, (v * x).clamp(-limit, limit)):
                why = ("你裁剪的是 `w` 的梯度（`MulBackward0` 算出的结果，或 `w` 的 `AccumulateGrad` 节点），"
                       "而不是到达 `y` 的梯度：前置钩子要挂在 `y.grad_fn` 上。",
                       "you clipped the gradient of `w` (what `MulBackward0` produced, or `w`'s `AccumulateGrad` "
                       "node) rather than the gradient arriving at `y`: put a pre-hook on `y.grad_fn`.")
            elif torch.allclose(w.grad, v * x):
                why = ("梯度没有被裁剪：前置钩子要**返回**装着新梯度的元组。",
                       "nothing was clipped: the pre-hook must **return** a tuple holding the new gradient.")
            else:
                why = (f"应当等于 `dL/dy` 裁剪到 [-{limit}, {limit}] 后乘以 `x`。",
                       f"it should be `dL/dy` clipped to [-{limit}, {limit}], times `x`.")
            raise Wrong(f"`w.grad` 不对：{why[0]}", f"`w.grad` is wrong: {why[1]}")
        if not torch.allclose(y.grad, v):
            raise Wrong("`y.grad` 被改动了；`retain_grad` 在节点的前置钩子之前写入 `.grad`，应保持未裁剪的梯度。",
                        "`y.grad` changed; `retain_grad` writes `.grad` before the Node pre-hook runs, so it "
                        "must keep the unclipped gradient.")
        handle.remove()
        if hooks_count() != globals_before:
            raise Wrong("你的函数留下了全局模块钩子。", "your function left a global module hook behind.")
        w.grad = u.grad = None
        run_backward(loss)
        if not torch.allclose(w.grad, v * x):
            raise Wrong("移除句柄之后梯度仍被裁剪：返回的句柄不是你注册的那个钩子的。",
                        "the gradient is still clipped after its handle was removed: the handle you returned "
                        "is not the one of the hook you registered.")


# ---- 02.3 Adam stepped inside backward ----------------------------------------------------

def _adam_cases() -> list[tuple[nn.Module, torch.Tensor, torch.Tensor, int, float]]:
    cases = []
    for seed, widths, batch, steps, lr in [(1, (6, 8, 3), 10, 3, 0.01), (2, (4, 12, 12, 5), 7, 4, 0.05),
                                           (3, (5, 3), 9, 2, 0.1)]:
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i in range(len(widths) - 1):
            layers += [nn.Linear(widths[i], widths[i + 1]), nn.Tanh()]
        model = nn.Sequential(*layers[:-1])
        X, Y = torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))
        cases.append((model, X, Y, steps, lr))
    return cases


def _usual_adam(model: nn.Module, X: torch.Tensor, Y: torch.Tensor, steps: int, lr: float) -> list[float]:
    """The reference: backward, then ``step()``, then ``zero_grad()``."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(X), Y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


def _as_losses(result: Any, steps: int) -> list[float] | None:
    if not isinstance(result, (list, tuple)) or len(result) != steps:
        return None
    losses = []
    for item in result:
        if isinstance(item, torch.Tensor) and item.numel() == 1:
            item = item.item()
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            return None
        losses.append(float(item))
    return losses


@exercise("02.3",
          hint=("给每个参数建一个只管它的优化器：`opts = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}`；"
                "在 `register_post_accumulate_grad_hook` 的钩子里 `opts[p].step()`，再 `p.grad = None`。"
                "循环里只做前向和 `loss.backward()`，结束后移除全部钩子。",
                "give each parameter an optimizer of its own: `opts = {p: torch.optim.Adam([p], lr=lr) for p in "
                "model.parameters()}`; in a `register_post_accumulate_grad_hook` hook call `opts[p].step()`, then "
                "`p.grad = None`. The loop only runs forward and `loss.backward()`; remove every hook at the end."),
          solution='''
def train_in_backward(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}
    def step_now(p):
        optimizers[p].step()
        p.grad = None
    losses = []
    with hooklab.HookScope() as scope:
        for p in model.parameters():
            scope.add(p.register_post_accumulate_grad_hook(step_now))
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(X), Y)
            losses.append(loss.item())
            loss.backward()
    return losses
''')
def train_in_backward(answer: Any) -> None:
    require_callable(answer, "train_in_backward")
    for model, X, Y, steps, lr in _adam_cases():
        reference = copy.deepcopy(model)       # trained the usual way below, after the learner's run
        params = list(model.parameters())
        held: list[int] = []            # how many parameters hold a .grad, each time one is accumulated
        watch = [p.register_post_accumulate_grad_hook(      # registered first: runs before the learner's hooks
                 lambda p: held.append(sum(q.grad is not None for q in params))) for p in params]
        globals_before = hooks_count()
        try:
            result = call_answer(answer, model, X, Y, steps, lr)
        finally:
            for handle in watch:
                handle.remove()
        if hook_inventory(model, include_global=False) or hooks_count() != globals_before:
            raise Wrong("函数返回后模型上还留着钩子；用 `hooklab.HookScope` 或 `handle.remove()` 移除它们。",
                        "hooks are still attached after your function returned; remove them with a "
                        "`hooklab.HookScope` or `handle.remove()`.")
        ref_losses = _usual_adam(reference, X, Y, steps, lr)
        losses = _as_losses(result, steps)
        if losses is None:
            raise Wrong(f"应返回长度为 {steps} 的列表，里面是每一步的损失值（数值），收到的是 {type(result).__name__}。",
                        f"return a list of {steps} numbers, the loss of each step; got a {type(result).__name__}.")
        if len(held) != steps * len(params):
            raise Wrong(f"{steps} 步训练中参数的梯度应被累加 {steps * len(params)} 次，实际是 {len(held)} 次："
                        "每一步恰好做一次 `loss.backward()`，不要用 `torch.autograd.grad`。",
                        f"over {steps} steps the parameters' gradients should be accumulated "
                        f"{steps * len(params)} times, not {len(held)}: run `loss.backward()` exactly once per step "
                        "(not `torch.autograd.grad`).")
        if max(held) > 1:
            raise Wrong(f"反向传播中同时有 {max(held)} 个参数持有 `.grad`（共 {len(params)} 个）：每个参数更新后"
                        "要立刻 `p.grad = None`，而且要在累加后钩子里更新，而不是等反向传播结束。",
                        f"during backward {max(held)} of the {len(params)} parameters held a `.grad` at the same "
                        "time: step each parameter from its post-accumulate hook and set `p.grad = None` right "
                        "after, instead of waiting for backward to finish.")
        if any(p.grad is not None for p in params):
            raise Wrong("训练结束后仍有参数留着 `.grad`：更新后要 `p.grad = None`。",
                        "a parameter still holds a `.grad` after training: set `p.grad = None` after its step.")
        diff = max((a - b).abs().max().item() for a, b in zip(params, reference.parameters()))
        if diff > 1e-5:
            raise Wrong(f"训练后的参数与常规 Adam 写法（backward → step → zero_grad）相差 {diff:.3g}：每个参数要有"
                        "自己的 `torch.optim.Adam`（学习率 `lr`），并且在各步之间保留它的状态。",
                        f"after training the parameters differ from the usual Adam loop (backward -> step -> "
                        f"zero_grad) by up to {diff:.3g}: give each parameter its own `torch.optim.Adam` (learning "
                        "rate `lr`) and keep its state from step to step.")
        if not torch.allclose(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6):
            raise Wrong(f"返回的损失 {[round(x, 4) for x in losses]} 与常规写法的 "
                        f"{[round(x, 4) for x in ref_losses]} 不一致：记下每一步更新前的损失。",
                        f"the losses you returned, {[round(x, 4) for x in losses]}, differ from the usual loop's "
                        f"{[round(x, 4) for x in ref_losses]}: record each step's loss before its update.")
