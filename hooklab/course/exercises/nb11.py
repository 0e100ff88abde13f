"""Exercises of notebook 11 (hooks with compilers and function transforms).

11.1 ``per_sample_grad_norms(model, x, y)``: per-sample gradient norms with ``torch.func``, no hooks.
11.2 ``robust_grad_cam(model, layer, x, target)``: a Grad-CAM that works under ``no_grad`` and ``inference_mode``.
11.3 ``make_monitor(store)``: a monitoring forward hook that a compiled model keeps compiled.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import exercise
from ._support import NotSolved, call_answer, expect, fail, guarded, no_hooks_left, run, short_error, started


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


# ---- 11.1 per-sample gradient norms with torch.func ---------------------------------------

def _grad_norm_cases() -> list[tuple[str, nn.Module, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(21)
    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x_mlp, y_mlp = torch.randn(5, 3), torch.randn(5, 2)
    torch.manual_seed(22)
    single = nn.Linear(4, 1)
    return [("nn.Sequential(Linear(3, 4), Tanh, Linear(4, 2)), batch 5", mlp, x_mlp, y_mlp),
            ("nn.Linear(4, 1), batch 3", single, torch.randn(3, 4), torch.randn(3, 1))]


def _true_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_loss: bool = False,
                summed: bool = False, all_targets: bool = False) -> torch.Tensor:
    """One ``autograd.grad`` per sample (or of the batch loss, repeated): no hooks, no ``.grad``. Two usual mistakes
    on purpose: ``summed``, the per-parameter norms added up; ``all_targets``, each sample's prediction compared
    with every target of the batch (``y`` not mapped over)."""
    def norm(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        pred = model(xs)
        grads = torch.autograd.grad(F.mse_loss(pred.expand_as(y) if all_targets else pred, y if all_targets else ys),
                                    list(model.parameters()))
        return sum(g.norm() for g in grads) if summed else torch.cat([g.flatten() for g in grads]).norm()
    return norm(x, y).repeat(len(x)) if batch_loss else torch.stack([norm(xi, yi) for xi, yi in zip(x, y)])


@exercise("11.1", answer="per_sample_grad_norms")
def per_sample_grad_norms(answer: Any) -> None:
    for where, model, x, y in _grad_norm_cases():
        truth = _true_norms(model, x, y)
        result = run(answer, model, x, y, leak_free=(model, *model.parameters()))
        expect(all(p.grad is None for p in model.parameters()), "wrote-grad",
               "函数返回后参数的 `.grad` 被写入了（用了 `.backward()`）；用 `torch.func.grad` 求梯度，它不碰 `.grad`。",
               "the parameters' `.grad` was written when your function returned (a `.backward()` call); compute "
               "gradients with `torch.func.grad`, which leaves `.grad` alone.")
        expect(not isinstance(result, dict), "dict-per-parameter",
               "返回的是按参数分开的字典；要把每个样本的所有参数梯度拼在一起，返回形状为 (batch,) 的范数。",
               "you returned a dict per parameter; put all parameters' gradients of a sample together and return "
               "the norms, shape (batch,).")
        got = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
        expect(got == (len(x),), "shape", f"{where}：应返回形状为 ({len(x)},) 的张量，收到 {got}。",
               f"{where}: return a tensor of shape ({len(x)},), not {got}.")
        result = result.detach().float()
        if _close(result, truth):
            continue
        expect(not _close(result, _true_norms(model, x, y, batch_loss=True)), "batch-gradient",
               "每个元素都一样：这是整批损失的梯度范数。逐样本梯度要用 `vmap` 对每个样本分别求 `grad`。",
               "every element is the same: that is the gradient norm of the batch loss. Per-sample gradients need "
               "`grad` taken per sample, under `vmap`.")
        expect(not _close(result, _true_norms(model, x, y, summed=True)), "summed-norms",
               f"{where}：你把每个参数各自的梯度范数加了起来；要的是所有参数的梯度拼在一起之后的一个范数，"
               "即各参数平方和相加后再开方：`sqrt(sum(g.pow(2).sum() for g in grads))`。",
               f"{where}: you added up each parameter's gradient norm; the norm of all parameters' gradients taken "
               "together is the square root of the summed squares: `sqrt(sum(g.pow(2).sum() for g in grads))`.")
        expect(not _close(result, _true_norms(model, x, y, all_targets=True)), "unbatched-targets",
               f"{where}：每个样本的预测都和整批的目标比较了：`vmap` 只映射了 `x`，没有映射 `y`。"
               "给 `y` 也设 `in_dims=0`，让第 i 个样本只和 `y[i]` 比较。",
               f"{where}: each sample's prediction was compared with the whole batch of targets: `vmap` maps over "
               "`x` but not over `y`. Give `y` an `in_dims` of 0 too, so that sample i meets `y[i]` only.")
        ratio = (result / truth).mean().item()
        expect(not torch.allclose(result, truth * ratio, rtol=1e-3) or abs(ratio - 1) <= 1e-3, "scaled-loss",
               f"{where}：结果是正确范数的 {ratio:.3g} 倍；损失用默认的 `F.mse_loss(pred, target)`（对元素取平均）。",
               f"{where}: your norms are {ratio:.3g} times the right ones; use the default `F.mse_loss(pred, target)` "
               "(a mean over elements).")
        right, yours = [round(v, 4) for v in truth.tolist()], [round(v, 4) for v in result.tolist()]
        fail("norms", f"{where}：逐样本梯度范数应为 {right}，收到 {yours}（是否漏了某些参数，比如偏置？）。",
             f"{where}: the per-sample gradient norms should be {right}, got {yours} (are some parameters, the "
             "biases say, left out?).")


# ---- 11.2 a Grad-CAM that works under no_grad and inference_mode --------------------------

def _cam_cases() -> list[tuple[str, nn.Sequential, int, torch.Tensor, int]]:
    torch.manual_seed(31)
    small = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    x_small = torch.randn(2, 3, 8, 8)
    torch.manual_seed(32)
    deeper = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Conv2d(3, 5, 3), nn.ReLU(),
                           nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 2))
    return [("a small CNN, layer = model[1]", small, 1, x_small, 2),
            ("a deeper CNN, layer = model[2]", deeper, 2, torch.randn(3, 2, 7, 7), 1)]


def _true_cam(model: nn.Sequential, index: int, x: torch.Tensor, target: int, relu: bool = True) -> torch.Tensor:
    with torch.enable_grad():
        act = model[:index + 1](x)
        g, = torch.autograd.grad(model[index + 1:](act)[:, target].sum(), act)
    cam = (g.mean(dim=(2, 3), keepdim=True) * act).sum(1)
    return (cam.relu() if relu else cam).detach()


# where the learner's function is called: (zh, en, the context, whether the input is an inference tensor)
_CONTEXTS: list[tuple[str, str, Callable[[], Any], bool]] = [
    ("普通模式", "normally", nullcontext, False),
    ("`torch.no_grad()` 下", "under `torch.no_grad()`", torch.no_grad, False),
    ("`torch.inference_mode()` 下", "under `torch.inference_mode()`", torch.inference_mode, False),
    ("`torch.inference_mode()` 下、输入是推理张量时", "under `torch.inference_mode()` with an inference-tensor input",
     torch.inference_mode, True),
]


def _cam_in(answer: Any, model: nn.Sequential, index: int, x: torch.Tensor, target: int, where: str,
            how: tuple[str, str, Callable[[], Any], bool]) -> Any:
    """The learner's CAM, called in context ``how``; an exception becomes a verdict that says what the mode needs."""
    how_zh, how_en, context, inference_input = how
    try:
        with no_hooks_left(model, *model.modules()), context():
            try:  # x * 1.0, made inside inference_mode, is an inference tensor
                return answer(model, model[index], x * 1.0 if inference_input else x, target)
            except Exception as exc:  # the learner's code failed in this mode: said below, once no hook is left
                error = exc
        said = (f"{where}，{how_zh}调用时你的函数抛出了 {type(error).__name__}: {short_error(error)}。",
                f"{where}, called {how_en}: your function raised {type(error).__name__}: {short_error(error)}.")
        expect(not inference_input, "inference-input", said[0] + "推理模式下创建的张量不能保存给反向，先 `x.clone()`"
               "（在 `inference_mode(False)` 里）。", said[1] + " A tensor created in inference mode cannot be saved "
               "for backward: `x.clone()` it first (inside `inference_mode(False)`).")
        expect(context is not torch.inference_mode, "inference-mode", said[0] + "`enable_grad()` 离不开推理模式，用 "
               "`torch.inference_mode(False)`。", said[1] + " `enable_grad()` does not leave inference mode: use "
               "`torch.inference_mode(False)`.")
        fail("raised", *said)
    finally:
        model.zero_grad(set_to_none=True)  # a fresh start for the next call


@exercise("11.2", answer="robust_grad_cam")
def robust_grad_cam(answer: Any) -> None:
    for where, model, index, x, target in _cam_cases():
        truth = _true_cam(model, index, x, target)
        for how in _CONTEXTS:
            cam = _cam_in(answer, model, index, x, target, where, how)
            if cam is None and not started(answer):
                raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
            expect(cam is not None, "returned-none", "你的函数运行了，却返回了 None，是不是忘了写 `return`？",
                   "your function ran but returned None: did you forget the `return`?")
            got = tuple(cam.shape) if isinstance(cam, torch.Tensor) else type(cam).__name__
            expect(got == tuple(truth.shape), "shape", f"{where}：CAM 的形状应为 {tuple(truth.shape)}（batch, H, W），收到 {got}。",
                   f"{where}: the CAM should have shape {tuple(truth.shape)} (batch, H, W), got {got}.")
            expect(not cam.requires_grad, "attached", "返回的 CAM 仍连着计算图（`requires_grad=True`）；返回 `cam.detach()`。",
                   "the CAM you return is still attached to the graph (`requires_grad=True`); return `cam.detach()`.")
            if torch.allclose(cam, truth, atol=1e-5, rtol=1e-4):
                continue
            expect(not torch.allclose(cam, _true_cam(model, index, x, target, relu=False), atol=1e-5, rtol=1e-4),
                   "no-relu", "结果里有负值：CAM 最后要取 `relu`。", "your CAM has negative values: apply `relu` at the end.")
            off = (cam - truth).abs().max().item()
            fail("cam", f"{where}，{how[0]}：CAM 与正确结果最大相差 {off:.3g}。通道权重是梯度在空间维 (2, 3) 上的平均，"
                 "CAM 是 `relu((权重 * 激活).sum(1))`。",
                 f"{where}, {how[1]}: the CAM differs from the right one by up to {off:.3g}. The channel weights are "
                 "the gradient averaged over the spatial dims (2, 3), and the CAM is `relu((weights * activation).sum(1))`.")


# ---- 11.3 a monitoring hook that a compiled model keeps compiled ----------------------------

_CALLS = 6


def _monitor_run(answer: Any, seed: int, widths: tuple[int, int, int]) -> dict[str, Any]:
    """Compile a fresh model with the learner's hook on its first layer and call it ``_CALLS`` times."""
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    compilations: list[int] = []

    def counting_backend(gm: Any, example_inputs: Any) -> Callable:
        compilations.append(1)
        return gm.forward

    torch.manual_seed(seed)
    n_in, hidden, n_out = widths
    model = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))
    x = torch.randn(2, n_in)
    with torch.no_grad():
        plain, first = model(x), model[0](x)
    store: dict[str, Any] = {"calls": torch.zeros((), dtype=torch.long)}
    hook = call_answer(answer, store)
    expect(callable(hook), "not-a-hook", f"`make_monitor(store)` 应返回一个钩子函数，收到的是 {type(hook).__name__}。",
           f"`make_monitor(store)` should return a hook function, not a {type(hook).__name__}.")
    dynamo.reset()
    counters.clear()
    handle = model[0].register_forward_hook(hook)
    try:
        compiled = torch.compile(model, backend=counting_backend)
        with guarded("raised-compiled", "编译后的模型带着你的钩子调用时", "with your hook, the compiled model"):
            outputs = [compiled(x) for _ in range(_CALLS)]
    finally:
        handle.remove()
        breaks = sorted({reason.splitlines()[0] for reason in counters["graph_break"]})
        dynamo.reset()
    out = outputs[-1]
    first_weight = model[0].weight
    assert isinstance(first_weight, torch.Tensor)
    reaches = out.requires_grad and torch.autograd.grad(out.sum(), first_weight, allow_unused=True)[0] is not None
    return {"store": store, "plain": plain, "first": first, "outputs": outputs, "first_layer_grad": reaches,
            "compilations": len(compilations), "breaks": breaks}


@exercise("11.3", answer="make_monitor")
def make_monitor(answer: Any) -> None:
    for seed, widths in [(41, (3, 4, 1)), (42, (5, 3, 2))]:
        run = _monitor_run(answer, seed, widths)
        breaks, last, calls = "; ".join(run["breaks"]), run["store"].get("last"), run["store"].get("calls")
        expect(not breaks, "graph-break", f"你的钩子造成了图中断（{breaks}）：钩子里不要 `print`，也不要 `.item()` / `float()`。",
               f"your hook causes a graph break ({breaks}): no `print`, and no `.item()` / `float()` in the hook.")
        expect(all(torch.allclose(out, run["plain"]) for out in run["outputs"]), "changes-output",
               "模型的输出被改变了：监视用的钩子应返回 None。", "the model's output changed: a monitoring hook should return None.")
        expect(run["first_layer_grad"], "cuts-graph",
               "输出的数值没变，但第一层的参数再也收不到梯度：前向钩子的返回值（非 None）会取代这一层的输出，"
               "你返回的张量已 `detach`，把这一层和它之前的部分从计算图上切断了。只存下 `output.detach()`，钩子返回 None。",
               "the output's values are unchanged, but the first layer's parameters no longer get a gradient: a "
               "forward hook's return value (when not None) replaces the layer's output, and yours is detached, which "
               "cuts this layer and everything before it off the graph. Store `output.detach()` and return None.")
        first = run["first"]
        expect(isinstance(last, torch.Tensor) and last.shape == first.shape and torch.allclose(last, first), "last-output",
               "`store[\"last\"]` 应是第一层最近一次的输出。", "`store[\"last\"]` should hold the first layer's latest output.")
        expect(not last.requires_grad, "attached", "`store[\"last\"]` 连着计算图：存 `output.detach()`。",
               "`store[\"last\"]` is attached to the graph: store `output.detach()`.")
        count = int(calls) if isinstance(calls, (int, torch.Tensor)) and getattr(calls, "numel", lambda: 1)() == 1 else None
        expect(count == _CALLS, "calls-count", f"调用了 {_CALLS} 次，`store[\"calls\"]` 却是 {calls!r}：在张量上原地加一（`store[\"calls\"].add_(1)`）。",
               f"the model was called {_CALLS} times but `store[\"calls\"]` is {calls!r}: add one in place on the "
               "tensor (`store[\"calls\"].add_(1)`).")
        expect(run["compilations"] <= 2, "recompiles", f"{_CALLS} 次调用编译了 {run['compilations']} 次：钩子改变的 Python "
               "状态（变长的列表、变化的整数）成了守卫，每次都失败。把结果存进固定的键，计数用张量。",
               f"{_CALLS} calls compiled {run['compilations']} times: the Python state your hook changes (a growing "
               "list, a changing int) became a guard that fails every time. Store under a fixed key, and count in a tensor.")
