"""Exercises of notebook 11 (hooks with compilers and function transforms).

11.1 ``per_sample_grad_norms(model, x, y)``: per-sample gradient norms with ``torch.func``, no hooks.
11.2 ``robust_grad_cam(model, layer, x, target)``: a Grad-CAM that works under ``no_grad`` and ``inference_mode``.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..attempt import first_sentence
from . import NotSolved, Wrong, call_answer, exercise, no_hooks_left, require_callable


def _short(exc: BaseException) -> str:
    text = first_sentence(exc)
    return text if len(text) <= 160 else text[:157] + "..."


# ---- 11.1 per-sample gradient norms with torch.func ---------------------------------------

def _grad_norm_cases() -> list[tuple[str, nn.Module, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(21)
    mlp = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x_mlp, y_mlp = torch.randn(5, 3), torch.randn(5, 2)
    torch.manual_seed(22)
    single = nn.Linear(4, 1)
    x_single, y_single = torch.randn(3, 4), torch.randn(3, 1)
    return [("nn.Sequential(Linear(3, 4), Tanh, Linear(4, 2)), batch 5", mlp, x_mlp, y_mlp),
            ("nn.Linear(4, 1), batch 3", single, x_single, y_single)]


def _true_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_loss: bool = False) -> torch.Tensor:
    """One ``autograd.grad`` per sample (or of the batch loss, repeated): no hooks, no ``.grad``."""
    params = [p for p in model.parameters() if p.requires_grad]
    if batch_loss:
        grads = torch.autograd.grad(F.mse_loss(model(x), y), params)
        return torch.cat([g.flatten() for g in grads]).norm().repeat(len(x))
    norms = []
    for xi, yi in zip(x, y):
        grads = torch.autograd.grad(F.mse_loss(model(xi), yi), params)
        norms.append(torch.cat([g.flatten() for g in grads]).norm())
    return torch.stack(norms)


@exercise("11.1",
          hint=("把参数取成字典 `params = {k: v.detach() for k, v in model.named_parameters()}`，写一个单样本损失 "
                "`def loss(params, xi, yi): return F.mse_loss(functional_call(model, params, (xi,)), yi)`，"
                "然后 `vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)` 给出每个参数的逐样本梯度"
                "（第一维是批）。把每个梯度展平成 `(batch, -1)`，沿第 1 维拼起来，再求每行的范数。",
                "take the parameters as a dict, `params = {k: v.detach() for k, v in model.named_parameters()}`, "
                "write a one-sample loss `def loss(params, xi, yi): return F.mse_loss(functional_call(model, params, "
                "(xi,)), yi)`, then `vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)` gives each parameter's "
                "per-sample gradients (batch first). Flatten each to `(batch, -1)`, concatenate along dim 1, and take "
                "the norm of each row."),
          solution='''
def per_sample_grad_norms(model, x, y):
    import torch.nn.functional as F
    from torch.func import functional_call, grad, vmap

    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, xi, yi):
        return F.mse_loss(functional_call(model, params, (xi,)), yi)

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    flat = torch.cat([g.reshape(len(x), -1) for g in grads.values()], dim=1)
    return flat.norm(dim=1)
''')
def per_sample_grad_norms(answer: Any) -> None:
    require_callable(answer, "per_sample_grad_norms")
    for where, model, x, y in _grad_norm_cases():
        truth = _true_norms(model, x, y)
        with no_hooks_left(model, *model.parameters()):
            result = call_answer(answer, model, x, y)
        if any(p.grad is not None for p in model.parameters()):
            raise Wrong("函数返回后参数的 `.grad` 被写入了（用了 `.backward()`）；用 `torch.func.grad` 求梯度，它不碰 `.grad`。",
                        "the parameters' `.grad` was written when your function returned (a `.backward()` call); "
                        "compute gradients with `torch.func.grad`, which leaves `.grad` alone.")
        if isinstance(result, dict):
            raise Wrong("返回的是按参数分开的字典；要把每个样本的所有参数梯度拼在一起，返回形状为 (batch,) 的范数。",
                        "you returned a dict per parameter; put all parameters' gradients of a sample together and "
                        "return the norms, shape (batch,).")
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (len(x),):
            got = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
            raise Wrong(f"{where}：应返回形状为 ({len(x)},) 的张量，收到 {got}。",
                        f"{where}: return a tensor of shape ({len(x)},), not {got}.")
        result = result.detach().float()
        if torch.allclose(result, truth, rtol=1e-4, atol=1e-6):
            continue
        if torch.allclose(result, _true_norms(model, x, y, batch_loss=True), rtol=1e-4, atol=1e-6):
            raise Wrong("每个元素都一样：这是整批损失的梯度范数。逐样本梯度要用 `vmap` 对每个样本分别求 `grad`。",
                        "every element is the same: that is the gradient norm of the batch loss. Per-sample gradients "
                        "need `grad` taken per sample, under `vmap`.")
        ratio = (result / truth).mean().item()
        if torch.allclose(result, truth * ratio, rtol=1e-3) and abs(ratio - 1) > 1e-3:
            raise Wrong(f"{where}：结果是正确范数的 {ratio:.3g} 倍；损失用默认的 `F.mse_loss(pred, target)`（对元素取平均）。",
                        f"{where}: your norms are {ratio:.3g} times the right ones; use the default "
                        f"`F.mse_loss(pred, target)` (a mean over elements).")
        raise Wrong(f"{where}：逐样本梯度范数应为 {[round(v, 4) for v in truth.tolist()]}，"
                    f"收到 {[round(v, 4) for v in result.tolist()]}（是否漏了某些参数，比如偏置？）。",
                    f"{where}: the per-sample gradient norms should be {[round(v, 4) for v in truth.tolist()]}, "
                    f"got {[round(v, 4) for v in result.tolist()]} (are some parameters, the biases say, left out?).")


# ---- 11.2 a Grad-CAM that works under no_grad and inference_mode --------------------------

def _cam_cases() -> list[tuple[str, nn.Sequential, int, torch.Tensor, int]]:
    torch.manual_seed(31)
    small = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    x_small = torch.randn(2, 3, 8, 8)
    torch.manual_seed(32)
    deeper = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Conv2d(3, 5, 3), nn.ReLU(),
                           nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(5, 2))
    x_deeper = torch.randn(3, 2, 7, 7)
    return [("a small CNN, layer = model[1]", small, 1, x_small, 2),
            ("a deeper CNN, layer = model[2]", deeper, 2, x_deeper, 1)]


def _true_cam(model: nn.Sequential, index: int, x: torch.Tensor, target: int) -> torch.Tensor:
    with torch.enable_grad():
        act = model[:index + 1](x)
        out = model[index + 1:](act)
        g, = torch.autograd.grad(out[:, target].sum(), act)
    return (g.mean(dim=(2, 3), keepdim=True) * act).sum(1).relu().detach()


@exercise("11.2",
          hint=("`torch.enable_grad()` 离不开 `torch.inference_mode()`：把整个计算包在 "
                "`with torch.inference_mode(False), torch.enable_grad():` 里；在里面，如果 `x.is_inference()`，"
                "先 `x = x.clone()`。钩子交给 `hooklab.HookScope`，最后返回 `cam.detach()`。",
                "`torch.enable_grad()` does not leave `torch.inference_mode()`: wrap the whole computation in "
                "`with torch.inference_mode(False), torch.enable_grad():`; inside, if `x.is_inference()`, "
                "`x = x.clone()` first. Give the hooks to a `hooklab.HookScope`, and return `cam.detach()`."),
          solution='''
def robust_grad_cam(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad(), hooklab.HookScope() as scope:
        if x.is_inference():
            x = x.clone()  # inference tensors cannot be saved for backward
        scope.add(layer.register_forward_hook(keep))
        model(x)[:, target].sum().backward()
    weights = store["grad"].mean(dim=(2, 3), keepdim=True)
    return (weights * store["act"]).sum(1).relu().detach()
''')
def robust_grad_cam(answer: Any) -> None:
    require_callable(answer, "robust_grad_cam")
    contexts: list[tuple[str, str, Callable[[], Any], bool]] = [
        ("普通模式", "normally", nullcontext, False),
        ("`torch.no_grad()` 下", "under `torch.no_grad()`", torch.no_grad, False),
        ("`torch.inference_mode()` 下", "under `torch.inference_mode()`", torch.inference_mode, False),
        ("`torch.inference_mode()` 下、输入是推理张量时", "under `torch.inference_mode()` with an inference-tensor input",
         torch.inference_mode, True),
    ]
    for where, model, index, x, target in _cam_cases():
        truth = _true_cam(model, index, x, target)
        for how_zh, how_en, context, inference_input in contexts:
            with no_hooks_left(model, *model.modules()):
                with context():
                    x_in = x * 1.0 if inference_input else x  # made inside inference_mode: an inference tensor
                    try:
                        cam = answer(model, model[index], x_in, target)
                    except Exception as exc:  # the learner's code failed in this mode: say how
                        hint_zh, hint_en = "", ""
                        if "inference" in how_en and not inference_input:
                            hint_zh = "`enable_grad()` 离不开推理模式，用 `torch.inference_mode(False)`。"
                            hint_en = " `enable_grad()` does not leave inference mode: use `torch.inference_mode(False)`."
                        elif inference_input:
                            hint_zh = "推理模式下创建的张量不能保存给反向，先 `x.clone()`（在 `inference_mode(False)` 里）。"
                            hint_en = (" A tensor created in inference mode cannot be saved for backward: `x.clone()` it "
                                       "first (inside `inference_mode(False)`).")
                        raise Wrong(f"{where}，{how_zh}调用时你的函数抛出了 {type(exc).__name__}: {_short(exc)}。{hint_zh}",
                                    f"{where}, called {how_en}: your function raised {type(exc).__name__}: "
                                    f"{_short(exc)}.{hint_en}") from exc
            for module in model.modules():  # a fresh start for the next call
                for p in module.parameters(recurse=False):
                    p.grad = None
            if cam is None:
                raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
            if not isinstance(cam, torch.Tensor) or tuple(cam.shape) != tuple(truth.shape):
                got = tuple(cam.shape) if isinstance(cam, torch.Tensor) else type(cam).__name__
                raise Wrong(f"{where}：CAM 的形状应为 {tuple(truth.shape)}（batch, H, W），收到 {got}。",
                            f"{where}: the CAM should have shape {tuple(truth.shape)} (batch, H, W), got {got}.")
            if cam.requires_grad:
                raise Wrong("返回的 CAM 仍连着计算图（`requires_grad=True`）；返回 `cam.detach()`。",
                            "the CAM you return is still attached to the graph (`requires_grad=True`); return "
                            "`cam.detach()`.")
            if not torch.allclose(cam, truth, atol=1e-5, rtol=1e-4):
                no_relu = _true_cam_no_relu(model, index, x, target)
                if torch.allclose(cam, no_relu, atol=1e-5, rtol=1e-4):
                    raise Wrong("结果里有负值：CAM 最后要取 `relu`。", "your CAM has negative values: apply `relu` at the end.")
                raise Wrong(f"{where}，{how_zh}：CAM 与正确结果最大相差 {(cam - truth).abs().max().item():.3g}。"
                            "通道权重是梯度在空间维 (2, 3) 上的平均，CAM 是 `relu((权重 * 激活).sum(1))`。",
                            f"{where}, {how_en}: the CAM differs from the right one by up to "
                            f"{(cam - truth).abs().max().item():.3g}. The channel weights are the gradient averaged over "
                            f"the spatial dims (2, 3), and the CAM is `relu((weights * activation).sum(1))`.")


def _true_cam_no_relu(model: nn.Sequential, index: int, x: torch.Tensor, target: int) -> torch.Tensor:
    with torch.enable_grad():
        act = model[:index + 1](x)
        out = model[index + 1:](act)
        g, = torch.autograd.grad(out[:, target].sum(), act)
    return (g.mean(dim=(2, 3), keepdim=True) * act).sum(1).detach()


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
        plain = model(x)
        first = model[0](x)
    store: dict[str, Any] = {"calls": torch.zeros((), dtype=torch.long)}
    hook = call_answer(answer, store)
    if not callable(hook):
        raise Wrong(f"`make_monitor(store)` 应返回一个钩子函数，收到的是 {type(hook).__name__}。",
                    f"`make_monitor(store)` should return a hook function, not a {type(hook).__name__}.")
    dynamo.reset()
    counters.clear()
    handle = model[0].register_forward_hook(hook)
    try:
        compiled = torch.compile(model, backend=counting_backend)
        outputs = []
        for _ in range(_CALLS):
            try:
                outputs.append(compiled(x))
            except Exception as exc:  # the learner's hook failed inside the compiled call
                raise Wrong(f"编译后的模型带着你的钩子调用时抛出了 {type(exc).__name__}: {_short(exc)}",
                            f"the compiled model raised {type(exc).__name__} with your hook: {_short(exc)}") from exc
    finally:
        handle.remove()
        breaks = sorted({reason.splitlines()[0] for reason in counters["graph_break"]})
        dynamo.reset()
    return {"store": store, "plain": plain, "first": first, "outputs": outputs,
            "compilations": len(compilations), "breaks": breaks}


@exercise("11.3",
          hint=("钩子里只做张量运算：`store[\"last\"] = output.detach()`（字典的同一个键，不要 `append` 到列表），"
                "`store[\"calls\"].add_(1)`（在张量上原地加一，不要用 Python 整数，也不要 `.item()`），不要 `print`，"
                "也不要返回值。",
                "keep the hook to tensor operations: `store[\"last\"] = output.detach()` (the same dict key, no `append` "
                "to a list), `store[\"calls\"].add_(1)` (add one in place on the tensor; no Python int, no `.item()`), "
                "no `print`, and return nothing."),
          solution='''
def make_monitor(store):
    def monitor(module, args, output):
        store["last"] = output.detach()   # a fixed key: no guard on a growing list
        store["calls"].add_(1)            # a tensor op: no .item(), no Python int
    return monitor
''')
def make_monitor(answer: Any) -> None:
    require_callable(answer, "make_monitor")
    for seed, widths in [(41, (3, 4, 1)), (42, (5, 3, 2))]:
        run = _monitor_run(answer, seed, widths)
        store = run["store"]
        if run["breaks"]:
            raise Wrong(f"你的钩子造成了图中断（{'; '.join(run['breaks'])}）：钩子里不要 `print`，也不要 `.item()` / `float()`。",
                        f"your hook causes a graph break ({'; '.join(run['breaks'])}): no `print`, and no `.item()` / "
                        f"`float()` in the hook.")
        if not all(torch.allclose(out, run["plain"]) for out in run["outputs"]):
            raise Wrong("模型的输出被改变了：监视用的钩子应返回 None。",
                        "the model's output changed: a monitoring hook should return None.")
        last = store.get("last")
        if not isinstance(last, torch.Tensor) or not torch.allclose(last, run["first"]):
            raise Wrong("`store[\"last\"]` 应是第一层最近一次的输出。",
                        "`store[\"last\"]` should hold the first layer's latest output.")
        if last.requires_grad:
            raise Wrong("`store[\"last\"]` 连着计算图：存 `output.detach()`。",
                        "`store[\"last\"]` is attached to the graph: store `output.detach()`.")
        calls = store.get("calls")
        count = int(calls) if isinstance(calls, (int, torch.Tensor)) and getattr(calls, "numel", lambda: 1)() == 1 else None
        if count != _CALLS:
            raise Wrong(f"调用了 {_CALLS} 次，`store[\"calls\"]` 却是 {calls!r}：在张量上原地加一（`store[\"calls\"].add_(1)`）。",
                        f"the model was called {_CALLS} times but `store[\"calls\"]` is {calls!r}: add one in place on "
                        f"the tensor (`store[\"calls\"].add_(1)`).")
        if run["compilations"] > 2:
            raise Wrong(f"{_CALLS} 次调用编译了 {run['compilations']} 次：钩子改变的 Python 状态（变长的列表、变化的整数）"
                        "成了守卫，每次都失败。把结果存进固定的键，计数用张量。",
                        f"{_CALLS} calls compiled {run['compilations']} times: the Python state your hook changes (a "
                        "growing list, a changing int) became a guard that fails every time. Store under a fixed key, and "
                        "count in a tensor.")
