"""Exercises of notebook 04 (module backward hooks).

04.1 ``clip_grad_input(module, grad_input, grad_output)``: a full backward hook that clamps ``grad_input``.
04.2 ``my_factors``: predict how a pre-hook and a backward hook on ``fc2`` that halve a gradient scale three gradients.
04.3 ``block_grad_norms(model, x)``: the norm of each residual block's ``grad_output[0]``, in firing order.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from numbers import Real
from typing import Any

import torch
from torch import nn

from . import exercise
from ._support import NotSolved, Wrong, expect, expect_no_slip, fail, run, short_error

LIMIT = 0.1


# ---- 04.1 clamp grad_input in a full backward hook -------------------------------------------------------

class Scaled(nn.Module):
    """``forward(x, factor)`` with a float ``factor``: its entry in ``grad_input`` is ``None``."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x: torch.Tensor, factor: float) -> torch.Tensor:
        return self.fc(x) * factor


_GRAD_INPUT_CASES: list[tuple[int, tuple[str, str], Callable[[int, int], nn.Module], tuple[int, int], tuple]] = [
    (3, (" `nn.Linear(3, 2)` ", "`nn.Linear(3, 2)`"), nn.Linear, (3, 2), ()),
    (7, (" `nn.Linear(5, 4)` ", "`nn.Linear(5, 4)`"), nn.Linear, (5, 4), ()),
    (10, ("以 `module(x, 2.0)` 调用的模块", "a module called as `module(x, 2.0)`"), Scaled, (4, 3), (2.0,))]


def _grads(module: nn.Module, x: torch.Tensor, upstream: torch.Tensor, extra: tuple, hook: Any = None
           ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """x.grad and every parameter's grad after one backward pass (with ``hook`` as a full backward hook)."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    handle = module.register_full_backward_hook(hook) if hook is not None else None
    try:
        (module(x, *extra) * upstream).sum().backward()
    finally:
        if handle is not None:
            handle.remove()
    return x.grad, {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}


def _hooked_grads(probe: Callable, case: tuple) -> tuple[torch.Tensor, torch.Tensor | None, dict, dict]:
    """One case, without and with the learner's hook (``probe``): the two ``x.grad`` and parameter grads."""
    seed, (what_zh, what), cls, (n_in, n_out), extra = case
    torch.manual_seed(seed)
    module = cls(n_in, n_out)
    x, upstream = torch.randn(6, n_in), torch.randn(6, n_out) * 3
    x_plain, params_plain = _grads(module, x, upstream, extra)
    assert x_plain is not None and x_plain.abs().max() > 2 * LIMIT  # the case really needs clamping
    try:
        x_grad, params = _grads(module, x, upstream, extra, probe)
    except Exception as exc:  # the learner's hook, or what autograd made of its return value, failed
        why = f"{type(exc).__name__}: {short_error(exc)}"
        expect(not extra or "NoneType" not in str(exc), "none-entry",
               f"在{what_zh}上：非张量参数 `factor` 在 `grad_input` 里对应 `None`，你的钩子要让 `None` 原样保留。（{why}）",
               f"on {what}: the non-tensor argument `factor` has `None` in `grad_input`; your hook must leave `None` "
               f"entries as they are ({why}).")
        fail("backward-raised", f"在{what_zh}上反向传播时抛出 {why}", f"the backward pass through {what} raised {why}")
    return x_plain, x_grad, params_plain, params


def _expect_clamped(what_zh: str, what: str, x_plain: torch.Tensor, x_grad: torch.Tensor | None,
                    params_plain: dict, params: dict) -> None:
    truth = x_plain.clamp(-LIMIT, LIMIT)
    expect(x_grad is not None and x_grad.shape == truth.shape, "x-grad-shape",
           f"在{what_zh}上，`x.grad` 应是形状 {tuple(truth.shape)} 的张量。",
           f"on {what}, `x.grad` should be a tensor of shape {tuple(truth.shape)}.")
    assert x_grad is not None  # for mypy: just checked
    if not torch.allclose(x_grad, truth, atol=1e-7):
        expect(not torch.allclose(x_grad, x_plain * LIMIT), "scaled-not-clamped",
               "`x.grad` 被乘以了 0.1，而不是逐元素裁剪到 [-0.1, 0.1]；用 `clamp`。",
               "`x.grad` was multiplied by 0.1 rather than clamped element-wise to [-0.1, 0.1]; use `clamp`.")
        want, got = (f"[{t.min().item():.3g}, {t.max().item():.3g}]" for t in (truth, x_grad))
        diff = f"{(x_grad - truth).abs().max().item():.3g}"
        fail("clip-values", f"在{what_zh}上，`x.grad` 应等于不挂钩子时的 `x.grad` 逐元素裁剪到 [-0.1, 0.1]，取值范围应为 {want}；"
             f"你的取值范围是 {got}，最大偏差 {diff}。", f"on {what}, `x.grad` should be the hook-free `x.grad` clamped "
             f"element-wise to [-0.1, 0.1], with values in {want}; yours lie in {got} (largest difference {diff}).")
    # bitwise: same computation, the parameters' gradients are computed before a backward hook can run
    changed = [n for n in params_plain if n not in params or not torch.equal(params[n], params_plain[n])]
    expect(not changed, "param-grads-changed", f"在{what_zh}上，参数梯度 {', '.join(changed)} 变了；反向钩子只应替换 `grad_input`。",
           f"on {what}, the parameter gradients {', '.join(changed)} changed; a backward hook should only replace "
           "`grad_input`.")


def _made_from(returned: Any, grads: tuple) -> bool:
    """``returned`` is a sequence as long as ``grads`` whose tensors are ``grads``' entries, clamped or not."""
    if not isinstance(returned, (tuple, list)) or len(returned) != len(grads) or all(r is None for r in returned):
        return False
    return all((r is None) == (g is None) and (r is None or isinstance(r, torch.Tensor) and r.shape == g.shape and (
        torch.allclose(r, g.clamp(-LIMIT, LIMIT)) or torch.allclose(r, g))) for r, g in zip(returned, grads))


@exercise("04.1", answer="clip_grad_input")
def clip_grad_input(answer: Any) -> None:
    returned: list = []
    modified: list[bool] = []
    from_output: list[bool] = []

    def probe(module: nn.Module, grad_input: tuple, grad_output: tuple) -> Any:
        before = [None if g is None else g.clone() for g in (*grad_input, *grad_output)]
        returned.append(answer(module, grad_input, grad_output))
        # bitwise: copy, clones taken before the answer ran
        modified.append(any(b is not None and not torch.equal(a, b) for a, b in zip((*grad_input, *grad_output), before)))
        from_output.append(_made_from(returned[-1], grad_output) and not _made_from(returned[-1], grad_input))
        return returned[-1]

    outcomes = []
    for case in _GRAD_INPUT_CASES:
        calls = len(returned)
        try:
            outcomes.append(_hooked_grads(probe, case))
        except Wrong:                           # autograd refused what the hook returned: say what that was
            last = returned[-1] if len(returned) > calls else None
            if isinstance(last, torch.Tensor):
                fail("not-a-tuple", f"你的钩子返回了一个张量（形状 {tuple(last.shape)}），autograd 把它当作序列按第一维拆开。"
                     "要返回与 `grad_input` 等长的元组，例如 `tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)`。",
                     f"your hook returned a bare tensor (shape {tuple(last.shape)}), which autograd takes apart along its "
                     "first dimension as a sequence. Return a tuple as long as `grad_input`, e.g. `tuple(None if g is "
                     "None else g.clamp(-0.1, 0.1) for g in grad_input)`.")
            expect(not (len(returned) > calls and from_output[-1]), "from-grad-output",
                   "你的钩子返回的是由 `grad_output`（模块输出处的梯度）做出的张量，而返回值会替换 `grad_input`，形状对不上。"
                   "要裁剪的是 `grad_input` 的各项。",
                   "your hook returned tensors made from `grad_output` (the gradient at the module's output), but what "
                   "a backward hook returns replaces `grad_input`, whose shapes differ. Clamp the entries of `grad_input`.")
            raise
        expect(not any(modified), "in-place",
               "你的钩子原地修改了 `grad_input` / `grad_output`；文档规定钩子不能修改它的参数，应返回新的张量元组。",
               "your hook modified `grad_input` / `grad_output` in place; the documentation says a hook must not "
               "modify its arguments: return a new tuple of tensors.")
    # bitwise: same computation, a hook returning None leaves the same backward
    if all(r is None for r in returned) and all(got is not None and torch.equal(plain, got) for plain, got, *_ in outcomes):
        raise NotSolved("你的钩子还没有返回任何值（返回了 None），`grad_input` 没有被替换。",
                        "your hook returns None so far, so `grad_input` is not replaced.", reason="hook-returned-none")
    for (_, (what_zh, what), *_), outcome in zip(_GRAD_INPUT_CASES, outcomes):
        _expect_clamped(what_zh, what, *outcome)


# ---- 04.2 predict: a pre-hook vs a backward hook that halve a gradient on fc2 ----------------------------

class FixedModel(nn.Module):
    """Notebook 04's fc1 -> relu1 -> fc2 with hand-picked weights."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.relu1, self.fc2 = nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)
        with torch.no_grad():
            self.fc1.weight.copy_(torch.tensor([[1., 2., 3.], [-4., -5., -6.], [7., 8., 9.], [-10., -11., -12.]]))
            self.fc1.bias.copy_(torch.tensor([1., 2., 3., 4.]))
            self.fc2.weight.copy_(torch.tensor([[1., 2., 3., 4.]]))
            self.fc2.bias.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu1(self.fc1(x)))


_HOOKS = ("pre-hook on fc2", "backward hook on fc2")
_GRADS = ("fc2.weight.grad", "fc1.weight.grad", "x.grad")


def _halve(grads: Any) -> tuple:
    return tuple(0.5 * g for g in grads)


_HALVING: dict[str, Callable[[nn.Module], Any]] = {  # each kind of hook, halving the gradient it may replace
    _HOOKS[0]: lambda fc2: fc2.register_full_backward_pre_hook(lambda m, grad_output: _halve(grad_output)),
    _HOOKS[1]: lambda fc2: fc2.register_full_backward_hook(lambda m, grad_input, grad_output: _halve(grad_input)),
}


def _fixed_grads(kind: str | None) -> dict[str, torch.Tensor]:
    """The three gradients of FixedModel, without a hook or with the ``kind`` of hook that halves a gradient."""
    model, x = FixedModel(), torch.tensor([[1.0, -0.5, 2.0]], requires_grad=True)
    handle = _HALVING[kind](model.fc2) if kind is not None else None
    try:
        model(x).sum().backward()
    finally:
        if handle is not None:
            handle.remove()
    return dict(zip(_GRADS, (model.fc2.weight.grad, model.fc1.weight.grad, x.grad)))  # type: ignore[arg-type]


def _recorded_factors() -> dict[str, dict[str, float]]:
    """Run FixedModel without a hook and with each hook; the factor by which each gradient changed."""
    plain, factors = _fixed_grads(None), {}
    for kind in _HOOKS:
        hooked = _fixed_grads(kind)
        ks = {name: float((hooked[name] * plain[name]).sum() / (plain[name] * plain[name]).sum()) for name in _GRADS}
        assert all(torch.allclose(hooked[name], k * plain[name]) for name, k in ks.items())
        factors[kind] = {name: round(k, 4) for name, k in ks.items()}
    return factors


@exercise("04.2", answer="my_factors", data=True)
def predict_factors(answer: Any) -> None:
    if answer is None or (isinstance(answer, Mapping) and not answer):
        raise NotSolved("把你预测的倍数填进 `my_factors`。", "fill your predicted factors into `my_factors`.")
    hooks, grads = ", ".join(f"`{k}`" for k in _HOOKS), ", ".join(f"`{k}`" for k in _GRADS)
    expect(isinstance(answer, Mapping) and sorted(answer) == sorted(_HOOKS) and all(
        isinstance(answer[kind], Mapping) and sorted(answer[kind]) == sorted(_GRADS) for kind in _HOOKS), "structure",
        f"`my_factors` 应是字典，键为 {hooks}，每个值又是键为 {grads} 的字典；保持题目给出的结构，只把 None 换成数。",
        f"`my_factors` should be a dict with the keys {hooks}, each holding a dict with the keys {grads}; keep the "
        "given structure and replace each None by a number.")
    entries = [(kind, name, answer[kind][name]) for kind in _HOOKS for name in _GRADS]
    missing = [f"`{kind}` / `{name}`" for kind, name, value in entries if value is None]
    if len(missing) == len(entries):
        raise NotSolved("把 `my_factors` 里的每个 None 换成你预测的倍数（1.0 表示不变）。",
                        "replace each None in `my_factors` by the factor you predict (1.0 = unchanged).")
    if missing:
        raise NotSolved(f"还有 {len(missing)} 项是 None：{', '.join(missing)}。", f"{len(missing)} "
                        f"{'entry is' if len(missing) == 1 else 'entries are'} still None: {', '.join(missing)}.",
                        reason="some-none")
    for kind, name, value in entries:
        expect(isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value), "not-a-number",
               f"`{kind}` / `{name}` 应是一个数（例如 1.0 表示不变），收到的是 {value!r}。",
               f"`{kind}` / `{name}` should be a number (1.0 = unchanged), not {value!r}.")
    truth = _recorded_factors()
    for kind, name, value in entries:
        expect(abs(value - truth[kind][name]) <= 1e-6, "factor",
               f"挂{'反向前置钩子' if kind == _HOOKS[0] else '完整反向钩子'}时，`{name}` 乘以了 {truth[kind][name]:g}，"
               f"你预测的是 {value:g}。按第 3 节的做法记录一次看看。",
               f"with the {kind}, `{name}` is multiplied by {truth[kind][name]:g}; you predicted {value:g}. Record it "
               "as in section 3 to see.")


# ---- 04.3 each residual block's grad_output norm, in firing order ----------------------------------------

_RESNET_CASES = [(0, [2, 2], 4), (1, [1, 2, 1], 4), (2, [2, 1, 1, 2], 3)]  # seed, blocks per stage, width


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
    h, names = x, []
    boundaries: list[torch.Tensor] = []  # the first block's input, then each block's output
    for name, child in model.named_children():
        if not name.startswith("layer"):
            h = child(h)
            continue
        for j, block in enumerate(child.children()):
            boundaries += [] if boundaries else [h]
            h = block(h)
            boundaries.append(h)
            names.append(f"{name}.{j}")
    norms = [g.norm().item() for g in torch.autograd.grad(h.sum(), boundaries)]
    return names, norms[1:], norms[:-1]  # block k's input is block k-1's output


def _as_pairs(result: Any) -> list[tuple[Any, Any]]:
    items = list(result.items()) if isinstance(result, Mapping) else result
    expect(isinstance(items, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in items),
           "not-pairs", "应返回 (块名, 范数) 对组成的列表，例如 [('layer2.1', 0.19), ...]。",
           "return a list of (block name, norm) pairs, e.g. [('layer2.1', 0.19), ...].")
    return [tuple(p) for p in items]


def _expect_norm(name: str, value: Any, norm: float, in_norm: float) -> None:
    got = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
    expect(isinstance(got, Real) and not isinstance(got, bool), "norm-not-a-number",
           f"{name} 的范数应是一个数（`.norm().item()`），收到的是 {type(value).__name__}。",
           f"the norm of {name} should be a number (`.norm().item()`), not a {type(value).__name__}.")
    if math.isclose(got, norm, rel_tol=1e-4, abs_tol=1e-7):
        return
    expect(not math.isclose(got, in_norm, rel_tol=1e-4, abs_tol=1e-7), "grad-input-norm",
           f"{name}：你记录的是 `grad_input[0]`（对块输入的梯度）的范数 {got:.4g}；题目要的是 `grad_output[0]`，即 {norm:.4g}。",
           f"{name}: you recorded the norm of `grad_input[0]` (the gradient w.r.t. the block's input), {got:.4g}; the "
           f"task asks for `grad_output[0]`, which is {norm:.4g}.")
    expect_no_slip(got, norm, (f"{name}：`grad_output[0]` 的范数", f"{name}: the norm of `grad_output[0]`"))
    fail("norm-values", f"{name}：`grad_output[0]` 的范数应为 {norm:.4g}，你的是 {got:.4g}。",
         f"{name}: the norm of `grad_output[0]` should be {norm:.4g}; yours is {got:.4g}.")


@exercise("04.3", answer="block_grad_norms")
def block_grad_norms(answer: Any) -> None:
    for seed, blocks, width in _RESNET_CASES:
        model = _tiny_resnet(seed, blocks, width)
        torch.manual_seed(seed + 100)
        x = torch.randn(2, 3, 16, 16)
        forward_names, out_norms, in_norms = _block_gradients(model, x)
        names, norms = forward_names[::-1], out_norms[::-1]  # backward reaches the last block first
        pairs = _as_pairs(run(answer, model, x, leak_free=(model,)))
        got_names = [p[0] for p in pairs]
        expect(pairs, "no-hook-fired", "返回的列表是空的：钩子没有触发。挂在块上了吗？运行 `model(x).sum().backward()` 了吗？",
               "the list is empty: no hook fired. Are the hooks on the blocks, and did you run `model(x).sum().backward()`?")
        expect(len(set(map(str, got_names))) > 1 or len(names) == 1 or len(pairs) != len(names), "late-binding",
               f"每一项的名字都是 {got_names[0]!r}：循环里的 lambda 在调用时才读取 `name`，那时它已是最后一个值。"
               "用默认参数 `name=name` 或一个返回钩子的函数把名字绑定住。",
               f"every entry is named {got_names[0]!r}: a lambda in a loop reads `name` when it is called, when it holds "
               "the last value. Bind it with a default argument `name=name` or a function that returns the hook.")
        expect(got_names == names or sorted(map(str, got_names)) != sorted(names), "firing-order",
               f"块名对了，但顺序不是触发顺序（各阶段块数为 {blocks}）：反向传播从最后一个块开始，应为 {names}，你的是 {got_names}。",
               f"the right blocks, but not in firing order (blocks per stage {blocks}): the backward pass starts at the "
               f"last block, so it is {names}; yours is {got_names}.")
        expect(got_names == names, "block-names",
               f"对各阶段块数为 {blocks} 的网络，触发顺序中的块应为 {names}（`named_modules()` 给出的名字，只含 `BasicBlock`），"
               f"你的是 {got_names}。", f"for a network with blocks per stage {blocks}, the blocks in firing order are "
               f"{names} (names as `named_modules()` gives them, `BasicBlock`s only); yours are {got_names}.")
        for (name, value), norm, in_norm in zip(pairs, norms, in_norms[::-1]):
            _expect_norm(name, value, norm, in_norm)
