"""Exercises of notebook 01 (tensor hooks): functions that register one tensor hook and return its handle.

In 01.1 and 01.2 the hooked ``d`` shares its gradient with a sibling branch (``e = c + d``), so an in-place edit of
``grad`` shows in the sibling's leaf; in 01.3 a hook of the checker's own, registered first, keeps the gradient the
learner's hook receives. Each checker compares with hook-free gradients, then removes the hook through the handle.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ...inventory import hook_inventory
from . import exercise
from ._support import TENSOR_HANDLE, expect, expect_count, fail, guarded, is_handle, run

# ---- handles (section 5), shared with the handle-returning exercises of notebooks 02 and 03 ----------

def expect_handle(result: Any, name: str) -> None:
    """The learner's function must return the handle that registering its hook gave it."""
    expect(is_handle(result), "not-a-handle",
           f"`{name}` 应返回注册钩子时得到的句柄（handle），收到的是 {type(result).__name__}。",
           f"`{name}` must return the handle that registering the hook gave you, not a {type(result).__name__}.")


def expect_removed(handle: Any, owner: Any, what: tuple[str, str], hook_gone: Callable[[], bool] | None) -> None:
    """``handle.remove()`` takes the learner's hook off ``owner`` (a tensor or a module): no hook is left there,
    and ``hook_gone()`` (the hook-free result, computed again) holds."""
    handle.remove()
    expect(all(e.kind == "retain_grad" for e in hook_inventory(owner, include_global=False)), "hook-left-after-remove",
           f"调用返回句柄的 `remove()` 之后，{what[0]}上仍留有钩子；只注册一个钩子，并返回它的句柄。",
           f"after `remove()` on the handle you returned, a hook is still left on {what[1]}; register one hook "
           "and return its handle.")
    expect(hook_gone is None or hook_gone(), "wrong-handle", "移除句柄之后钩子仍在起作用：返回的句柄不是你注册的那个钩子的。",
           "your hook still acts after its handle was removed: the handle you returned is not the one of the hook "
           "you registered.")


# ---- the sibling graph of 01.1 and 01.2 ----------------------------------------------------------------

def _sibling_graph(seed: int, n: int, dtype: torch.dtype, low: float = -1.0) -> tuple[torch.Tensor, ...]:
    """Leaves u, w; c = u * 3 (made first), d = w * 2, e = c + d: d and c receive the SAME gradient tensor."""
    torch.manual_seed(seed)
    u, w = ((torch.rand(n, dtype=dtype) * 2 + low).requires_grad_(True) for _ in range(2))
    v = torch.randn(n, dtype=dtype)
    c, d = u * 3, w * 2
    return u, w, v, c, d, c + d


def _close(a: torch.Tensor | None, b: torch.Tensor, nan: bool = False) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=nan)


def hooked_backward(loss: torch.Tensor, retain_graph: bool = False) -> None:
    """``loss.backward()`` with the learner's hooks attached (also in notebook 02): an error there is a verdict."""
    with guarded("backward-raised", "带着你的钩子做反向传播时", "backward with your hook attached"):
        loss.backward(retain_graph=retain_graph)


def _hooked_grad(loss: torch.Tensor, u: torch.Tensor, w: torch.Tensor, u_grad: torch.Tensor, nan: bool = False
                 ) -> torch.Tensor:
    """Backpropagate with the learner's hook on ``d``: the sibling leaf ``u`` keeps ``u_grad``; ``w.grad``."""
    hooked_backward(loss, retain_graph=True)
    expect(_close(u.grad, u_grad, nan), "in-place",
           "另一支（`c = u * 3`）的梯度也被改了：你在钩子里原地修改了 `grad`，而加法把同一个梯度张量也交给了另一支。请返回一个新张量。",
           "the gradient of the other branch (`c = u * 3`) changed too: your hook edits `grad` in place, and the "
           "addition hands that same gradient tensor to the other branch. Return a new tensor.")
    expect(w.grad is not None, "no-grad", "反向传播后 `w.grad` 是 None。", "`w.grad` is None after backward.")
    return w.grad  # type: ignore[return-value]  # not None: just checked


def _plain_again(loss: torch.Tensor, u: torch.Tensor, w: torch.Tensor, plain: Callable[[torch.Tensor], bool]
                 ) -> Callable[[], bool]:
    """``hook_gone`` for :func:`expect_removed`: backpropagate again; does ``w.grad`` look hook-free?"""
    def gone() -> bool:
        w.grad = u.grad = None
        hooked_backward(loss)
        return plain(w.grad)  # type: ignore[arg-type]
    return gone


# ---- 01.1 gradient noise ---------------------------------------------------------------------------------

_NOISE_CASES = [(1, 20000, 0.01, torch.float32), (2, 8000, 0.5, torch.float64), (3, 12000, 2.0, torch.float32)]


@exercise("01.1", answer="add_grad_noise")
def add_grad_noise(answer: Any) -> None:
    for seed, n, std, dtype in _NOISE_CASES:
        u, w, v, c, d, e = _sibling_graph(seed, n, dtype)
        loss = (e * v).sum()                       # dL/dd = v, dL/dw = 2 v, dL/du = 3 v
        handle = run(answer, d, std, returns=TENSOR_HANDLE)
        expect_handle(handle, "add_grad_noise")
        torch.manual_seed(100 + seed)
        w_grad = _hooked_grad(loss, u, w, 3 * v)
        # bitwise: exact arithmetic, without noise dL/dw is 2 v exactly; noise of std >= 0.01 is far from it
        expect(not torch.equal(w_grad, 2 * v), "not-returned", "梯度没有变化：钩子要**返回**加了噪声的新张量，返回 None 只是旁观。",
               "the gradient did not change: the hook must **return** the new, noisy tensor; returning None only observes.")
        noise = w_grad / 2 - v
        mean, spread = noise.mean().item(), noise.std().item()
        expect(spread > 1e-3 * std, "one-draw-for-all",
               f"每个元素都加上了同一个数（{mean:.4g}）：你只抽了一个随机数。每个元素要有自己的噪声，用 `torch.randn_like(grad) * std`。",
               f"every element was shifted by the same amount ({mean:.4g}): you drew one random number for the whole "
               "gradient. Draw one per element, with `torch.randn_like(grad) * std`.")
        expect(abs(mean) <= 6 * std / n ** 0.5, "noise-mean", f"噪声的均值应为 0（标准差 {std}，{n} 个元素），测得的是 {mean:.4g}。",
               f"the noise should have mean 0 (std {std}, {n} elements); measured {mean:.4g}.")
        expect(abs(spread / std - 1) <= 0.1, "noise-std",
               f"噪声的标准差应为 {std}，测得的是 {spread:.4g}（是不是用了方差 `std ** 2`，或对所有元素加了同一个随机数？）。",
               f"the noise should have standard deviation {std}; measured {spread:.4g} (the variance `std ** 2` "
               "instead, or one random number added to every element?).")
        # bitwise: exact arithmetic, without the hook dL/dw is v * 1 passed on and doubled: 2 v exactly
        expect_removed(handle, d, ("`t` ", "`t`"), _plain_again(loss, u, w, lambda g: torch.equal(g, 2 * v)))


# ---- 01.2 replace nan gradients by 0 and count them ------------------------------------------------------

_NAN_CASES = [(4, 12, -1.0), (5, 40, 0.0), (6, 25, 2.0)]   # low=2.0: e > 1 everywhere, no nan


def _expect_nan_count(replaced: list, nans: int, n: int) -> None:
    expect(len(replaced) == 1, "one-count-per-backward",
           f"一次反向传播后 `replaced` 里应正好多出一个数，实际有 {len(replaced)} 个：{replaced!r}。",
           f"after one backward pass `replaced` should hold exactly one number; it holds {len(replaced)}: {replaced!r}.")
    count = replaced[0]
    expect(not isinstance(count, torch.Tensor), "tensor-not-int",
           f"`replaced` 里应是 Python 整数，收到的是一个张量 {count!r}；题目要的是整数，用 `int(mask.sum())` 转换。",
           f"`replaced` should get a Python int, not the tensor {count!r}; the exercise asks for an int: convert it "
           "with `int(mask.sum())`.")
    if isinstance(count, float):                # a fraction (a mean) has its own verdict
        expect_count(count, ("被替换元素的个数（整数）", "the number of replaced elements as an int"))
    expect(isinstance(count, int) and not isinstance(count, bool), "not-an-int",
           f"`replaced` 里应是被替换元素的个数（整数），收到的是 {count!r}。",
           f"`replaced` should get the number of replaced elements (an int), not {count!r}.")
    expect(count or not nans, "nan-equals",
           f"这次梯度里有 {nans} 个 nan（共 {n} 个元素），你记下的是 0。`x == float('nan')` 永远是 False，用 `torch.isnan`。",
           f"this gradient has {nans} nans (of {n} elements); you recorded 0. `x == float('nan')` is always False; "
           "use `torch.isnan`.")
    expect(count == nans, "nan-count", f"这次梯度里有 {nans} 个 nan（共 {n} 个元素），你记下的是 {count}。",
           f"this gradient has {nans} nans (of {n} elements); you recorded {count}.")


@exercise("01.2", answer="zero_nan_grads")
def zero_nan_grads(answer: Any) -> None:
    for seed, n, low in _NAN_CASES:
        u, w, v, c, d, e = _sibling_graph(seed, n, torch.float32, low)
        loss = (torch.sqrt(e - 1) * v).sum()    # nan gradient wherever e < 1
        with torch.no_grad():                   # the truth, without hooks: d sqrt(s)/ds = 1 / (2 sqrt(s))
            grad_e = v / (2 * torch.sqrt(e - 1))
        nans, replaced = int(torch.isnan(grad_e).sum()), []  # type: ignore[var-annotated]
        handle = run(answer, d, replaced, returns=TENSOR_HANDLE)
        expect_handle(handle, "zero_nan_grads")
        w_grad = _hooked_grad(loss, u, w, 3 * grad_e, nan=True)
        _expect_nan_count(replaced, nans, n)
        expect(not torch.isnan(w_grad).any(), "nan-left", "`w.grad` 里仍有 nan：钩子要返回把 nan 换成 0 之后的新张量。",
               "`w.grad` still contains nan: the hook must return a new tensor with the nans replaced by 0.")
        expect(_close(w_grad, 2 * torch.nan_to_num(grad_e, nan=0.0)), "not-only-nans",
               "`w.grad` 不对：只应把 nan 换成 0，其余元素保持原样。",
               "`w.grad` is wrong: replace only the nans by 0 and leave every other element as it is.")
        w.grad = u.grad = None                  # a second backward pass: the hook counts this pass's nans only
        hooked_backward(loss, retain_graph=True)
        expect(not (nans and replaced[1:] == [2 * nans]), "running-total",
               f"第二次反向传播后你记下的是 {2 * nans}，即两次的累计；每次只应记下这一次替换的个数（{nans}），不要在钩子外累加。",
               f"after a second backward pass you appended {2 * nans}, the total of both passes; append the number "
               f"replaced this time only ({nans}), not a running total kept outside the hook.")
        _expect_nan_count(replaced[1:], nans, n)
        expect_removed(handle, d, ("`t` ", "`t`"), _plain_again(
            loss, u, w, lambda g: len(replaced) == 2 and (not nans or bool(torch.isnan(g).any()))))


# ---- 01.3 clip one parameter's gradient by its norm, from outside the model -----------------------------

def _conv_net(channels: int) -> nn.Sequential:
    """Shaped like the notebook's TestNet: conv -> ReLU -> flatten -> linear."""
    return nn.Sequential(nn.Conv2d(3, channels, 2, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(channels * 16, 5))


def _clip_cases() -> list[tuple[nn.Module, torch.Tensor, str, float]]:
    torch.manual_seed(7)
    conv = _conv_net(6), torch.randn(2, 3, 8, 8)
    torch.manual_seed(8)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)), torch.randn(6, 4)
    torch.manual_seed(9)
    conv2 = _conv_net(4), torch.randn(3, 3, 8, 8)
    return [(*conv, "0.weight", 1.0), (*mlp, "0.weight", 0.5), (*conv2, "3.bias", 0.3),
            (*mlp, "2.weight", 10.0)]     # the last one is already below its limit: left unchanged


def _grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    hooked_backward((model(x) ** 2).sum())
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@contextmanager
def _incoming_grad(param: torch.Tensor) -> Iterator[dict[str, torch.Tensor]]:
    """A hook registered BEFORE the learner's keeps the gradient tensor that every later hook on ``param``
    receives, and a copy of its values, so that an in-place edit by a later hook shows as a difference."""
    seen: dict[str, torch.Tensor] = {}
    handle = param.register_hook(lambda grad: seen.update(grad=grad, copy=grad.detach().clone()))
    try:
        yield seen
    finally:
        handle.remove()


def _clip_verdict(name: str, norm: float, got_norm: float, max_norm: float) -> None:
    zh, en = f"`{name}` 的梯度不对（max_norm={max_norm}）：", f"the gradient of `{name}` is wrong (max_norm={max_norm}): "
    if norm <= max_norm:
        fail("scaled-below-limit", f"{zh}它的范数 {norm:.4g} 本来就不超过 {max_norm}，应保持不变；你的结果范数为 {got_norm:.4g}。",
             f"{en}its norm {norm:.4g} is already at most {max_norm} and must stay unchanged; yours has norm {got_norm:.4g}.")
    expect(not abs(got_norm - max_norm) <= 1e-4 * max_norm, "clamped-elementwise",  # a nan norm is not right
           f"{zh}范数对了，方向却变了：应整体乘以同一个系数，而不是逐元素截断。",
           f"{en}the norm is right but the direction changed: scale the whole gradient by one factor instead of "
           "clamping element by element.")
    fail("clip-norm", f"{zh}范数 {norm:.4g} 应缩放到 {max_norm}，你的结果范数为 {got_norm:.4g}。",
         f"{en}its norm {norm:.4g} should be scaled down to {max_norm}; yours has norm {got_norm:.4g}.")


@exercise("01.3", answer="clip_param_grad")
def clip_param_grad(answer: Any) -> None:
    for model, x, name, max_norm in _clip_cases():
        clean = _grads(model, x)                   # the truth, without hooks
        norm = clean[name].norm().item()
        with _incoming_grad(model.get_parameter(name)) as seen:
            handle = run(answer, model, name, max_norm, returns=TENSOR_HANDLE)
            expect_handle(handle, "clip_param_grad")
            got = _grads(model, x)
        # bitwise: copy, a clone taken before the answer ran
        expect("grad" not in seen or torch.equal(seen["grad"], seen["copy"]), "in-place",
               f"你在钩子里原地修改了 `{name}` 收到的 `grad`（比如 `grad.mul_(...)`）。钩子收到的梯度可能与别处共用（第 4 节），"
               "要改就返回一个新张量，比如 `grad * factor`。",
               f"your hook edits the `grad` that `{name}` receives in place (`grad.mul_(...)`, say). The gradient a hook "
               "receives may be shared with other parts of the graph (section 4): return a new tensor instead, such "
               "as `grad * factor`.")
        # bitwise: same computation, the other parameters' gradients come from the same backward as without the hook
        others = [other for other in clean if other != name and not torch.equal(got[other], clean[other])]
        expect(not others, "other-parameters", f"只应改动 `{name}` 的梯度，但 {', '.join(others)} 的梯度也变了。",
               f"only the gradient of `{name}` may change, yet {', '.join(others)} changed too.")
        if not _close(got[name], clean[name] * min(1.0, max_norm / norm)):
            _clip_verdict(name, norm, got[name].norm().item(), max_norm)
        # bitwise: same computation, without the hook the same backward runs again
        expect_removed(handle, model, ("模型", "the model"), lambda: torch.equal(_grads(model, x)[name], clean[name]))
        model.zero_grad(set_to_none=True)
