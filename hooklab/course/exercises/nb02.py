"""Exercises of notebook 02 (Node hooks and the firing order).

02.1 is a prediction checked against a trace the checker records itself; 02.2 asks for a Node pre-hook (its handle is
returned, as in notebook 01); 02.3 asks for a training loop that steps Adam from post-accumulate-grad hooks, compared
with the usual loop on a copy.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from ...inventory import hook_inventory
from ...tracer import Tracer
from . import exercise
from ._support import NotSolved, expect, fail, run
from .nb01 import expect_handle, expect_removed, hooked_backward

# ---- 02.1 predict the trace of z = (a * b).exp() ---------------------------------------------------------

def _recorded_trace() -> list[tuple[str, str]]:
    """The exercise's trace, recorded now: what ``tr.sequence()`` gives."""
    a, b = torch.tensor([0.5, -1.0], requires_grad=True), torch.tensor([2.0, 0.3], requires_grad=True)
    with Tracer() as tr:
        ab = a * b
        z = ab.exp()
        tr.tensor(ab, "ab"), tr.tensor(a, "a"), tr.tensor(b, "b"), tr.node(ab.grad_fn, "MulBackward0")
        tr.post_accumulate_grad(a, "a"), tr.post_accumulate_grad(b, "b")
        z.sum().backward()
    return tr.sequence()


def _is_pair(item: Any) -> bool:
    return isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(s, str) for s in item)


@exercise("02.1", answer="my_trace", data=True)
def predict_trace(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把 7 个 `(kind, name)` 对按你预测的顺序填进 `my_trace`。",
                        "put the 7 `(kind, name)` pairs into `my_trace` in the order you predict.")
    expect(isinstance(answer, (list, tuple)) and all(map(_is_pair, answer)), "not-pairs",
           "`my_trace` 的每一项应是 `(kind, name)` 这样的二元组，和 `tr.sequence()` 给出的一样，例如 `(\"tensor\", \"ab\")`。",
           "each item of `my_trace` should be a `(kind, name)` pair, as `tr.sequence()` gives them, "
           "e.g. `(\"tensor\", \"ab\")`.")
    pairs, truth = [tuple(item) for item in answer], _recorded_trace()
    listed = ", ".join(f"{k}/{n}" for k, n in sorted(truth))
    expect(sorted(pairs) == sorted(truth), "not-the-seven-events", f"`my_trace` 应恰好包含这 7 个事件各一次（顺序另说）：{listed}。",
           f"`my_trace` must hold each of these 7 events once (in some order): {listed}.")
    for i, (said, fired) in enumerate(zip(pairs, truth), start=1):
        expect(said == fired, "order", f"第 {i} 个事件是 `{fired}`，不是 `{said}`。用 `hooklab.Tracer` 记录一次看看。",
               f"event {i} is `{fired}`, not `{said}`. Record it with `hooklab.Tracer` to see.")


# ---- 02.2 clip with a Node pre-hook ----------------------------------------------------------------------

_CLIP_CASES = [(1, 6, 1.0), (2, 10, 0.25), (3, 8, 2.5)]  # seed, size, limit
_PREHOOK_HANDLE = ("`register_prehook` 给你的句柄（handle）", "the handle that `register_prehook` gave you")


def _clip_graph(seed: int, n: int, limit: float) -> tuple[torch.Tensor, ...]:
    """Leaves u, w; c = u * 3 (made first, so its branch runs after y's), y = w * x; loss = sum((c + y) * v)."""
    torch.manual_seed(seed)
    u, w = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
    x = torch.rand(n) * 3 + 0.5                 # never 1: clipping dL/dy differs from clipping dL/dw
    v = torch.randn(n) * 3 * limit              # dL/dy = v, much of it outside [-limit, limit]
    c, y = u * 3, w * x
    y.retain_grad()
    return u, w, x, v, y, ((c + y) * v).sum()


def _clip_verdict(w_grad: torch.Tensor, v: torch.Tensor, x: torch.Tensor, limit: float) -> None:
    if torch.allclose(w_grad, (v * x).clamp(-limit, limit)):
        fail("clipped-w-grad", "`w.grad` 不对：你裁剪的是 `w` 的梯度（`MulBackward0` 算出的结果，或 `w` 的 `AccumulateGrad` 节点），"
             "而不是到达 `y` 的梯度：前置钩子要挂在 `y.grad_fn` 上。",
             "`w.grad` is wrong: you clipped the gradient of `w` (what `MulBackward0` produced, or `w`'s `AccumulateGrad` "
             "node) rather than the gradient arriving at `y`: put a pre-hook on `y.grad_fn`.")
    expect(not torch.allclose(w_grad, v * x), "not-returned", "`w.grad` 不对：梯度没有被裁剪：前置钩子要**返回**装着新梯度的元组。",
           "`w.grad` is wrong: nothing was clipped: the pre-hook must **return** a tuple holding the new gradient.")
    fail("clip-values", f"`w.grad` 不对：应当等于 `dL/dy` 裁剪到 [-{limit}, {limit}] 后乘以 `x`。",
         f"`w.grad` is wrong: it should be `dL/dy` clipped to [-{limit}, {limit}], times `x`.")


@exercise("02.2", answer="clip_at_node")
def clip_at_node(answer: Any) -> None:
    for seed, n, limit in _CLIP_CASES:
        u, w, x, v, y, loss = _clip_graph(seed, n, limit)
        handle = run(answer, y, limit, returns=_PREHOOK_HANDLE)
        expect_handle(handle, "clip_at_node")
        expect(all(e.kind != "tensor" for e in hook_inventory(y, include_global=False)), "tensor-hook",
               "你在 `y` 上注册了张量钩子；这道题要用节点的前置钩子：`y.grad_fn.register_prehook`。",
               "you registered a tensor hook on `y`; this exercise asks for a Node pre-hook: `y.grad_fn.register_prehook`.")
        hooked_backward(loss, retain_graph=True)
        expect(u.grad is not None and torch.allclose(u.grad, 3 * v), "in-place",
               "另一支（`c = u * 3`）的梯度也被裁剪了：你原地修改了 `grad_outputs[0]`，而加法把同一个梯度张量也交给了另一支。请返回新元组。",
               "the other branch's gradient (`c = u * 3`) was clipped too: you changed `grad_outputs[0]` in place, and the "
               "addition hands that same tensor to the other branch. Return a new tuple.")
        if w.grad is None or not torch.allclose(w.grad, v.clamp(-limit, limit) * x):
            _clip_verdict(w.grad if w.grad is not None else torch.zeros_like(w), v, x, limit)
        expect(y.grad is not None and torch.allclose(y.grad, v), "retained-grad-changed",
               "`y.grad` 被改动了；`retain_grad` 在节点的前置钩子之前写入 `.grad`，应保持未裁剪的梯度。",
               "`y.grad` changed; `retain_grad` writes `.grad` before the Node pre-hook runs, so it must keep the "
               "unclipped gradient.")

        def hook_gone() -> bool:
            w.grad = u.grad = None
            hooked_backward(loss)
            return w.grad is not None and torch.allclose(w.grad, v * x)
        expect_removed(handle, y, ("`y` ", "`y`"), hook_gone)


# ---- 02.3 Adam stepped inside backward -------------------------------------------------------------------

_ADAM_CASES = [(1, (6, 8, 3), 10, 3, 0.01), (2, (4, 12, 12, 5), 7, 4, 0.05), (3, (5, 3), 9, 2, 0.1)]


def _adam_case(seed: int, widths: tuple[int, ...], batch: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    layers = [m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), nn.Tanh())][:-1]
    return nn.Sequential(*layers), torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))


def _usual_adam(model: nn.Module, X: torch.Tensor, Y: torch.Tensor, steps: int, lr: float) -> list[float]:
    """The reference: backward, then ``step()``, then ``zero_grad()``."""
    opt, losses = torch.optim.Adam(model.parameters(), lr=lr), []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(X), Y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


def _as_losses(result: Any, steps: int) -> list[float]:
    """``steps`` numbers (Python numbers or one-element tensors), as floats."""
    items = result if isinstance(result, (list, tuple)) and len(result) == steps else [None]
    items = [item.item() if isinstance(item, torch.Tensor) and item.numel() == 1 else item for item in items]
    expect(all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in items), "not-a-loss-list",
           f"应返回长度为 {steps} 的列表，里面是每一步的损失值（数值），收到的是 {type(result).__name__}。",
           f"return a list of {steps} numbers, the loss of each step; got a {type(result).__name__}.")
    return [float(item) for item in items if item is not None]  # all numbers: just checked


@exercise("02.3", answer="train_in_backward")
def train_in_backward(answer: Any) -> None:
    for seed, widths, batch, steps, lr in _ADAM_CASES:
        model, X, Y = _adam_case(seed, widths, batch)
        reference, params = copy.deepcopy(model), list(model.parameters())  # the copy is trained the usual way
        held: list[int] = []            # how many parameters hold a .grad, each time one is accumulated
        watch = [p.register_post_accumulate_grad_hook(      # registered first: runs before the learner's hooks
                 lambda p: held.append(sum(q.grad is not None for q in params))) for p in params]
        try:
            result = run(answer, model, X, Y, steps, lr, leak_free=(model,))
        finally:
            for handle in watch:
                handle.remove()
        ref_losses, losses = _usual_adam(reference, X, Y, steps, lr), _as_losses(result, steps)
        expect(len(held) == steps * len(params), "backward-count",
               f"{steps} 步训练中参数的梯度应被累加 {steps * len(params)} 次，实际是 {len(held)} 次：每一步恰好做一次 "
               "`loss.backward()`，不要用 `torch.autograd.grad`。",
               f"over {steps} steps the parameters' gradients should be accumulated {steps * len(params)} times, not "
               f"{len(held)}: run `loss.backward()` exactly once per step (not `torch.autograd.grad`).")
        expect(max(held) <= 1, "grads-held-together",
               f"反向传播中同时有 {max(held)} 个参数持有 `.grad`（共 {len(params)} 个）：每个参数更新后要立刻 `p.grad = None`，"
               "而且要在累加后钩子里更新，而不是等反向传播结束。",
               f"during backward {max(held)} of the {len(params)} parameters held a `.grad` at the same time: step each "
               "parameter from its post-accumulate hook and set `p.grad = None` right after, instead of waiting for "
               "backward to finish.")
        expect(all(p.grad is None for p in params), "grad-not-freed", "训练结束后仍有参数留着 `.grad`：更新后要 `p.grad = None`。",
               "a parameter still holds a `.grad` after training: set `p.grad = None` after its step.")
        diff = max((a - b).abs().max().item() for a, b in zip(params, reference.parameters()))
        expect(diff <= 1e-5, "not-per-parameter-adam",
               f"训练后的参数与常规 Adam 写法（backward → step → zero_grad）相差 {diff:.3g}：每个参数要有自己的 "
               "`torch.optim.Adam`（学习率 `lr`），并且在各步之间保留它的状态。",
               f"after training the parameters differ from the usual Adam loop (backward -> step -> zero_grad) by up to "
               f"{diff:.3g}: give each parameter its own `torch.optim.Adam` (learning rate `lr`) and keep its state "
               "from step to step.")
        shown, ref_shown = [round(x, 4) for x in losses], [round(x, 4) for x in ref_losses]
        expect(torch.allclose(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6), "losses",
               f"返回的损失 {shown} 与常规写法的 {ref_shown} 不一致：记下每一步更新前的损失。",
               f"the losses you returned, {shown}, differ from the usual loop's {ref_shown}: record each step's loss "
               "before its update.")
