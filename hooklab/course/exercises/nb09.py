"""Exercises of notebook 09 (hooks beyond autograd).

09.1 ``upgrade(module, state_dict, prefix, ...)``: a load-state-dict pre-hook that upgrades a version-1 checkpoint.
09.2 ``skip_nonfinite(optimizer)``: a step pre-hook that turns a step with non-finite gradients into a no-op.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ...inventory import hook_inventory
from ..attempt import first_sentence
from . import exercise
from ._support import (
    NotSolved,
    Wrong,
    call_answer,
    drop_global_hooks_added_since,
    expect,
    fail,
    global_hook_ids,
    guarded,
    is_handle,
)

# ---- 09.1 upgrade a version-1 checkpoint with a load pre-hook ----------------------------

class OldNet(nn.Module):
    """Version 1: a 1x1 Conv1d classifier called fc."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.fc = nn.Conv1d(4, 2, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.body(x)).unsqueeze(-1)).squeeze(-1)


class NewNet(nn.Module):
    """Version 2: an nn.Linear classifier called head and a temperature buffer."""

    _version = 2

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        self.register_buffer("temperature", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x))) / self.temperature


@contextmanager
def _loading(where: tuple[str, str], nested: bool = False) -> Iterator[None]:
    """Around ``load_state_dict``: the hook raising, or the load failing (its message without the first line)."""
    with guarded("hook-raised", f"{where[0]}，你的钩子", f"{where[1]}, your hook"):
        try:
            yield
        except RuntimeError as exc:
            lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
            said = " ".join(lines) if lines else first_sentence(exc)
            said = said if len(said) <= 220 else said[:217] + "..."
            fail("load-failed", f"{where[0]}，`load_state_dict(strict=True)` 失败：{said}"
                 + ("（键名要用 `prefix` 拼出来）" if nested else ""),
                 f"{where[1]}, `load_state_dict(strict=True)` failed: {said}"
                 + (" (build the keys from `prefix`)" if nested else ""))


@exercise("09.1", answer="upgrade")
def upgrade(answer: Any) -> None:
    torch.manual_seed(0)
    probe = OldNet().state_dict()
    before = dict(probe)
    returned = call_answer(answer, NewNet(), probe, "", {"version": 1}, True, [], [], [], allow_none=True)
    if probe.keys() == before.keys() and all(probe[k] is before[k] for k in probe):
        expect(not isinstance(returned, dict), "returned-new-dict",
               "你的钩子返回了一个新字典，而传进来的 `state_dict` 原封未动：`load_state_dict` 会丢掉加载前置钩子的返回值，"
               "只读它传给钩子的那个字典。请原地修改：`state_dict[new_key] = state_dict.pop(old_key)`。",
               "your hook returns a new dict and leaves the `state_dict` it was given as it was: `load_state_dict` "
               "ignores what a load pre-hook returns and reads only the dict it passed in. Edit that one in place: "
               "`state_dict[new_key] = state_dict.pop(old_key)`.")
        raise NotSolved("你的钩子还没有修改 `state_dict`。", "your hook does not change `state_dict` yet.",
                        reason="state-dict-unchanged")
    for seed, nested in [(1, False), (2, True), (3, True)]:
        torch.manual_seed(seed)
        old: nn.Module = OldNet()
        new = NewNet()
        old, target = (nn.Sequential(OrderedDict(net=old)), nn.Sequential(OrderedDict(net=new))) if nested else (old, new)
        ckpt = old.state_dict()
        shapes = {k: v.shape for k, v in ckpt.items()}
        new.register_load_state_dict_pre_hook(answer)
        where = (("嵌套为 `net` 的 NewNet（prefix 为 'net.'）", "a NewNet nested as `net` (prefix 'net.')") if nested
                 else ("作为根模块的 NewNet（prefix 为 ''）", "a NewNet at the root (prefix '')"))
        with _loading((f"对{where[0]}", f"for {where[1]}"), nested):
            target.load_state_dict(ckpt)
        expect({k: v.shape for k, v in ckpt.items()} == shapes, "checkpoint-changed",
               "调用者的检查点被改了（键或张量的形状）。", "the caller's checkpoint dict was changed (its keys or the "
               "shapes of its tensors).")
        temperature = new.get_buffer("temperature").item()
        # bitwise: copy, the buffer keeps its 1.0, or the hook stores a literal
        expect(temperature == 1.0, "temperature", f"第 1 版检查点加载后 `temperature` 应为 1，得到 {temperature:g}。",
               f"after loading a version-1 checkpoint `temperature` should be 1, got {temperature:g}.")
        x = torch.randn(5, 4)
        with torch.no_grad():
            same = torch.allclose(target(x), old(x), atol=1e-6)
        expect(same, "predictions-differ",
               f"对{where[0]}，加载后的预测与旧模型不同：`head.weight` 应等于 `fc.weight.squeeze(-1)`。",
               f"for {where[1]}, the loaded model predicts differently from the old one: `head.weight` should equal "
               "`fc.weight.squeeze(-1)`.")
    torch.manual_seed(4)
    v2, new = NewNet(), NewNet()
    with torch.no_grad():
        v2.get_buffer("temperature").fill_(2.5)
    new.register_load_state_dict_pre_hook(answer)
    with _loading(("加载第 2 版检查点时", "loading a version-2 checkpoint")):
        new.load_state_dict(v2.state_dict())
    # bitwise: copy, load_state_dict copies the checkpoint's values
    expect(new.get_buffer("temperature").item() == 2.5 and torch.equal(new.head.weight, v2.head.weight), "version-2-changed",
           "第 2 版的检查点被你的钩子改了（比如 `temperature` 被重置为 1）：先检查 `local_metadata.get(\"version\", 1)`。",
           "your hook changed a version-2 checkpoint (e.g. reset `temperature` to 1): check "
           "`local_metadata.get(\"version\", 1)` first.")


# ---- 09.2 a step pre-hook that skips steps with non-finite gradients ---------------------

_OPTIMIZERS = {"adamw": (lambda params: torch.optim.AdamW(params, lr=0.05, weight_decay=0.1), "AdamW (weight_decay=0.1)"),
               "sgd": (lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.01),
                       "SGD (momentum=0.9)")}
_STEP_CASES = [("adamw", float("nan")), ("sgd", float("inf")), ("adamw", float("-inf"))]


def _trained(kind: str) -> tuple[nn.Sequential, torch.optim.Optimizer]:
    """A small model and its optimizer after one good step (the optimizer has state)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    opt = _OPTIMIZERS[kind][0](model.parameters())
    _backward(model, 10)
    opt.step()
    opt.zero_grad()
    return model, opt


def _backward(model: nn.Sequential, seed: int, bad: float | None = None) -> None:
    torch.manual_seed(seed)
    model(torch.randn(6, 3)).pow(2).sum().backward()
    if bad is not None:
        grad = model.get_submodule("2").get_parameter("weight").grad
        assert grad is not None
        grad[1, 2] = bad


def _state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v.detach().clone() for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]


def _registered_hook(answer: Any, opt: torch.optim.Optimizer) -> Any:
    """The learner's function called on ``opt``: it must return a handle and register no global hook."""
    globals_before = global_hook_ids()
    try:
        handle = call_answer(answer, opt, returns=("`register_step_pre_hook` 给你的句柄（handle）",
                                                   "the handle that `register_step_pre_hook` gave you"))
    finally:
        leaked_global = drop_global_hooks_added_since(globals_before)
    expect(not leaked_global, "global-hook", "你注册了全局优化器钩子；这里只需要在 `optimizer` 上注册一个前置钩子。",
           "you registered a global optimizer hook; register one pre-hook on `optimizer` only.")
    expect(is_handle(handle), "not-a-handle",
           f"应返回 `register_step_pre_hook` 给出的句柄，收到的是 {type(handle).__name__}。",
           f"return the handle `register_step_pre_hook` gives you, not a {type(handle).__name__}.")
    return handle


@contextmanager
def _stepping(what: str, bad: float) -> Iterator[None]:
    """Around ``opt.step()`` with a non-finite gradient: the hook made it raise."""
    try:
        yield
    except Exception as exc:
        said = first_sentence(exc).split(' at 0x')[0]
        expect(not (isinstance(exc, RuntimeError) and "must return None or a tuple" in str(exc)), "pre-hook-returned-value",
               f"{what}：你的前置钩子返回了 None 和 (args, kwargs) 以外的值，`step()` 因此抛出 RuntimeError。"
               "返回值不能表示“跳过”：把**每个**参数的 `p.grad` 设为 None。",
               f"{what}: your pre-hook returned something other than None or (args, kwargs), so `step()` raised a "
               "RuntimeError. No return value means \"skip\": set **every** `p.grad` to None.")
        fail("step-raised", f"{what}：梯度含 {bad} 时你的钩子让 `step()` 抛出了 {type(exc).__name__}: {said}；"
             "抛异常会打断训练循环，后置钩子也不运行。把**每个**参数的 `p.grad` 设为 None，这一步就什么也不做。",
             f"{what}: with a {bad} in a gradient your hook made `step()` raise {type(exc).__name__}: {said}; raising "
             "stops the training loop and skips the post-hooks. Set **every** `p.grad` to None and the step does nothing.")


def _check_bad_step(model: nn.Sequential, opt: torch.optim.Optimizer, what: str, bad: float) -> None:
    """A step with a non-finite gradient changes neither the parameters nor the optimizer's state."""
    params_before, state_before = [p.detach().clone() for p in model.parameters()], _state(opt)
    _backward(model, 11, bad=bad)
    with _stepping(what, bad):
        opt.step()
    after = [p.detach() for p in model.parameters()]
    # bitwise: copy, a skipped step leaves the parameters untouched (a real step moves them)
    moved = [not torch.equal(a, b) for a, b in zip(params_before, after)]
    expect(all(bool(torch.isfinite(p).all()) for p in after), "nonfinite-reached-params",
           f"{what}：梯度里的 {bad} 进了参数：你的检查没有发现它。`torch.isfinite` 同时查出 NaN 和 ±inf（只查 `isnan` 会漏掉 inf）。",
           f"{what}: the {bad} in a gradient reached the parameters: your check did not catch it. `torch.isfinite` "
           "catches NaN and ±inf alike (`isnan` alone misses an inf).")
    expect(not any(moved) or moved[2], "only-bad-dropped",  # parameter 2 is model[2].weight, the one with the bad value
           f"{what}：含 {bad} 的那个参数没动，其余参数却更新了。要丢掉的是**全部**梯度，不只是坏的那一个：这一步应完全不发生。",
           f"{what}: the parameter with the {bad} stayed, but the others were updated. Drop **every** gradient, not "
           "only the bad one: the whole step should not happen.")
    expect(not any(moved), "zeroed-not-skipped",
           f"{what}：梯度含 {bad} 时参数还是变了（全都是有限值）。清零梯度不等于跳过：动量和权重衰减仍会移动参数；"
           "把**每个**参数的 `p.grad` 设为 None。",
           f"{what}: with a {bad} in a gradient the parameters still changed (to finite values). Zeroing is not "
           "skipping: momentum and weight decay still move them; set **every** `p.grad` to None.")
    state_after = _state(opt)
    # bitwise: copy, a skipped step leaves the state untouched
    expect(len(state_after) == len(state_before) and all(torch.equal(a, b) for a, b in zip(state_before, state_after)),
           "state-changed", f"{what}：参数没变，但优化器状态（步数或动量）变了；这一步应完全不发生。",
           f"{what}: the parameters stayed, but the optimizer state (step count or momentum) changed; the step "
           "should not happen at all.")


@exercise("09.2", answer="skip_nonfinite")
def skip_nonfinite(answer: Any) -> None:
    for kind, bad in _STEP_CASES:
        (model, opt), (twin, twin_opt) = _trained(kind), _trained(kind)
        what = _OPTIMIZERS[kind][1]
        handle = _registered_hook(answer, opt)
        kinds = {entry.kind for entry in hook_inventory(opt)}
        try:
            try:
                _check_bad_step(model, opt, what, bad)
            except Wrong:
                expect("step_pre" in kinds or "optimizer_step_pre" in kinds or "step_post" not in kinds,
                       "post-hook-not-pre-hook",
                       f"{what}：你注册的是 `step` 的后置钩子（`register_step_post_hook`），它在参数和优化器状态已经更新之后"
                       "才运行，来不及拦下这一步。用 `register_step_pre_hook`：在更新之前把每个参数的 `p.grad` 设为 None。",
                       f"{what}: you registered a step post-hook (`register_step_post_hook`), which runs after the "
                       "parameters and the optimizer state were updated, too late to stop the step. Use "
                       "`register_step_pre_hook`, and set every `p.grad` to None before the update.")
                raise
            params_before = [p.detach().clone() for p in model.parameters()]
            for m, o in ((model, opt), (twin, twin_opt)):  # a step with finite gradients, with and without the hook
                o.zero_grad()
                _backward(m, 12)
                o.step()
            # bitwise: changed, a real step moves the parameters (a skipped one leaves them untouched)
            expect(not all(torch.equal(a, b) for a, b in zip(params_before, model.parameters())), "skipped-finite-step",
                   f"{what}：梯度全是有限值时，你的钩子也跳过了这一步（参数一点没变）。只有梯度含 NaN 或 inf 时才跳过。",
                   f"{what}: your hook skipped a step whose gradients were all finite (no parameter moved). Skip only "
                   "when a gradient holds a NaN or an inf.")
            expect(all(torch.allclose(a, b, atol=1e-7) for a, b in zip(model.parameters(), twin.parameters())),
                   "finite-step-differs", f"{what}：梯度有限时，这一步应与没有钩子时完全一样地更新参数。",
                   f"{what}: with finite gradients the step should update the parameters exactly as without the hook.")
        finally:
            handle.remove()
        expect(not hook_inventory(opt, include_global=False), "hook-left-after-remove",
               "调用 `handle.remove()` 之后优化器上还有钩子：只注册一个钩子，并返回它的句柄。",
               "a hook is still on the optimizer after `handle.remove()`: register one hook and return its handle.")
