"""Exercises of notebook 01 (tensor hooks).

Each exercise asks for a function that registers one tensor hook and returns its handle.
The checker builds a fresh graph in which the hooked tensor ``d`` shares its gradient with
a sibling branch ``c`` (``e = c + d``, ``c`` made first), so an in-place edit of ``grad``
shows up in the sibling's leaf; it then backpropagates, compares with gradients computed
without hooks, removes the hook through the returned handle and checks that it is gone.
For 01.3 (a parameter's gradient) the checker puts a hook of its own on the parameter first: it keeps the
gradient tensor that the learner's hook receives next, so an in-place edit shows there too.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...inventory import hook_inventory
from . import TENSOR_HANDLE, Wrong, call_answer, exercise, require_callable


# ---- shared by the checkers of notebooks 01 and 02 ---------------------------------------

def require_handle(result: Any, name: str) -> None:
    """The learner's function must return the handle that ``register_*`` gave it."""
    if not callable(getattr(result, "remove", None)):
        raise Wrong(f"`{name}` 应返回注册钩子时得到的句柄（handle），收到的是 {type(result).__name__}。",
                    f"`{name}` must return the handle that registering the hook gave you, "
                    f"not a {type(result).__name__}.")


def run_backward(loss: torch.Tensor, **kwargs: Any) -> None:
    """``loss.backward(**kwargs)``; an error raised there (by the learner's hook) becomes a verdict."""
    try:
        loss.backward(**kwargs)
    except Exception as exc:  # anything the learner's hook raised
        first = str(exc).split("\n")[0]
        raise Wrong(f"带着你的钩子做反向传播时出错：{type(exc).__name__}: {first}",
                    f"backward failed with your hook attached: {type(exc).__name__}: {first}") from exc


def hooks_count() -> int:
    """Number of global module hooks now registered."""
    return len(hook_inventory(None))


def no_tensor_hook_left(t: torch.Tensor, what: str, globals_before: int) -> None:
    """After ``handle.remove()`` no tensor hook may remain on ``t``, and no global hook may have been added."""
    left = [e for e in hook_inventory(t, include_global=False) if e.kind != "retain_grad"]
    if left or hooks_count() != globals_before:
        raise Wrong(f"调用返回句柄的 `remove()` 之后，{what} 上仍留有钩子；只注册一个钩子，并返回它的句柄。",
                    f"after `remove()` on the handle you returned, a hook is still left on {what}; "
                    "register one hook and return its handle.")


def _sibling_graph(seed: int, n: int, dtype: torch.dtype, low: float = -1.0) -> tuple[torch.Tensor, ...]:
    """Leaves u, w; c = u * 3 (made first), d = w * 2, e = c + d: d and c receive the SAME gradient tensor."""
    torch.manual_seed(seed)
    u = (torch.rand(n, dtype=dtype) * 2 + low).requires_grad_(True)
    w = (torch.rand(n, dtype=dtype) * 2 + low).requires_grad_(True)
    v = torch.randn(n, dtype=dtype)
    c = u * 3
    d = w * 2
    return u, w, v, c, d, c + d


def _same(a: torch.Tensor | None, b: torch.Tensor, nan: bool = False) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=nan)


def _sibling_untouched(u: torch.Tensor, expected: torch.Tensor, nan: bool = False) -> None:
    if not _same(u.grad, expected, nan):
        raise Wrong("另一支（`c = u * 3`）的梯度也被改了：你在钩子里原地修改了 `grad`，而加法把同一个梯度张量"
                    "也交给了另一支。请返回一个新张量。",
                    "the gradient of the other branch (`c = u * 3`) changed too: your hook edits `grad` in place, "
                    "and the addition hands that same gradient tensor to the other branch. Return a new tensor.")


# ---- 01.1 gradient noise -------------------------------------------------------------------

@exercise("01.1",
          hint=("钩子里返回 `grad + torch.randn_like(grad) * std`（一个新张量，形状和 dtype 都与 `grad` 相同）；"
                "`register_hook` 的返回值就是要交回的句柄。",
                "the hook returns `grad + torch.randn_like(grad) * std` (a new tensor with `grad`'s shape and "
                "dtype); what `register_hook` returns is the handle to hand back."),
          solution='''
def add_grad_noise(t, std):
    def noisy(grad):
        return grad + torch.randn_like(grad) * std
    return t.register_hook(noisy)
''')
def add_grad_noise(answer: Any) -> None:
    require_callable(answer, "add_grad_noise")
    for seed, n, std, dtype in [(1, 20000, 0.01, torch.float32), (2, 8000, 0.5, torch.float64),
                                (3, 12000, 2.0, torch.float32)]:
        u, w, v, c, d, e = _sibling_graph(seed, n, dtype)
        loss = (e * v).sum()                       # dL/dd = v, dL/dw = 2 v, dL/du = 3 v
        globals_before = hooks_count()
        handle = call_answer(answer, d, std, returns=TENSOR_HANDLE)
        require_handle(handle, "add_grad_noise")
        torch.manual_seed(100 + seed)
        run_backward(loss, retain_graph=True)
        _sibling_untouched(u, 3 * v)
        if w.grad is None:
            raise Wrong("反向传播后 `w.grad` 是 None。", "`w.grad` is None after backward.")
        noise = w.grad / 2 - v
        if torch.equal(w.grad, 2 * v):
            raise Wrong("梯度没有变化：钩子要**返回**加了噪声的新张量，返回 None 只是旁观。",
                        "the gradient did not change: the hook must **return** the new, noisy tensor; "
                        "returning None only observes.")
        mean, spread = noise.mean().item(), noise.std().item()
        if abs(mean) > 6 * std / n ** 0.5:
            raise Wrong(f"噪声的均值应为 0（标准差 {std}，{n} 个元素），测得的是 {mean:.4g}。",
                        f"the noise should have mean 0 (std {std}, {n} elements); measured {mean:.4g}.")
        if abs(spread / std - 1) > 0.1:
            raise Wrong(f"噪声的标准差应为 {std}，测得的是 {spread:.4g}（是不是用了方差 `std ** 2`，"
                        "或对所有元素加了同一个随机数？）。",
                        f"the noise should have standard deviation {std}; measured {spread:.4g} (the variance "
                        "`std ** 2` instead, or one random number added to every element?).")
        handle.remove()
        no_tensor_hook_left(d, "`t`", globals_before)
        w.grad = u.grad = None
        run_backward(loss)
        if not torch.equal(w.grad, 2 * v):
            raise Wrong("移除句柄之后梯度仍然带噪声：返回的句柄不是你注册的那个钩子的。",
                        "after removing the handle the gradient is still noisy: the handle you returned "
                        "is not the one of the hook you registered.")


# ---- 01.2 replace nan gradients by 0 and count them ---------------------------------------

def _as_count(value: Any) -> int | None:
    """An int (not a bool, not a tensor: the exercise asks for an int, as `int(mask.sum())` gives)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


@exercise("01.2",
          hint=("`mask = torch.isnan(grad)` 找出 nan（`grad == float('nan')` 永远是 False）；"
                "`replaced.append(int(mask.sum()))`，再返回 `torch.where(mask, torch.zeros_like(grad), grad)`。",
                "find the nans with `mask = torch.isnan(grad)` (`grad == float('nan')` is always False); "
                "`replaced.append(int(mask.sum()))`, then return `torch.where(mask, torch.zeros_like(grad), grad)`."),
          solution='''
def zero_nan_grads(t, replaced):
    def hook(grad):
        mask = torch.isnan(grad)
        replaced.append(int(mask.sum()))
        return torch.where(mask, torch.zeros_like(grad), grad)
    return t.register_hook(hook)
''')
def zero_nan_grads(answer: Any) -> None:
    require_callable(answer, "zero_nan_grads")
    for seed, n, low in [(4, 12, -1.0), (5, 40, 0.0), (6, 25, 2.0)]:   # low=2.0: e > 1 everywhere, no nan
        u, w, v, c, d, e = _sibling_graph(seed, n, torch.float32, low)
        loss = (torch.sqrt(e - 1) * v).sum()    # nan gradient wherever e < 1
        with torch.no_grad():                   # the truth, without hooks: d sqrt(s)/ds = 1 / (2 sqrt(s))
            grad_e = v / (2 * torch.sqrt(e - 1))
        nans = int(torch.isnan(grad_e).sum())
        replaced: list = []
        globals_before = hooks_count()
        handle = call_answer(answer, d, replaced, returns=TENSOR_HANDLE)
        require_handle(handle, "zero_nan_grads")
        run_backward(loss, retain_graph=True)
        _sibling_untouched(u, 3 * grad_e, nan=True)
        if len(replaced) != 1:
            raise Wrong(f"一次反向传播后 `replaced` 里应正好多出一个数，实际有 {len(replaced)} 个：{replaced!r}。",
                        f"after one backward pass `replaced` should hold exactly one number; it holds "
                        f"{len(replaced)}: {replaced!r}.")
        count = _as_count(replaced[0])
        if isinstance(replaced[0], torch.Tensor):
            raise Wrong(f"`replaced` 里应是 Python 整数，收到的是一个张量 {replaced[0]!r}；题目要的是整数，用 `int(mask.sum())` 转换。",
                        f"`replaced` should get a Python int, not the tensor {replaced[0]!r}; the exercise asks for an int: "
                        "convert it with `int(mask.sum())`.")
        if count is None:
            raise Wrong(f"`replaced` 里应是被替换元素的个数（整数），收到的是 {replaced[0]!r}。",
                        f"`replaced` should get the number of replaced elements (an int), not {replaced[0]!r}.")
        if count != nans:
            extra = ("`x == float('nan')` 永远是 False，用 `torch.isnan`。" if count == 0 else "")
            extra_en = ("`x == float('nan')` is always False; use `torch.isnan`." if count == 0 else "")
            raise Wrong(f"这次梯度里有 {nans} 个 nan（共 {n} 个元素），你记下的是 {count}。{extra}",
                        f"this gradient has {nans} nans (of {n} elements); you recorded {count}. {extra_en}".rstrip())
        expected_w = 2 * torch.nan_to_num(grad_e, nan=0.0)
        if w.grad is None or torch.isnan(w.grad).any():
            raise Wrong("`w.grad` 里仍有 nan：钩子要返回把 nan 换成 0 之后的新张量。",
                        "`w.grad` still contains nan: the hook must return a new tensor with the nans replaced by 0.")
        if not _same(w.grad, expected_w):
            raise Wrong("`w.grad` 不对：只应把 nan 换成 0，其余元素保持原样。",
                        "`w.grad` is wrong: replace only the nans by 0 and leave every other element as it is.")
        handle.remove()
        no_tensor_hook_left(d, "`t`", globals_before)
        w.grad = u.grad = None
        run_backward(loss)
        if len(replaced) != 1 or (nans and not torch.isnan(w.grad).any()):
            raise Wrong("移除句柄之后钩子仍在起作用：返回的句柄不是你注册的那个钩子的。",
                        "the hook still acts after its handle was removed: the handle you returned is not "
                        "the one of the hook you registered.")


# ---- 01.3 clip one parameter's gradient by its norm, from outside the model ---------------

class _ConvNet(nn.Module):
    """Shaped like the notebook's TestNet: conv -> ReLU -> flatten -> linear."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 2, stride=2)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(channels * 16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.relu(self.conv(x)).flatten(1))


def _clip_cases() -> list[tuple[nn.Module, torch.Tensor, str, float]]:
    torch.manual_seed(7)
    conv = _ConvNet(6), torch.randn(2, 3, 8, 8)
    torch.manual_seed(8)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)), torch.randn(6, 4)
    torch.manual_seed(9)
    conv2 = _ConvNet(4), torch.randn(3, 3, 8, 8)
    return [(*conv, "conv.weight", 1.0), (*mlp, "0.weight", 0.5), (*conv2, "fc.bias", 0.3),
            (*mlp, "2.weight", 10.0)]     # the last one is already below its limit: left unchanged


def _grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    run_backward((model(x) ** 2).sum())
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _watch_incoming_grad(param: torch.Tensor) -> tuple[Any, dict[str, torch.Tensor]]:
    """A hook registered BEFORE the learner's: it keeps the gradient tensor that every later hook on ``param``
    receives, and a copy of its values, so that an in-place edit by a later hook shows as a difference."""
    seen: dict[str, torch.Tensor] = {}

    def remember(grad: torch.Tensor) -> None:
        seen["grad"], seen["copy"] = grad, grad.detach().clone()
    return param.register_hook(remember), seen


def _edited_in_place(seen: dict[str, torch.Tensor]) -> bool:
    return "grad" in seen and not torch.equal(seen["grad"], seen["copy"])


@exercise("01.3",
          hint=("`param = dict(model.named_parameters())[name]`，钩子返回 "
                "`grad * min(1.0, max_norm / grad.norm().item())`；交回 `param.register_hook(...)` 的句柄。",
                "`param = dict(model.named_parameters())[name]`; the hook returns "
                "`grad * min(1.0, max_norm / grad.norm().item())`; hand back what `param.register_hook(...)` returns."),
          solution='''
def clip_param_grad(model, name, max_norm):
    param = dict(model.named_parameters())[name]
    def clip(grad):
        return grad * min(1.0, max_norm / grad.norm().item())
    return param.register_hook(clip)
''')
def clip_param_grad(answer: Any) -> None:
    require_callable(answer, "clip_param_grad")
    for model, x, name, max_norm in _clip_cases():
        clean = _grads(model, x)                   # the truth, without hooks
        norm = clean[name].norm().item()
        expected = clean[name] * min(1.0, max_norm / norm)
        globals_before = hooks_count()
        watch, seen = _watch_incoming_grad(dict(model.named_parameters())[name])
        try:
            handle = call_answer(answer, model, name, max_norm, returns=TENSOR_HANDLE)
            require_handle(handle, "clip_param_grad")
            got = _grads(model, x)
        finally:
            watch.remove()
        if _edited_in_place(seen):
            raise Wrong(f"你在钩子里原地修改了 `{name}` 收到的 `grad`（比如 `grad.mul_(...)`）。钩子收到的梯度可能与别处共用"
                        "（第 4 节），要改就返回一个新张量，比如 `grad * factor`。",
                        f"your hook edits the `grad` that `{name}` receives in place (`grad.mul_(...)`, say). The gradient "
                        "a hook receives may be shared with other parts of the graph (section 4): return a new tensor "
                        "instead, such as `grad * factor`.")
        others = [other for other in clean if other != name and not torch.equal(got[other], clean[other])]
        if others:
            raise Wrong(f"只应改动 `{name}` 的梯度，但 {', '.join(others)} 的梯度也变了。",
                        f"only the gradient of `{name}` may change, yet {', '.join(others)} changed too.")
        if not _same(got[name], expected):
            got_norm = got[name].norm().item()
            if norm <= max_norm:
                why = (f"它的范数 {norm:.4g} 本来就不超过 {max_norm}，应保持不变；你的结果范数为 {got_norm:.4g}。",
                       f"its norm {norm:.4g} is already at most {max_norm} and must stay unchanged; "
                       f"yours has norm {got_norm:.4g}.")
            elif abs(got_norm - max_norm) <= 1e-4 * max_norm:
                why = ("范数对了，方向却变了：应整体乘以同一个系数，而不是逐元素截断。",
                       "the norm is right but the direction changed: scale the whole gradient by one factor "
                       "instead of clamping element by element.")
            else:
                why = (f"范数 {norm:.4g} 应缩放到 {max_norm}，你的结果范数为 {got_norm:.4g}。",
                       f"its norm {norm:.4g} should be scaled down to {max_norm}; yours has norm {got_norm:.4g}.")
            raise Wrong(f"`{name}` 的梯度不对（max_norm={max_norm}）：{why[0]}",
                        f"the gradient of `{name}` is wrong (max_norm={max_norm}): {why[1]}")
        handle.remove()
        left = hook_inventory(model, include_global=False)
        if left or hooks_count() != globals_before:
            raise Wrong("调用返回句柄的 `remove()` 之后，模型上仍留有钩子；只注册一个钩子，并返回它的句柄。",
                        "after `remove()` on the handle you returned, a hook is still left on the model; "
                        "register one hook and return its handle.")
        if not torch.equal(_grads(model, x)[name], clean[name]):
            raise Wrong("移除句柄之后梯度仍被裁剪：返回的句柄不是你注册的那个钩子的。",
                        "the gradient is still clipped after its handle was removed: the handle you returned "
                        "is not the one of the hook you registered.")
        model.zero_grad(set_to_none=True)
