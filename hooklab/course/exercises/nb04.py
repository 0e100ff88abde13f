"""Exercises of notebook 04 (module backward hooks).

04.1 ``clip_grad_input(module, grad_input, grad_output)``: a full backward hook that clamps ``grad_input``.
04.2 ``my_factors``: predict how a pre-hook and a backward hook on ``fc2`` that halve a gradient scale three gradients.
04.3 ``block_grad_norms(model, x)``: the norm of each residual block's ``grad_output[0]``, in firing order.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from numbers import Real
from typing import Any

import torch
from torch import nn

from . import NotSolved, Wrong, call_answer, exercise, no_hooks_left, require_callable
from ._support import short_error as _short  # interim, until notebook 04 is converted

LIMIT = 0.1


# ---- 04.1 clamp grad_input in a full backward hook -----------------------------------------

class Scaled(nn.Module):
    """``forward(x, factor)`` with a float ``factor``: its entry in ``grad_input`` is ``None``."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        return self.fc(x) * factor


def _grads(module: nn.Module, x: torch.Tensor, upstream: torch.Tensor, extra: tuple, hook: Any = None):
    """x.grad and every parameter's grad after one backward pass (with ``hook`` as a full backward hook)."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    handle = module.register_full_backward_hook(hook) if hook is not None else None
    try:
        (module(x, *extra) * upstream).sum().backward()
    finally:
        if handle is not None:
            handle.remove()
    return x.grad, {name: p.grad.clone() for name, p in module.named_parameters()}


@exercise("04.1",
          hint=("返回一个与 `grad_input` 等长的新元组：`tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)`。"
                "不要原地修改（`clamp_`），也不要只返回一个张量；`grad_input` 里非张量参数对应的位置是 `None`。",
                "return a new tuple as long as `grad_input`: `tuple(None if g is None else g.clamp(-0.1, 0.1) for g in "
                "grad_input)`. Do not clamp in place (`clamp_`) and do not return a bare tensor; a non-tensor argument's "
                "entry in `grad_input` is `None`."),
          solution='''
def clip_grad_input(module, grad_input, grad_output):
    return tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)
''')
def clip_grad_input(answer) -> None:
    require_callable(answer, "clip_grad_input")
    returned, modified = [], []

    def probe(module, grad_input, grad_output):
        before = [None if g is None else g.clone() for g in (*grad_input, *grad_output)]
        result = answer(module, grad_input, grad_output)
        after = (*grad_input, *grad_output)
        modified.append(any(b is not None and not torch.equal(a, b) for a, b in zip(after, before)))
        returned.append(result)
        return result

    cases = [(3, (" `nn.Linear(3, 2)` ", "`nn.Linear(3, 2)`"), nn.Linear, (3, 2), ()),
             (7, (" `nn.Linear(5, 4)` ", "`nn.Linear(5, 4)`"), nn.Linear, (5, 4), ()),
             (10, ("以 `module(x, 2.0)` 调用的模块", "a module called as `module(x, 2.0)`"), Scaled, (4, 3), (2.0,))]
    outcomes = []
    for seed, (what_zh, what), cls, (n_in, n_out), extra in cases:
        torch.manual_seed(seed)
        module = cls(n_in, n_out)
        x, upstream = torch.randn(6, n_in), torch.randn(6, n_out) * 3
        x_plain, params_plain = _grads(module, x, upstream, extra)
        assert x_plain.abs().max() > 2 * LIMIT  # the case really needs clamping
        try:
            x_grad, params = _grads(module, x, upstream, extra, probe)
        except Exception as exc:  # the learner's hook, or what autograd made of its return value, failed
            if extra and "NoneType" in str(exc):
                raise Wrong(f"在{what_zh}上：非张量参数 `factor` 在 `grad_input` 里对应 `None`，你的钩子要让 `None` 原样保留。"
                            f"（{type(exc).__name__}: {_short(exc)}）",
                            f"on {what}: the non-tensor argument `factor` has `None` in `grad_input`; your hook must "
                            f"leave `None` entries as they are ({type(exc).__name__}: {_short(exc)}).") from exc
            raise Wrong(f"在{what_zh}上反向传播时抛出 {type(exc).__name__}: {_short(exc)}",
                        f"the backward pass through {what} raised {type(exc).__name__}: {_short(exc)}") from exc
        if any(modified):
            raise Wrong("你的钩子原地修改了 `grad_input` / `grad_output`；文档规定钩子不能修改它的参数，应返回新的张量元组。",
                        "your hook modified `grad_input` / `grad_output` in place; the documentation says a hook must "
                        "not modify its arguments: return a new tuple of tensors.")
        outcomes.append(((what_zh, what), x_plain, x_grad, params_plain, params))
    if all(r is None for r in returned) and all(torch.equal(plain, got) for _, plain, got, *_ in outcomes):
        raise NotSolved("你的钩子还没有返回任何值（返回了 None），`grad_input` 没有被替换。",
                        "your hook returns None so far, so `grad_input` is not replaced.")
    for (what_zh, what), x_plain, x_grad, params_plain, params in outcomes:
        truth = x_plain.clamp(-LIMIT, LIMIT)
        if x_grad is None or x_grad.shape != truth.shape:
            raise Wrong(f"在{what_zh}上，`x.grad` 应是形状 {tuple(truth.shape)} 的张量。",
                        f"on {what}, `x.grad` should be a tensor of shape {tuple(truth.shape)}.")
        if not torch.allclose(x_grad, truth, atol=1e-7):
            if torch.allclose(x_grad, x_plain * LIMIT):
                raise Wrong("`x.grad` 被乘以了 0.1，而不是逐元素裁剪到 [-0.1, 0.1]；用 `clamp`。",
                            "`x.grad` was multiplied by 0.1 rather than clamped element-wise to [-0.1, 0.1]; use `clamp`.")
            want = f"[{truth.min().item():.3g}, {truth.max().item():.3g}]"
            got = f"[{x_grad.min().item():.3g}, {x_grad.max().item():.3g}]"
            diff = f"{(x_grad - truth).abs().max().item():.3g}"
            raise Wrong(f"在{what_zh}上，`x.grad` 应等于不挂钩子时的 `x.grad` 逐元素裁剪到 [-0.1, 0.1]，取值范围应为 {want}；"
                        f"你的取值范围是 {got}，最大偏差 {diff}。",
                        f"on {what}, `x.grad` should be the hook-free `x.grad` clamped element-wise to [-0.1, 0.1], "
                        f"with values in {want}; yours lie in {got} (largest difference {diff}).")
        changed = [name for name in params_plain if not torch.equal(params[name], params_plain[name])]
        if changed:
            raise Wrong(f"在{what_zh}上，参数梯度 {', '.join(changed)} 变了；反向钩子只应替换 `grad_input`。",
                        f"on {what}, the parameter gradients {', '.join(changed)} changed; a backward hook should only "
                        f"replace `grad_input`.")


# ---- 04.2 predict: a pre-hook vs a backward hook that halve a gradient on fc2 --------------

class FixedModel(nn.Module):
    """Notebook 04's fc1 -> relu1 -> fc2 with hand-picked weights."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(4, 1)
        with torch.no_grad():
            self.fc1.weight.copy_(torch.tensor([[1., 2., 3.], [-4., -5., -6.], [7., 8., 9.], [-10., -11., -12.]]))
            self.fc1.bias.copy_(torch.tensor([1., 2., 3., 4.]))
            self.fc2.weight.copy_(torch.tensor([[1., 2., 3., 4.]]))
            self.fc2.bias.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu1(self.fc1(x)))


_HOOKS = ("pre-hook on fc2", "backward hook on fc2")
_GRADS = ("fc2.weight.grad", "fc1.weight.grad", "x.grad")


def _recorded_factors() -> dict[str, dict[str, float]]:
    """Run FixedModel without a hook and with each hook; the factor by which each gradient changed."""
    def run(kind: str | None) -> dict[str, torch.Tensor]:
        model, x = FixedModel(), torch.tensor([[1.0, -0.5, 2.0]], requires_grad=True)
        handle = None
        if kind == _HOOKS[0]:
            handle = model.fc2.register_full_backward_pre_hook(lambda m, grad_output: tuple(0.5 * g for g in grad_output))
        elif kind == _HOOKS[1]:
            handle = model.fc2.register_full_backward_hook(
                lambda m, grad_input, grad_output: tuple(0.5 * g for g in grad_input))
        try:
            model(x).sum().backward()
        finally:
            if handle is not None:
                handle.remove()
        return dict(zip(_GRADS, (model.fc2.weight.grad, model.fc1.weight.grad, x.grad)))

    plain = run(None)
    factors = {}
    for kind in _HOOKS:
        hooked = run(kind)
        factors[kind] = {}
        for name in _GRADS:
            k = float((hooked[name] * plain[name]).sum() / (plain[name] * plain[name]).sum())
            assert torch.allclose(hooked[name], k * plain[name])
            factors[kind][name] = round(k, 4)
    return factors


@exercise("04.2",
          hint=("反向前置钩子的返回值替换 `grad_output`：fc2 之后算的一切（包括它自己的参数梯度）都用新值。"
                "反向钩子的返回值替换 `grad_input`：只影响继续往前（往 fc1 和 x）传的梯度，fc2 自己的参数梯度已经算完了。",
                "a pre-hook's return value replaces `grad_output`: everything fc2 computes afterwards (its own parameter "
                "gradients included) uses the new value. A backward hook's return value replaces `grad_input`: it only "
                "affects what travels further back (to fc1 and x); fc2's own parameter gradients are already done."),
          solution='''
my_factors = {
    "pre-hook on fc2":      {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
    "backward hook on fc2": {"fc2.weight.grad": 1.0, "fc1.weight.grad": 0.5, "x.grad": 0.5},
}
''')
def predict_factors(answer) -> None:
    if answer is None or (isinstance(answer, Mapping) and not answer):
        raise NotSolved("把你预测的倍数填进 `my_factors`。", "fill your predicted factors into `my_factors`.")
    if not isinstance(answer, Mapping) or sorted(answer) != sorted(_HOOKS) \
            or any(not isinstance(answer[kind], Mapping) or sorted(answer[kind]) != sorted(_GRADS) for kind in _HOOKS):
        hooks, grads = ", ".join(f"`{k}`" for k in _HOOKS), ", ".join(f"`{k}`" for k in _GRADS)
        raise Wrong(f"`my_factors` 应是字典，键为 {hooks}，每个值又是键为 {grads} 的字典；保持题目给出的结构，只把 None 换成数。",
                    f"`my_factors` should be a dict with the keys {hooks}, each holding a dict with the keys {grads}; "
                    f"keep the given structure and replace each None by a number.")
    missing = [f"`{kind}` / `{name}`" for kind in _HOOKS for name in _GRADS if answer[kind][name] is None]
    if len(missing) == len(_HOOKS) * len(_GRADS):
        raise NotSolved("把 `my_factors` 里的每个 None 换成你预测的倍数（1.0 表示不变）。",
                        "replace each None in `my_factors` by the factor you predict (1.0 = unchanged).")
    if missing:
        raise NotSolved(f"还有 {len(missing)} 项是 None：{', '.join(missing)}。",
                        f"{len(missing)} {'entry is' if len(missing) == 1 else 'entries are'} still None: {', '.join(missing)}.")
    for kind in _HOOKS:
        for name in _GRADS:
            value = answer[kind][name]
            if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
                raise Wrong(f"`{kind}` / `{name}` 应是一个数（例如 1.0 表示不变），收到的是 {value!r}。",
                            f"`{kind}` / `{name}` should be a number (1.0 = unchanged), not {value!r}.")
    truth = _recorded_factors()
    for kind in _HOOKS:
        for name in _GRADS:
            if abs(answer[kind][name] - truth[kind][name]) > 1e-6:
                raise Wrong(f"挂{'反向前置钩子' if kind == _HOOKS[0] else '完整反向钩子'}时，`{name}` 乘以了 {truth[kind][name]:g}，"
                            f"你预测的是 {answer[kind][name]:g}。按第 3 节的做法记录一次看看。",
                            f"with the {kind}, `{name}` is multiplied by {truth[kind][name]:g}; you predicted "
                            f"{answer[kind][name]:g}. Record it as in section 3 to see.")


# ---- 04.3 each residual block's grad_output norm, in firing order --------------------------

def _tiny_resnet(seed: int, blocks: list[int], width: int) -> nn.Sequential:
    """A small ResNet made of torchvision's ``BasicBlock`` (``ReLU(inplace=True)``, ``out += identity``)."""
    from torchvision.models.resnet import BasicBlock

    torch.manual_seed(seed)
    layers: OrderedDict[str, nn.Module] = OrderedDict(
        conv1=nn.Conv2d(3, width, 3, padding=1, bias=False), bn1=nn.BatchNorm2d(width), relu=nn.ReLU(inplace=True))
    inplanes = width
    for i, n in enumerate(blocks, 1):
        planes, stride = width * 2 ** (i - 1), 1 if i == 1 else 2
        stage = []
        for j in range(n):
            down = None
            if j == 0 and (stride != 1 or inplanes != planes):
                down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
            stage.append(BasicBlock(inplanes, planes, stride if j == 0 else 1, down))
            inplanes = planes
        layers[f"layer{i}"] = nn.Sequential(*stage)
    layers.update(avgpool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(), fc=nn.Linear(inplanes, 3))
    return nn.Sequential(layers)


def _block_gradients(model: nn.Sequential, x: torch.Tensor) -> tuple[list[str], list[float], list[float]]:
    """Without hooks: block names in forward order, the norms of d(sum)/d(block output) and of d(sum)/d(block input)."""
    h, names, boundaries = x, [], []  # boundaries: first block's input, then each block's output
    for name, child in model.named_children():
        if name.startswith("layer"):
            for j, block in enumerate(child):
                if not boundaries:
                    boundaries.append(h)
                h = block(h)
                boundaries.append(h)
                names.append(f"{name}.{j}")
        else:
            h = child(h)
    norms = [g.norm().item() for g in torch.autograd.grad(h.sum(), boundaries)]
    return names, norms[1:], norms[:-1]  # block k's input is block k-1's output


def _as_pairs(result: Any) -> list[tuple[Any, Any]]:
    items = list(result.items()) if isinstance(result, Mapping) else result
    if not isinstance(items, (list, tuple)) or any(not isinstance(p, (list, tuple)) or len(p) != 2 for p in items):
        raise Wrong("应返回 (块名, 范数) 对组成的列表，例如 [('layer2.1', 0.19), ...]。",
                    "return a list of (block name, norm) pairs, e.g. [('layer2.1', 0.19), ...].")
    return [tuple(p) for p in items]


def _as_float(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, Real) and not isinstance(value, bool):
        return float(value)
    return None


@exercise("04.3",
          hint=("用 `model.named_modules()` 找出所有 `torchvision.models.resnet.BasicBlock`，给每个挂一个完整反向钩子，"
                "在钩子里把 `(name, grad_output[0].norm().item())` 追加到列表；块名要在循环里绑定好（`name=name` 或一个返回钩子的函数），"
                "否则每个钩子看到的都是最后一个名字。然后在 `HookScope` 里运行 `model(x).sum().backward()`。",
                "find every `torchvision.models.resnet.BasicBlock` with `model.named_modules()`, give each a full backward "
                "hook that appends `(name, grad_output[0].norm().item())` to a list; bind the name inside the loop "
                "(`name=name` or a function that returns the hook), or every hook sees the last name. Then run "
                "`model(x).sum().backward()` inside a `HookScope`."),
          solution='''
def block_grad_norms(model, x):
    from torchvision.models.resnet import BasicBlock
    norms = []

    def record(name):
        def hook(module, grad_input, grad_output):
            norms.append((name, grad_output[0].norm().item()))
        return hook

    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_full_backward_hook(record(name)))
        model(x).sum().backward()
    return norms
''')
def block_grad_norms(answer) -> None:
    require_callable(answer, "block_grad_norms")
    for seed, blocks, width in [(0, [2, 2], 4), (1, [1, 2, 1], 4), (2, [2, 1, 1, 2], 3)]:
        model = _tiny_resnet(seed, blocks, width)
        torch.manual_seed(seed + 100)
        x = torch.randn(2, 3, 16, 16)
        forward_names, out_norms, in_norms = _block_gradients(model, x)
        names, norms = forward_names[::-1], out_norms[::-1]  # backward reaches the last block first
        with no_hooks_left(model):
            result = call_answer(answer, model, x)
        pairs = _as_pairs(result)
        got_names = [p[0] for p in pairs]
        shape_zh, shape = f"各阶段块数为 {blocks}", f"blocks per stage {blocks}"
        if not pairs:
            raise Wrong("返回的列表是空的：钩子没有触发。挂在块上了吗？运行 `model(x).sum().backward()` 了吗？",
                        "the list is empty: no hook fired. Are the hooks on the blocks, and did you run "
                        "`model(x).sum().backward()`?")
        if len(set(map(str, got_names))) == 1 and len(names) > 1 and len(pairs) == len(names):
            raise Wrong(f"每一项的名字都是 {got_names[0]!r}：循环里的 lambda 在调用时才读取 `name`，那时它已是最后一个值。"
                        f"用默认参数 `name=name` 或一个返回钩子的函数把名字绑定住。",
                        f"every entry is named {got_names[0]!r}: a lambda in a loop reads `name` when it is called, "
                        f"when it holds the last value. Bind it with a default argument `name=name` or a function "
                        f"that returns the hook.")
        if got_names != names:
            if sorted(map(str, got_names)) == sorted(names):
                raise Wrong(f"块名对了，但顺序不是触发顺序（{shape_zh}）：反向传播从最后一个块开始，应为 {names}，"
                            f"你的是 {got_names}。",
                            f"the right blocks, but not in firing order ({shape}): the backward pass starts at the last "
                            f"block, so it is {names}; yours is {got_names}.")
            raise Wrong(f"对{shape_zh}的网络，触发顺序中的块应为 {names}（`named_modules()` 给出的名字，只含 `BasicBlock`），"
                        f"你的是 {got_names}。",
                        f"for a network with {shape}, the blocks in firing order are {names} (names as "
                        f"`named_modules()` gives them, `BasicBlock`s only); yours are {got_names}.")
        for (name, value), norm, in_norm in zip(pairs, norms, in_norms[::-1]):
            got = _as_float(value)
            if got is None:
                raise Wrong(f"{name} 的范数应是一个数（`.norm().item()`），收到的是 {type(value).__name__}。",
                            f"the norm of {name} should be a number (`.norm().item()`), not a {type(value).__name__}.")
            if not math.isclose(got, norm, rel_tol=1e-4, abs_tol=1e-7):
                if math.isclose(got, in_norm, rel_tol=1e-4, abs_tol=1e-7):
                    raise Wrong(f"{name}：你记录的是 `grad_input[0]`（对块输入的梯度）的范数 {got:.4g}；题目要的是 "
                                f"`grad_output[0]`，即 {norm:.4g}。",
                                f"{name}: you recorded the norm of `grad_input[0]` (the gradient w.r.t. the block's "
                                f"input), {got:.4g}; the task asks for `grad_output[0]`, which is {norm:.4g}.")
                raise Wrong(f"{name}：`grad_output[0]` 的范数应为 {norm:.4g}，你的是 {got:.4g}。",
                            f"{name}: the norm of `grad_output[0]` should be {norm:.4g}; yours is {got:.4g}.")
