"""Exercises of notebook 00 (introduction)."""
from __future__ import annotations

import torch
from torch import nn

from . import exercise
from ._support import NotSolved, expect, expect_count, run


def _relu_model(seed: int, width: int) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2)), torch.randn(10, 4)


@exercise("00.1", answer="count_relu_zeros")
def count_relu_zeros(answer) -> None:
    for seed, width in [(1, 8), (7, 16), (11, 5)]:
        model, x = _relu_model(seed, width)
        with torch.no_grad():
            # bitwise: same computation, the answer's hook sees this Linear and ReLU on this x; ReLU writes exact zeros
            truth = int((model[1](model[0](x)) == 0).sum())
        result = run(answer, model, x, leak_free=(model,))
        expect_count(result)
        expect(result == truth, "count", f"对一个新的模型（宽度 {width}），ReLU 输出中有 {truth} 个 0，你的函数返回 {result}。",
               f"on a fresh model (width {width}) the ReLU output has {truth} zeros; your function returned {result}.")


_ORDER_LABELS = ("tensor", "post_accumulate_grad", "node_pre", "node_post")


def _recorded_order() -> list[str]:
    """Run the exercise's graph with all four hooks and return the real firing order."""
    events: list[str] = []
    w = torch.ones(2, requires_grad=True)
    loss = (w * 3).sum()
    node = loss.grad_fn
    assert node is not None
    handles = [
        w.register_hook(lambda grad: events.append("tensor")),
        w.register_post_accumulate_grad_hook(lambda p: events.append("post_accumulate_grad")),
        node.register_prehook(lambda grad_outputs: events.append("node_pre")),
        node.register_hook(lambda grad_inputs, grad_outputs: events.append("node_post")),
    ]
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return events


@exercise("00.2", answer="my_order", data=True)
def predict_order(answer) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把四个名字按你预测的顺序填进 `my_order`。",
                        "put the four names into `my_order` in the order you predict.")
    expect(isinstance(answer, (list, tuple)) and sorted(answer) == sorted(_ORDER_LABELS), "not-the-four-names",
           f"`my_order` 应恰好包含这四个名字各一次：{', '.join(_ORDER_LABELS)}。",
           f"`my_order` must hold each of these four names once: {', '.join(_ORDER_LABELS)}.")
    truth = _recorded_order()
    for i, (said, fired) in enumerate(zip(answer, truth), start=1):
        expect(said == fired, "order", f"第 {i} 个触发的是 `{fired}`，不是 `{said}`。像第 4 节那样记录一次看看。",
               f"position {i} is `{fired}`, not `{said}`. Record it as in section 4 to see.")


class _Tiny(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, hidden), nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _count_packs(model: nn.Module, x: torch.Tensor) -> int:
    packed = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(1)
        return t.detach()  # not t itself: the graph is let go of without backward (notebook 06: reference cycles)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return len(packed)


@exercise("00.3", answer="count_saved")
def count_saved(answer) -> None:
    for seed, hidden, needs_grad in [(3, 4, True), (5, 6, False), (9, 2, True)]:
        torch.manual_seed(seed)
        model, x = _Tiny(hidden), torch.randn(2, 3, requires_grad=needs_grad)
        truth = _count_packs(model, x)
        result = run(answer, model, x)
        expect_count(result, ("整数", "an int"))
        expect(result == truth, "count", f"输入{'需要梯度' if needs_grad else '不需要梯度'}时这个模型的一次前向保存了 {truth} 个张量，你的函数返回 {result}。",
               f"with an input that {'requires' if needs_grad else 'does not require'} grad, one "
               f"forward pass of this model saves {truth} tensors; your function returned {result}.")
