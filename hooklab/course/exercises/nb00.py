"""Exercises of notebook 00 (introduction)."""
from __future__ import annotations

import torch
from torch import nn

from . import NotSolved, Wrong, call_answer, exercise, no_hooks_left, require_callable


def _relu_model(seed: int, width: int) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2)), torch.randn(10, 4)


@exercise("00.1",
          hint=("在 `model[1]` 上注册前向钩子，在钩子里计算 `(output == 0).sum().item()`；"
                "把句柄交给 `with hooklab.HookScope() as scope:`。",
                "register a forward hook on `model[1]` that computes `(output == 0).sum().item()`; "
                "hand its handle to `with hooklab.HookScope() as scope:`."),
          solution='''
def count_relu_zeros(model, x):
    counts = []
    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(
            lambda module, args, output: counts.append(int((output == 0).sum()))))
        model(x)
    return counts[0]
''')
def count_relu_zeros(answer) -> None:
    require_callable(answer, "count_relu_zeros")
    for seed, width in [(1, 8), (7, 16), (11, 5)]:
        model, x = _relu_model(seed, width)
        with torch.no_grad():
            truth = int((model[1](model[0](x)) == 0).sum())
        with no_hooks_left(model):
            result = call_answer(answer, model, x)
        if isinstance(result, torch.Tensor):  # as 01.2: the exercise asks for an int
            raise Wrong("应返回 Python 整数，而不是张量：用 `int((output == 0).sum())` 或 `.item()` 取出个数。",
                        "return a Python int, not a tensor: take the count out with `int((output == 0).sum())` "
                        "or `.item()`.")
        if not isinstance(result, int) or isinstance(result, bool):
            raise Wrong(f"应返回整数个数，收到的是 {type(result).__name__}。",
                        f"return the count as an int, not a {type(result).__name__}.")
        if int(result) != truth:
            raise Wrong(f"对一个新的模型（宽度 {width}），ReLU 输出中有 {truth} 个 0，你的函数返回 {int(result)}。",
                        f"on a fresh model (width {width}) the ReLU output has {truth} zeros; your function returned {int(result)}.")


_ORDER_LABELS = ("tensor", "post_accumulate_grad", "node_pre", "node_post")


def _recorded_order() -> list[str]:
    """Run the exercise's graph with all four hooks and return the real firing order."""
    events: list[str] = []
    w = torch.ones(2, requires_grad=True)
    loss = (w * 3).sum()
    handles = [
        w.register_hook(lambda grad: events.append("tensor")),
        w.register_post_accumulate_grad_hook(lambda p: events.append("post_accumulate_grad")),
        loss.grad_fn.register_prehook(lambda grad_outputs: events.append("node_pre")),
        loss.grad_fn.register_hook(lambda grad_inputs, grad_outputs: events.append("node_post")),
    ]
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return events


@exercise("00.2",
          hint=("`loss.grad_fn` 是图里最靠后的节点，反向从它开始；`w` 的梯度要等到最后才累加进 `w.grad`。",
                "`loss.grad_fn` is the last Node of the graph, where backward starts; `w`'s gradient "
                "is accumulated into `w.grad` only at the very end."),
          solution='''
my_order = ["node_pre", "node_post", "tensor", "post_accumulate_grad"]
''')
def predict_order(answer) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把四个名字按你预测的顺序填进 `my_order`。",
                        "put the four names into `my_order` in the order you predict.")
    if not isinstance(answer, (list, tuple)) or sorted(answer) != sorted(_ORDER_LABELS):
        raise Wrong(f"`my_order` 应恰好包含这四个名字各一次：{', '.join(_ORDER_LABELS)}。",
                    f"`my_order` must hold each of these four names once: {', '.join(_ORDER_LABELS)}.")
    truth = _recorded_order()
    if list(answer) != truth:
        first = next(i for i, (a, b) in enumerate(zip(answer, truth)) if a != b)
        raise Wrong(f"第 {first + 1} 个触发的是 `{truth[first]}`，不是 `{answer[first]}`。像第 4 节那样记录一次看看。",
                    f"position {first + 1} is `{truth[first]}`, not `{answer[first]}`. Record it as in section 4 to see.")


class _Tiny(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, hidden), nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _count_packs(model: nn.Module, x: torch.Tensor) -> int:
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        model(x)
    return len(packed)


@exercise("00.3",
          hint=("在 `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` 里跑一次前向，"
                "让 `pack` 每被调用一次就计数一次，并原样返回张量。",
                "run one forward pass inside `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` "
                "where `pack` counts each call and returns the tensor unchanged."),
          solution='''
def count_saved(model, x):
    count = 0
    def pack(tensor):
        nonlocal count
        count += 1
        return tensor
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    return count
''')
def count_saved(answer) -> None:
    require_callable(answer, "count_saved")
    for seed, hidden, needs_grad in [(3, 4, True), (5, 6, False), (9, 2, True)]:
        torch.manual_seed(seed)
        model, x = _Tiny(hidden), torch.randn(2, 3, requires_grad=needs_grad)
        truth = _count_packs(model, x)
        result = call_answer(answer, model, x)
        if not isinstance(result, int) or isinstance(result, bool):
            raise Wrong(f"应返回整数，收到的是 {type(result).__name__}。", f"return an int, not a {type(result).__name__}.")
        if result != truth:
            kind = "需要梯度" if needs_grad else "不需要梯度"
            raise Wrong(f"输入{kind}时这个模型的一次前向保存了 {truth} 个张量，你的函数返回 {result}。",
                        f"with an input that {'requires' if needs_grad else 'does not require'} grad, one "
                        f"forward pass of this model saves {truth} tensors; your function returned {result}.")
