"""Hints and reference solutions of notebook 02 (Node hooks and the firing order)."""
import torch
from torch import nn

import hooklab

HINTS = {
    "02.1": ("反向传播从 `ab` 开始：先是它的张量钩子，然后是它的 `grad_fn`（`MulBackward0`）的前置、后置钩子；"
             "之后才轮到叶子。每个叶子先触发张量钩子，再累加、触发 `post_accumulate_grad`；"
             "两个叶子按它们在 `a * b` 里的位置依次处理。",
             "backward starts at `ab`: its tensor hook, then the pre- and post-hook of its `grad_fn` "
             "(`MulBackward0`); the leaves come after. Each leaf fires its tensor hook, then accumulates "
             "and fires `post_accumulate_grad`; the two leaves are handled in the order they appear in `a * b`."),
    "02.2": ("`y.grad_fn.register_prehook(hook)`，其中 `hook(grad_outputs)` 返回一个**元组**："
             "`(grad_outputs[0].clamp(-limit, limit),)`。不要用 `y.register_hook`，也不要原地 `clamp_`。",
             "`y.grad_fn.register_prehook(hook)` where `hook(grad_outputs)` returns a **tuple**: "
             "`(grad_outputs[0].clamp(-limit, limit),)`. Not `y.register_hook`, and no in-place `clamp_`."),
    "02.3": ("给每个参数建一个只管它的优化器：`opts = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}`；"
             "在 `register_post_accumulate_grad_hook` 的钩子里 `opts[p].step()`，再 `p.grad = None`。"
             "循环里只做前向和 `loss.backward()`，结束后移除全部钩子。",
             "give each parameter an optimizer of its own: `opts = {p: torch.optim.Adam([p], lr=lr) for p in "
             "model.parameters()}`; in a `register_post_accumulate_grad_hook` hook call `opts[p].step()`, then "
             "`p.grad = None`. The loop only runs forward and `loss.backward()`; remove every hook at the end."),
}

# [02.1]
my_trace = [("tensor", "ab"), ("node_pre", "MulBackward0"), ("node_post", "MulBackward0"),
            ("tensor", "a"), ("post_accumulate_grad", "a"), ("tensor", "b"), ("post_accumulate_grad", "b")]

# [02.2]
def clip_at_node(y, limit):
    def clip(grad_outputs):
        return (grad_outputs[0].clamp(-limit, limit),)
    return y.grad_fn.register_prehook(clip)

# [02.3]
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
