"""Exercises of notebook 05 (applications): input shapes, exploding gradients, Grad-CAM for any class.

Every checker builds tiny seeded models (no training), computes the truth without hooks, and runs the learner's
function on them; each check takes a few milliseconds on a CPU.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...clip import clip_grad_norm_hooks
from . import exercise
from ._support import Wrong, expect, fail, run

Rows = list[tuple[str, tuple[int, ...]]]


# ---- 05.1 the input shape of every top-level call ----------------------------------------------------------

class _Branchy(nn.Module):
    """Forward calls the children in another order than they are registered in; ``act`` runs twice."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.stem, self.body, self.act, self.head = (nn.Linear(d_in, hidden), nn.Linear(hidden, hidden), nn.ReLU(),
                                                     nn.Linear(hidden, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.stem(x))
        return self.head(self.act(h + self.body(h)))


@torch.no_grad()
def _sequential_rows(model: nn.Sequential, x: torch.Tensor) -> tuple[Rows, Rows]:
    """(name, input shape) and (name, output shape) per child, by running the children one by one."""
    inputs, outputs = [], []
    for name, child in model.named_children():
        inputs.append((name, tuple(x.shape)))
        x = child(x)
        outputs.append((name, tuple(x.shape)))
    return inputs, outputs


def _input_shape_cases() -> Iterator[tuple[str, nn.Module, torch.Tensor, Rows, Rows]]:
    """(label, model, x, true rows, output-shape rows) for three fresh models."""
    torch.manual_seed(21)
    mlp, x = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4), nn.Tanh(), nn.Linear(4, 3)), torch.randn(5, 6)
    yield ("MLP", mlp, x, *_sequential_rows(mlp, x))
    torch.manual_seed(22)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    x = torch.randn(2, 3, 8, 8)
    yield ("CNN", cnn, x, *_sequential_rows(cnn, x))
    torch.manual_seed(23)
    branchy, x, h = _Branchy(7, 9, 2), torch.randn(3, 7), (3, 9)
    yield ("Branchy (forward calls stem, act, body, act, head)", branchy, x,
           [("stem", (3, 7)), ("act", h), ("body", h), ("act", h), ("head", h)],
           [("stem", h), ("act", h), ("body", h), ("act", h), ("head", (3, 2))])


def _row(item: Any) -> tuple[str, tuple[int, ...]] | None:
    """``(name, shape)`` with the shape as a tuple of ints, or None when ``item`` is not such a row."""
    try:
        name, shape = item
        return (name, tuple(int(d) for d in shape)) if isinstance(name, str) else None
    except (TypeError, ValueError):
        return None


def _as_rows(result: Any) -> Rows:
    expect(not isinstance(result, dict), "dict-not-rows",
           "请返回 (名字, 形状) 对的列表，每次调用一行；字典里每个名字只能出现一次，而一个子模块可能被调用两次。",
           "return a list of (name, shape) pairs, one per call: a dict holds each name once, but a child can be "
           "called twice.")
    rows = [_row(item) for item in result] if isinstance(result, Iterable) else [None]
    expect(None not in rows, "not-rows", "应返回一个列表，每一行是 `(名字, 形状)`，例如 `(\"0\", (5, 6))`。",
           "return a list whose rows are `(name, shape)` pairs, e.g. `(\"0\", (5, 6))`.")
    shape = next((shape for _, shape in result if not isinstance(shape, tuple)), None)  # torch.Size is a tuple
    expect(shape is None, "shape-not-tuple",
           f"每个形状应是整数元组，例如 `(5, 6)`；你给出的是 {type(shape).__name__} {shape!r}。用 `tuple(args[0].shape)`。",
           f"each shape should be a tuple of ints, e.g. `(5, 6)`; yours is a {type(shape).__name__}, {shape!r}. Use "
           "`tuple(args[0].shape)`.")
    return rows  # type: ignore[return-value]  # no None: just checked


def _wrong_rows(label: str, children: set[str], rows: Rows, truth: Rows, output_rows: Rows) -> None:
    """Why ``rows`` (not ``truth``) are wrong."""
    names, first = {name for name, _ in rows}, rows[0][0] if rows else ""
    expect(rows != output_rows, "output-shapes",
           f"在模型 {label} 上你记录的是每个子模块的**输出**形状；输入形状要用 `register_forward_pre_hook`。",
           f"on the model {label} you recorded each child's *output* shape; the input shape comes from "
           "`register_forward_pre_hook`.")
    expect(not (len(rows) > 1 and len(names) == 1 < len({n for n, _ in truth})), "late-binding",
           f"每一行的名字都是 `{first}`：闭包读的是循环变量，钩子运行时它已经是最后一个值（延迟绑定）。"
           "注册时用默认参数 `name=name` 绑定名字。",
           f"every row is named `{first}`: the closure reads the loop variable, which holds its last value by "
           "the time the hooks run (late binding). Bind it with a default argument `name=name` when registering.")
    strangers = sorted(names - children)
    expect(not strangers, "not-top-level",
           f"在模型 {label} 上出现了不是顶层子模块的名字 {strangers}；只对 `model.named_children()` 注册"
           "（`named_modules()` 还包括模型本身 `''` 和更深的子模块）。",
           f"on the model {label} your rows name {strangers}, which are not top-level children; register only on "
           "`model.named_children()` (`named_modules()` also yields the model itself, `''`, and deeper submodules).")
    expect(len(rows) == len(truth), "call-count",
           f"模型 {label} 的一次前向调用了 {len(truth)} 次顶层子模块，你的列表有 {len(rows)} 行。每次**调用**一行，按调用发生的顺序。",
           f"one forward pass of the model {label} makes {len(truth)} calls of top-level children; your list has "
           f"{len(rows)} rows. One row per *call*, in the order the calls happen.")
    k, row, true_row = next((k, r, t) for k, (r, t) in enumerate(zip(rows, truth), start=1) if r != t)
    fail("row", f"模型 {label} 的第 {k} 次调用应是 {true_row}，你的列表给出 {row}。",
         f"on the model {label}, call {k} should be {true_row}; your list has {row}.")


@exercise("05.1", answer="input_shapes")
def input_shapes(answer: Any) -> None:
    for label, model, x, truth, output_rows in _input_shape_cases():
        rows = _as_rows(run(answer, model, x, leak_free=(model,)))
        if rows != truth:
            _wrong_rows(label, {name for name, _ in model.named_children()}, rows, truth, output_rows)


# ---- 05.2 per-layer gradient norms: exploding gradients ----------------------------------------------------

# seed, depth, width, input size, batch, weight scale, clip hooks attached (max_norm)
_NORM_CASES = [(31, 4, 8, 5, 6, 1.0, None), (32, 6, 12, 7, 9, 2.0, None), (33, 5, 10, 4, 8, 2.0, 1.0)]


def _deep_relu(seed: int, depth: int, width: int, d_in: int, scale: float) -> nn.Sequential:
    """Section 5's ReLU MLP (Kaiming init, zero biases) with the hidden weights multiplied by ``scale``."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for fan_in in [d_in] + [width] * (depth - 1):
        linear = nn.Linear(fan_in, width)
        nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
        nn.init.zeros_(linear.bias)
        with torch.no_grad():
            linear.weight.mul_(scale)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width if depth else d_in, 2))


def _true_norms(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor, max_norm: float | None) -> list[float]:
    """Per-Linear gradient norm after one plain backward (no hooks), optionally clipped per parameter."""
    F.cross_entropy(model(x), y).backward()

    def clipped(g: Any) -> torch.Tensor:
        return g if max_norm is None else g * torch.clamp(max_norm / (g.norm() + 1e-6), max=1.0)
    return [sum(float(clipped(p.grad).norm()) ** 2 for p in (layer.weight, layer.bias)) ** 0.5
            for layer in model if isinstance(layer, nn.Linear)]


def _wrong_targets(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], list[float]]:
    """What two usual mistakes give, hook-free on a fresh copy: the norm of each Linear's output gradient (the
    ``grad_output`` of a module backward hook) and the norm of its parameters themselves (not of their ``.grad``)."""
    linears, outputs, h = [layer for layer in model if isinstance(layer, nn.Linear)], [], x
    for layer in model:
        h = layer(h)
        outputs += [h] if isinstance(layer, nn.Linear) else []
    at_outputs = torch.autograd.grad(F.cross_entropy(h, y), outputs)
    return ([float(g.norm()) for g in at_outputs],
            [float(torch.cat([p.detach().flatten() for p in (layer.weight, layer.bias)]).norm()) for layer in linears])


def _floats(result: Any) -> list[float] | None:
    values = result.detach().flatten().tolist() if isinstance(result, torch.Tensor) else result
    try:
        return [float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in values]
    except (TypeError, ValueError):
        return None


def _expect_norms(result: Any, truth: list[float], what: tuple[str, str],
                  wrong_targets: tuple[list[float], list[float]]) -> None:
    """``wrong_targets``: what the norms of the output gradients and of the parameters themselves would be."""
    expect(not isinstance(result, dict), "dict-not-list",
           "请返回浮点数列表（每层一个），不是字典；用 `GradientMonitor` 时可以写 `[v[0] for v in monitor.norms().values()]`。",
           "return a list of floats (one per layer), not a dict; with `GradientMonitor` write "
           "`[v[0] for v in monitor.norms().values()]`.")
    norms = _floats(result)
    expect(norms is not None, "not-floats", f"应返回浮点数列表（每个 `nn.Linear` 一个），收到的是 {type(result).__name__}。",
           f"return a list of floats (one per `nn.Linear`), not a {type(result).__name__}.")
    assert norms is not None  # for mypy: just checked
    per_param = ("（每个参数一个？权重和偏置要合成一个范数）", " (one per parameter? combine weight and bias into one norm)")
    expect(len(norms) == len(truth), "layer-count", f"{what[0]}有 {len(truth)} 个 `nn.Linear` 层，你返回了 {len(norms)} 个值"
           f"{per_param[0] if len(norms) == 2 * len(truth) else ''}。", f"{what[1]} has {len(truth)} `nn.Linear` layers; "
           f"you returned {len(norms)} values{per_param[1] if len(norms) == 2 * len(truth) else ''}.")
    if torch.allclose(torch.tensor(norms), torch.tensor(truth), rtol=1e-4, atol=1e-7):
        return
    expect(not torch.allclose(torch.tensor(norms[::-1]), torch.tensor(truth), rtol=1e-4, atol=1e-7), "reversed",
           "数值对了，顺序反了：钩子按反向传播的顺序（从输出到输入）触发，答案要按模型里从输入到输出的顺序。",
           "right numbers, reversed: hooks fire in backward order (output to input), but the answer goes in model "
           "order, from input to output.")
    at_outputs, of_weights = wrong_targets
    expect(not torch.allclose(torch.tensor(norms), torch.tensor(at_outputs), rtol=1e-4, atol=1e-7), "grad-output-norm",
           f"在{what[0]}上，你记录的是每层**输出**处梯度（完整反向钩子的 `grad_output`）的范数，不是参数梯度的范数。"
           "要的是权重和偏置的 `.grad`：用 `register_post_accumulate_grad_hook` 或 `hooklab.GradientMonitor`。",
           f"on {what[1]}, you recorded the norm of the gradient at each layer's *output* (`grad_output` of a full "
           "backward hook), not of its parameters' gradients. The task asks for the weight's and the bias's `.grad`: "
           "use `register_post_accumulate_grad_hook` or `hooklab.GradientMonitor`.")
    expect(not torch.allclose(torch.tensor(norms), torch.tensor(of_weights), rtol=1e-4, atol=1e-7), "weight-norm",
           f"在{what[0]}上，你算的是参数本身（权重和偏置的数值）的范数，不是它们梯度的范数：post-accumulate 钩子收到的是参数，"
           "梯度在它的 `.grad` 里。",
           f"on {what[1]}, you took the norm of the parameters themselves (the values of weight and bias), not of "
           "their gradients: a post-accumulate-grad hook receives the parameter, whose gradient is its `.grad`.")
    k = next(i for i, (a, b) in enumerate(zip(norms, truth)) if not abs(a - b) <= 1e-4 * abs(b) + 1e-7)  # nan too
    fail("norm-values", f"在{what[0]}上，第 {k + 1} 个 `nn.Linear` 的梯度范数（权重和偏置合起来，即 sqrt(|dW|² + |db|²)）"
         f"应为 {truth[k]:.4g}，你的函数给出 {norms[k]:.4g}。", f"on {what[1]}, the gradient norm of `nn.Linear` number "
         f"{k + 1} (weight and bias together, sqrt(|dW|^2 + |db|^2)) is {truth[k]:.4g}; your function gave {norms[k]:.4g}.")


@exercise("05.2", answer="grad_norms")
def grad_norms(answer: Any) -> None:
    for seed, depth, width, d_in, batch, scale, max_norm in _NORM_CASES:
        torch.manual_seed(seed + 100)
        x, y = torch.randn(batch, d_in), torch.randint(0, 2, (batch,))
        truth = _true_norms(_deep_relu(seed, depth, width, d_in, scale), x, y, max_norm)
        model = _deep_relu(seed, depth, width, d_in, scale)
        clip = clip_grad_norm_hooks(model, max_norm) if max_norm is not None else None
        what = (f"{depth} 个隐藏层、宽 {width}、权重是 Kaiming 的 {scale:g} 倍"
                + (f"、挂着 `clip_grad_norm_hooks(model, {max_norm:g})`" if clip else "") + " 的网络",
                f"a network with {depth} hidden layers of width {width}, weights {scale:g}x the Kaiming scale"
                + (f", with `clip_grad_norm_hooks(model, {max_norm:g})` attached" if clip else ""))
        try:
            result = run(answer, model, x.clone(), y.clone(), leak_free=(model,))
        finally:
            if clip is not None:
                clip.remove()
        _expect_norms(result, truth, what, _wrong_targets(_deep_relu(seed, depth, width, d_in, scale), x, y))


# ---- 05.3 Grad-CAM for any class ---------------------------------------------------------------------------

# seed, channels, classes, batch, image size, layer, which target
_CAM_CASES = [(41, (4, 6), 2, 4, 12, 4, "predicted"), (42, (4, 8), 2, 5, 16, 4, "not predicted"),
              (43, (3, 5), 3, 6, 10, 3, "mixed")]
_TARGETS = {"predicted": ("目标是预测类别", "targets = the predicted classes"),
            "not predicted": ("目标是**没有**被预测的类别", "targets = the classes *not* predicted"),
            "mixed": ("每张图的目标类别各不相同", "a different target class per image")}


def _small_cnn(seed: int, c1: int, c2: int, classes: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c1, c2, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c2, classes))


def _true_cam(model: nn.Sequential, index: int, x: torch.Tensor, target: torch.Tensor,
              relu: bool = True) -> torch.Tensor:
    """Grad-CAM without hooks: cut the Sequential after ``index`` and differentiate w.r.t. the cut."""
    activation = model[:index + 1](x).detach().requires_grad_(True)
    scores = model[index + 1:](activation)
    grad, = torch.autograd.grad(scores.gather(1, target[:, None]).sum(), activation)
    cam = (grad.mean(dim=(2, 3), keepdim=True) * activation).sum(dim=1).detach()
    return F.relu(cam) if relu else cam


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def _expect_cam(result: Any, x: torch.Tensor, truth: torch.Tensor, no_relu: torch.Tensor,
                predicted: torch.Tensor | None, where: tuple[str, str]) -> None:
    """The true maps, those without the final ReLU and those of the predicted class (None when it is the target)."""
    expect(isinstance(result, torch.Tensor), "not-a-tensor", f"应返回一个张量（N×h×w），收到的是 {type(result).__name__}。",
           f"return a tensor (N x h x w), not a {type(result).__name__}.")
    cam = result.detach().float()
    cam = cam[:, 0] if cam.dim() == 4 and cam.shape[1] == 1 else cam
    shape = (f"{where[0]}：热图形状应为 {tuple(truth.shape)}（N×h×w，层的分辨率），你的是 {tuple(cam.shape)}",
             f"{where[1]}: the maps should have shape {tuple(truth.shape)} (N x h x w, at the layer's resolution); "
             f"yours is {tuple(cam.shape)}")
    expect(cam.shape == truth.shape or cam.shape[-2:] != x.shape[-2:], "upsampled",
           f"{shape[0]}（放大到了输入大小；这里要的是放大之前的热图）。",
           f"{shape[1]} (upsampled to the input size; return them before upsampling).")
    expect(cam.shape == truth.shape, "cam-shape", f"{shape[0]}。", f"{shape[1]}.")
    if _close(cam, truth):
        return
    expect(predicted is None or not _close(cam, predicted), "predicted-class",
           f"{where[0]}：你的热图是**预测类别**的热图；要对参数 `target` 给出的类别求梯度。",
           f"{where[1]}: your maps are those of the *predicted* class; differentiate the score of the class given "
           "in `target`.")
    expect(not _close(cam, no_relu), "no-relu", f"{where[0]}：你的热图里有负值：加权求和之后还要过一次 ReLU。",
           f"{where[1]}: your maps have negative values: apply a ReLU after the weighted sum.")
    i = int((cam - truth).abs().flatten(1).max(1).values.argmax())
    error, peak = float((cam[i] - truth[i]).abs().max()), float(truth[i].max())
    fail("cam-values", f"{where[0]}：第 {i + 1} 张图的热图不对（最大误差 {error:.3g}，正确热图的最大值是 {peak:.3g}）。"
         "检查：每张图只对它自己的目标得分求梯度，权重是梯度在空间上的平均，按通道加权求和后过 ReLU。",
         f"{where[1]}: the map of image {i + 1} is wrong (largest error {error:.3g}; the true map peaks at {peak:.3g}). "
         "Check: each image differentiates only its own target score, the weights are the gradient's spatial mean, "
         "and the weighted sum over channels goes through a ReLU.")


class _Registrations(OrderedDict):
    """A tensor's hook dict that notes in ``late`` each hook registered once the backward pass went through the
    tensor (``passed`` is not empty then): such a hook never fires."""

    def __init__(self, passed: list[bool], late: list[Any]) -> None:
        super().__init__()
        self.passed, self.late = passed, late

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.passed:
            self.late.append(key)
        super().__setitem__(key, value)


@contextmanager
def _late_tensor_hooks(module: nn.Module, late: list[Any]) -> Iterator[None]:
    """While open, each output of ``module`` holds its hooks in a :class:`_Registrations` (set up as
    ``Tensor.register_hook`` sets up a plain dict), with a hook of the checker's own that notes the backward pass."""
    def watch(m: nn.Module, args: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor) and output.grad_fn is not None and output._backward_hooks is None:
            passed: list[bool] = []
            output._backward_hooks = _Registrations(passed, late)
            output.grad_fn._register_hook_dict(output)
            output.register_hook(lambda grad: passed.append(True))
    handle = module.register_forward_hook(watch)
    try:
        yield
    finally:
        handle.remove()


@exercise("05.3", answer="grad_cam")
def grad_cam(answer: Any) -> None:
    for seed, (c1, c2), classes, batch, size, index, which in _CAM_CASES:
        model = _small_cnn(seed, c1, c2, classes)
        torch.manual_seed(seed + 100)
        x = torch.randn(batch, 1, size, size)
        with torch.no_grad():
            predicted = model(x).argmax(1)
        target = {"predicted": predicted, "not predicted": 1 - predicted,
                  "mixed": (predicted + torch.arange(batch)) % classes}[which]
        truths = (_true_cam(model, index, x, target), _true_cam(model, index, x, target, relu=False),
                  None if which == "predicted" else _true_cam(model, index, x, predicted))
        layer = str(index)
        where = (f"层 `\"{layer}\"`、{_TARGETS[which][0]}", f"layer `\"{layer}\"`, {_TARGETS[which][1]}")
        late: list[Any] = []
        try:
            with _late_tensor_hooks(model.get_submodule(layer), late):
                result = run(answer, model, layer, x.clone(), target.clone(), leak_free=(model,))
            _expect_cam(result, x, *truths, where)
        except Wrong:
            expect(not late, "hook-after-backward",
                   "你在反向传播**之后**才给保存的激活注册张量钩子：反向传播已经经过了它，这个钩子永远不会触发，也就记录不到梯度。"
                   "请在前向钩子里（或前向之后、`backward()` 之前）注册它。",
                   "you registered the tensor hook on the kept activation *after* the backward pass had gone through "
                   "it: such a hook never fires, so no gradient is recorded. Register it in the forward hook (or after "
                   "the forward pass, before `backward()`).")
            raise
