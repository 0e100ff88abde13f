"""Exercises of notebook 09 (hooks beyond autograd).

09.1 ``upgrade(module, state_dict, prefix, ...)``: a load-state-dict pre-hook that upgrades a version-1 checkpoint.
09.2 ``skip_nonfinite(optimizer)``: a step pre-hook that turns a step with non-finite gradients into a no-op.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..attempt import first_sentence
from ...inventory import hook_inventory
from . import (NotSolved, Wrong, call_answer, drop_global_hooks_added_since, exercise, global_hook_ids,
               require_callable)


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


class Wrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.net = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _load_message(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
    text = " ".join(lines) if lines else first_sentence(exc)
    return text if len(text) <= 220 else text[:217] + "..."


@exercise("09.1",
          hint=("钩子原地修改 `state_dict`：若 `local_metadata.get(\"version\", 1) < 2`，就 `pop` 出 `prefix + \"fc.weight\"`，"
                "`squeeze(-1)` 后存为 `prefix + \"head.weight\"`；`fc.bias` 同理；再用 `state_dict.setdefault(prefix + "
                "\"temperature\", torch.ones(()))` 补上缓冲区。所有键都要以 `prefix` 开头。",
                "edit `state_dict` in place: if `local_metadata.get(\"version\", 1) < 2`, `pop` `prefix + \"fc.weight\"`, "
                "`squeeze(-1)` it and store it as `prefix + \"head.weight\"`; the same for `fc.bias`; then fill the buffer "
                "with `state_dict.setdefault(prefix + \"temperature\", torch.ones(()))`. Every key starts with `prefix`."),
          solution='''
def upgrade(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    if local_metadata.get("version", 1) >= 2:
        return
    for name in ("weight", "bias"):
        old_key = f"{prefix}fc.{name}"
        if old_key in state_dict:
            value = state_dict.pop(old_key)
            state_dict[f"{prefix}head.{name}"] = value.squeeze(-1) if name == "weight" else value
    state_dict.setdefault(f"{prefix}temperature", torch.ones(()))
''')
def upgrade(answer: Any) -> None:
    require_callable(answer, "upgrade")
    torch.manual_seed(0)
    probe = OldNet().state_dict()
    before = dict(probe)
    call_answer(answer, NewNet(), probe, "", {"version": 1}, True, [], [], [], allow_none=True)
    if probe.keys() == before.keys() and all(probe[k] is before[k] for k in probe):
        raise NotSolved("你的钩子还没有修改 `state_dict`。", "your hook does not change `state_dict` yet.")

    for seed, nested in [(1, False), (2, True), (3, True)]:
        torch.manual_seed(seed)
        old = Wrapper(OldNet()) if nested else OldNet()
        ckpt = old.state_dict()
        keys_before = sorted(ckpt)
        new = NewNet()
        target = Wrapper(new) if nested else new
        new.register_load_state_dict_pre_hook(answer)
        where = "a NewNet nested as `net` (prefix 'net.')" if nested else "a NewNet at the root (prefix '')"
        where_zh = "嵌套为 `net` 的 NewNet（prefix 为 'net.'）" if nested else "作为根模块的 NewNet（prefix 为 ''）"
        try:
            target.load_state_dict(ckpt)
        except RuntimeError as exc:
            raise Wrong(f"对{where_zh}，`load_state_dict(strict=True)` 失败：{_load_message(exc)}"
                        + ("（键名要用 `prefix` 拼出来）" if nested else ""),
                        f"for {where}, `load_state_dict(strict=True)` failed: {_load_message(exc)}"
                        + (" (build the keys from `prefix`)" if nested else "")) from exc
        except Exception as exc:  # the learner's hook raised inside load_state_dict
            raise Wrong(f"对{where_zh}，你的钩子抛出了 {type(exc).__name__}: {first_sentence(exc)}",
                        f"for {where}, your hook raised {type(exc).__name__}: {first_sentence(exc)}") from exc
        if sorted(ckpt) != keys_before:
            raise Wrong("调用者的检查点被改了。", "the caller's checkpoint dict was changed.")
        x = torch.randn(5, 4)
        with torch.no_grad():
            if new.temperature.item() != 1.0:
                raise Wrong(f"第 1 版检查点加载后 `temperature` 应为 1，得到 {new.temperature.item():g}。",
                            f"after loading a version-1 checkpoint `temperature` should be 1, got {new.temperature.item():g}.")
            if not torch.allclose(target(x), old(x), atol=1e-6):
                raise Wrong(f"对{where_zh}，加载后的预测与旧模型不同：`head.weight` 应等于 `fc.weight.squeeze(-1)`。",
                            f"for {where}, the loaded model predicts differently from the old one: `head.weight` "
                            f"should equal `fc.weight.squeeze(-1)`.")

    torch.manual_seed(4)
    v2 = NewNet()
    with torch.no_grad():
        v2.temperature.fill_(2.5)
    new = NewNet()
    new.register_load_state_dict_pre_hook(answer)
    try:
        new.load_state_dict(v2.state_dict())
    except Exception as exc:
        raise Wrong(f"加载第 2 版检查点失败：{type(exc).__name__}: {_load_message(exc)}",
                    f"loading a version-2 checkpoint failed: {type(exc).__name__}: {_load_message(exc)}") from exc
    if new.temperature.item() != 2.5 or not torch.equal(new.head.weight, v2.head.weight):
        raise Wrong("第 2 版的检查点被你的钩子改了（比如 `temperature` 被重置为 1）：先检查 `local_metadata.get(\"version\", 1)`。",
                    "your hook changed a version-2 checkpoint (e.g. reset `temperature` to 1): check "
                    "`local_metadata.get(\"version\", 1)` first.")


# ---- 09.2 a step pre-hook that skips steps with non-finite gradients ---------------------

def _make(kind: str, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    if kind == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)
    return model, opt


def _backward(model: nn.Module, seed: int, bad: float | None = None) -> None:
    torch.manual_seed(seed)
    model(torch.randn(6, 3)).pow(2).sum().backward()
    if bad is not None:
        model[2].weight.grad[1, 2] = bad


def _state(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v.detach().clone() for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]


@exercise("09.2",
          hint=("在钩子里检查 `all(torch.isfinite(p.grad).all() for g in optimizer.param_groups for p in g[\"params\"] "
                "if p.grad is not None)`；不全是有限值时，把**每个**参数的 `p.grad` 设为 `None`（不是清零：清零后动量和权重衰减"
                "仍会移动参数）。用 `optimizer.register_step_pre_hook` 注册并返回句柄。",
                "in the hook check `all(torch.isfinite(p.grad).all() for g in optimizer.param_groups for p in g[\"params\"] "
                "if p.grad is not None)`; when not all are finite, set **every** parameter's `p.grad` to `None` (not zero: "
                "momentum and weight decay still move a parameter whose gradient is zero). Register it with "
                "`optimizer.register_step_pre_hook` and return the handle."),
          solution='''
def skip_nonfinite(optimizer):
    def hook(opt, args, kwargs):
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not all(torch.isfinite(p.grad).all() for p in params):
            for p in params:
                p.grad = None  # built-in optimizers skip parameters without a gradient
    return optimizer.register_step_pre_hook(hook)
''')
def skip_nonfinite(answer: Any) -> None:
    require_callable(answer, "skip_nonfinite")
    for kind, bad in [("adamw", float("nan")), ("sgd", float("inf")), ("adamw", float("-inf"))]:
        model, opt = _make(kind, 0)
        twin, twin_opt = _make(kind, 0)
        for m, o in ((model, opt), (twin, twin_opt)):  # one good step: the optimizer has state
            _backward(m, 10)
            o.step()
            o.zero_grad()
        globals_before = global_hook_ids()
        try:
            handle = call_answer(answer, opt, returns=("`register_step_pre_hook` 给你的句柄（handle）",
                                                       "the handle that `register_step_pre_hook` gave you"))
        finally:
            leaked_global = drop_global_hooks_added_since(globals_before)
        if leaked_global:
            raise Wrong("你注册了全局优化器钩子；这里只需要在 `optimizer` 上注册一个前置钩子。",
                        "you registered a global optimizer hook; register one pre-hook on `optimizer` only.")
        if not callable(getattr(handle, "remove", None)):
            raise Wrong(f"应返回 `register_step_pre_hook` 给出的句柄，收到的是 {type(handle).__name__}。",
                        f"return the handle `register_step_pre_hook` gives you, not a {type(handle).__name__}.")
        what = "AdamW (weight_decay=0.1)" if kind == "adamw" else "SGD (momentum=0.9)"
        try:
            params_before = [p.detach().clone() for p in model.parameters()]
            state_before = _state(opt)
            _backward(model, 11, bad=bad)
            try:
                opt.step()
            except Exception as exc:
                said = first_sentence(exc).split(' at 0x')[0]
                if isinstance(exc, RuntimeError) and "must return None or a tuple" in str(exc):
                    raise Wrong(f"{what}：你的前置钩子返回了 None 和 (args, kwargs) 以外的值，`step()` 因此抛出 RuntimeError。"
                                "返回值不能表示“跳过”：把**每个**参数的 `p.grad` 设为 None。",
                                f"{what}: your pre-hook returned something other than None or (args, kwargs), so `step()` "
                                f"raised a RuntimeError. No return value means \"skip\": set **every** `p.grad` to None.") from exc
                raise Wrong(f"{what}：梯度含 {bad} 时你的钩子让 `step()` 抛出了 {type(exc).__name__}: {said}；"
                            "抛异常会打断训练循环，后置钩子也不运行。把**每个**参数的 `p.grad` 设为 None，这一步就什么也不做。",
                            f"{what}: with a {bad} in a gradient your hook made `step()` raise {type(exc).__name__}: {said}; "
                            f"raising stops the training loop and skips the post-hooks. Set **every** `p.grad` to None "
                            f"and the step does nothing.") from exc
            after = [p.detach() for p in model.parameters()]
            moved = [not torch.equal(a, b) for a, b in zip(params_before, after)]
            bad_index = 2  # model[2].weight, the parameter whose gradient holds the non-finite value
            if not all(bool(torch.isfinite(p).all()) for p in after):
                raise Wrong(f"{what}：梯度里的 {bad} 进了参数：你的检查没有发现它。`torch.isfinite` 同时查出 NaN 和 ±inf"
                            "（只查 `isnan` 会漏掉 inf）。",
                            f"{what}: the {bad} in a gradient reached the parameters: your check did not catch it. "
                            f"`torch.isfinite` catches NaN and ±inf alike (`isnan` alone misses an inf).")
            if any(moved) and not moved[bad_index]:
                raise Wrong(f"{what}：含 {bad} 的那个参数没动，其余参数却更新了。要丢掉的是**全部**梯度，不只是坏的那一个："
                            "这一步应完全不发生。",
                            f"{what}: the parameter with the {bad} stayed, but the others were updated. Drop **every** "
                            f"gradient, not only the bad one: the whole step should not happen.")
            if any(moved):
                raise Wrong(f"{what}：梯度含 {bad} 时参数还是变了（全都是有限值）。清零梯度不等于跳过：动量和权重衰减仍会移动参数；"
                            "把**每个**参数的 `p.grad` 设为 None。",
                            f"{what}: with a {bad} in a gradient the parameters still changed (to finite values). Zeroing "
                            f"is not skipping: momentum and weight decay still move them; set **every** `p.grad` to None.")
            state_after = _state(opt)
            if len(state_after) != len(state_before) or not all(torch.equal(a, b) for a, b in zip(state_before, state_after)):
                raise Wrong(f"{what}：参数没变，但优化器状态（步数或动量）变了；这一步应完全不发生。",
                            f"{what}: the parameters stayed, but the optimizer state (step count or momentum) changed; "
                            f"the step should not happen at all.")
            opt.zero_grad()
            _backward(model, 12)
            _backward(twin, 12)
            opt.step()
            twin_opt.step()
            if all(torch.equal(a, b) for a, b in zip(params_before, model.parameters())):
                raise Wrong(f"{what}：梯度全是有限值时，你的钩子也跳过了这一步（参数一点没变）。只有梯度含 NaN 或 inf 时才跳过。",
                            f"{what}: your hook skipped a step whose gradients were all finite (no parameter moved). "
                            f"Skip only when a gradient holds a NaN or an inf.")
            if not all(torch.allclose(a, b, atol=1e-7) for a, b in zip(model.parameters(), twin.parameters())):
                raise Wrong(f"{what}：梯度有限时，这一步应与没有钩子时完全一样地更新参数。",
                            f"{what}: with finite gradients the step should update the parameters exactly as without "
                            f"the hook.")
        finally:
            handle.remove()
        if hook_inventory(opt, include_global=False):
            raise Wrong("调用 `handle.remove()` 之后优化器上还有钩子：只注册一个钩子，并返回它的句柄。",
                        "a hook is still on the optimizer after `handle.remove()`: register one hook and return its handle.")
