"""Exercises of notebook 00 (introduction)."""
from __future__ import annotations

import torch
from torch import nn

from . import exercise
from ._support import NotSolved, Wrong, expect, expect_count, expect_fresh, fail, run


def _relu_model(seed: int, width: int) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2)), torch.randn(10, 4)


@exercise("00.1", answer="count_relu_zeros")
def count_relu_zeros(answer) -> None:
    for seed, width in [(1, 8), (7, 16), (11, 5)]:
        model, x = _relu_model(seed, width)
        with torch.no_grad():
            before = model[0](x)
            # the answer's hook sees this Linear and ReLU on this x; ReLU writes exact zeros
            truth = int((model[1](before) == 0).sum())  # bitwise: same computation, the same modules on the same x
        received: list[object] = []  # what the second Linear is given: the ReLU's output, unless a hook replaced it
        probe = model[2].register_forward_pre_hook(lambda module, args: received.append(args[0]))
        try:
            result = run(answer, model, x, leak_free=(model,))
        except Wrong as wrong:
            replaced = received and not (isinstance(received[-1], torch.Tensor) and received[-1].shape == before.shape)
            if wrong.reason == "raised" and replaced:
                what = (f"形状为 {tuple(received[-1].shape)} 的张量" if isinstance(received[-1], torch.Tensor)
                        else f"一个 {type(received[-1]).__name__}")
                what_en = (f"a tensor of shape {tuple(received[-1].shape)}" if isinstance(received[-1], torch.Tensor)
                           else f"a {type(received[-1]).__name__}")
                fail("hook-return-replaced-output",
                     f"ReLU 的前向钩子返回了一个值，而前向钩子的返回值会替换模块的输出：后面的 Linear 收到的是{what}，"
                     f"不是 ReLU 的输出（{tuple(before.shape)}），于是出错。把个数记下来（放进列表或字典），钩子本身什么也不返回。",
                     f"the ReLU's forward hook returned a value, and what a forward hook returns replaces the module's "
                     f"output: the next Linear was given {what_en} instead of the ReLU's output "
                     f"({tuple(before.shape)}) and failed. Record the count (in a list or a dict) and return nothing "
                     "from the hook.")
            raise
        finally:
            probe.remove()
        expect_count(result)
        # only the ReLU writes exact zeros: its input (the first Linear's output), the model's input and output have
        # (almost) none, so a count taken anywhere else comes out as theirs
        elsewhere = {int((t == 0).sum()) for t in (before, x)}  # bitwise: same computation, zeros counted as above
        expect(result == truth or result not in elsewhere, "not-relu-output",
               f"对一个新的模型（宽度 {width}），ReLU 输出中有 {truth} 个 0，你的函数返回 {result}：这是 ReLU 之外的地方的个数。"
               "只有 ReLU 会写出精确的 0，它的输入（第一个 Linear 的输出）、模型的输入和输出几乎没有。"
               "请在 ReLU 的输出上数：在 `model[1]` 上注册前向钩子（不是看输入的前向预钩子）。",
               f"on a fresh model (width {width}) the ReLU output has {truth} zeros; your function returned {result}, "
               "what a count anywhere but the ReLU's output finds: only the ReLU writes exact zeros, and its input "
               "(the first Linear's output), the model's input and its output have almost none. Count in the ReLU's "
               "output, with a forward hook on `model[1]` (not a forward pre-hook, which sees the input).")
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


def _count_packs(model: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """How many times one forward pass packs a tensor, and how many distinct tensors (by storage) it packs."""
    packed: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append((t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape), tuple(t.stride())))
        return t.detach()  # not t itself: the graph is let go of without backward (notebook 06: reference cycles)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return len(packed), len(set(packed))


@exercise("00.3", answer="count_saved")
def count_saved(answer) -> None:
    results: list[int] = []
    truths: list[int] = []
    distincts: list[int] = []
    for seed, hidden, needs_grad in [(5, 6, False), (3, 4, True), (9, 2, True)]:
        torch.manual_seed(seed)
        model, x = _Tiny(hidden), torch.randn(2, 3, requires_grad=needs_grad)
        truth, distinct = _count_packs(model, x)
        result = run(answer, model, x)
        expect_count(result, ("整数", "an int"))
        results.append(result)
        truths.append(truth)
        distincts.append(distinct)
        expect_fresh(results, truths)
        case_zh, case_en = ("需要梯度" if needs_grad else "不需要梯度"), ("requires" if needs_grad else "does not require")
        expect(result != 0 or truth == 0, "nothing-packed",
               f"输入{case_zh}时这个模型的一次前向保存了 {truth} 个张量，你的函数返回 0：打包钩子在前向中每保存一个张量就运行一次，"
               "解包钩子要到反向才运行。请在打包钩子里数，并让前向在 `with saved_tensors_hooks(...)` 块里面运行。",
               f"with an input that {case_en} grad, one forward pass of this model saves {truth} tensors; your "
               "function returned 0: the pack hook runs once per tensor saved, during the forward pass, and the "
               "unpack hook only in backward. Count in the pack hook, with the forward pass inside the "
               "`with saved_tensors_hooks(...)` block.")
        # every case so far: one coincidence (a constant answer) is not taken for it
        expect(result == truth or results != distincts, "distinct-tensors",
               f"输入{case_zh}时这个模型的一次前向保存了 {truth} 次张量，你的函数返回 {result}，是其中不同张量的个数："
               "同一个张量被两个运算保存就打包两次，每次都算。",
               f"with an input that {case_en} grad, one forward pass of this model saves a tensor {truth} times; your "
               f"function returned {result}, the number of distinct tensors among them: a tensor saved by two "
               "operations is packed twice, and each time counts.")
        expect(result == truth, "count", f"输入{case_zh}时这个模型的一次前向保存了 {truth} 个张量，你的函数返回 {result}。",
               f"with an input that {case_en} grad, one "
               f"forward pass of this model saves {truth} tensors; your function returned {result}.")
