"""Exercises of notebook 05 (applications): input shapes, exploding gradients, Grad-CAM for any class.

Every checker builds tiny seeded models (no training), computes the truth without hooks, and
runs the learner's function on them; each check takes a few milliseconds on a CPU.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...clip import clip_grad_norm_hooks
from . import Wrong, call_answer, exercise, no_hooks_left, require_callable


# ---- 05.1 the input shape of every top-level call --------------------------------------------

class _Branchy(nn.Module):
    """Forward calls the children in another order than they are registered in; ``act`` runs twice."""

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.stem = nn.Linear(d_in, hidden)
        self.body = nn.Linear(hidden, hidden)
        self.act = nn.ReLU()
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.stem(x))
        h = self.act(h + self.body(h))
        return self.head(h)


def _sequential_rows(model: nn.Sequential, x: torch.Tensor) -> tuple[list, list]:
    """(name, input shape) and (name, output shape) per child, by running the children one by one."""
    inputs, outputs = [], []
    with torch.no_grad():
        for name, child in model.named_children():
            inputs.append((name, tuple(x.shape)))
            x = child(x)
            outputs.append((name, tuple(x.shape)))
    return inputs, outputs


def _input_shape_cases():
    """(label, model, x, true rows, output-shape rows) for three fresh models."""
    torch.manual_seed(21)
    mlp = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4), nn.Tanh(), nn.Linear(4, 3))
    x = torch.randn(5, 6)
    yield ("MLP", mlp, x, *_sequential_rows(mlp, x))

    torch.manual_seed(22)
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(4 * 4 * 4, 2))
    x = torch.randn(2, 3, 8, 8)
    yield ("CNN", cnn, x, *_sequential_rows(cnn, x))

    torch.manual_seed(23)
    n, d_in, hidden, d_out = 3, 7, 9, 2
    branchy, x = _Branchy(d_in, hidden, d_out), torch.randn(n, d_in)
    h = (n, hidden)
    truth = [("stem", (n, d_in)), ("act", h), ("body", h), ("act", h), ("head", h)]
    outputs = [("stem", h), ("act", h), ("body", h), ("act", h), ("head", (n, d_out))]
    yield ("Branchy (forward calls stem, act, body, act, head)", branchy, x, truth, outputs)


def _as_rows(result: Any) -> list[tuple[str, tuple[int, ...]]]:
    if isinstance(result, dict):
        raise Wrong("请返回 (名字, 形状) 对的列表，每次调用一行；字典里每个名字只能出现一次，而一个子模块可能被调用两次。",
                    "return a list of (name, shape) pairs, one per call: a dict holds each name once, "
                    "but a child can be called twice.")
    try:
        rows = []
        for name, shape in result:
            if not isinstance(name, str):
                raise TypeError
            rows.append((name, tuple(int(d) for d in shape)))
    except (TypeError, ValueError):
        raise Wrong("应返回一个列表，每一行是 `(名字, 形状)`，例如 `(\"0\", (5, 6))`。",
                    "return a list whose rows are `(name, shape)` pairs, e.g. `(\"0\", (5, 6))`.") from None
    return rows


@exercise("05.1",
          hint=("对 `model.named_children()` 里的每个子模块注册 `register_forward_pre_hook`；前置钩子的签名是 "
                "`hook(module, args)`，输入形状是 `tuple(args[0].shape)`。名字用默认参数 `name=name` 在注册时绑定，"
                "句柄交给 `hooklab.HookScope`，然后跑一次 `model(x)`。",
                "register a `register_forward_pre_hook` on each child in `model.named_children()`; a pre-hook "
                "is called as `hook(module, args)` and the input shape is `tuple(args[0].shape)`. Bind the name "
                "when registering (default argument `name=name`), give the handles to a `hooklab.HookScope`, "
                "then run `model(x)` once."),
          solution='''
def input_shapes(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            def record(module, args, name=name):
                rows.append((name, tuple(args[0].shape)))
            scope.add(child.register_forward_pre_hook(record))
        model(x)
    return rows
''')
def input_shapes(answer) -> None:
    require_callable(answer, "input_shapes")
    for label, model, x, truth, output_rows in _input_shape_cases():
        with no_hooks_left(model):
            result = call_answer(answer, model, x)
        rows = _as_rows(result)
        if rows == truth:
            continue
        child_names = {name for name, _ in model.named_children()}
        if rows == output_rows:
            raise Wrong(f"在模型 {label} 上你记录的是每个子模块的**输出**形状；输入形状要用 `register_forward_pre_hook`。",
                        f"on the model {label} you recorded each child's *output* shape; the input shape "
                        f"comes from `register_forward_pre_hook`.")
        if len(rows) > 1 and len({name for name, _ in rows}) == 1 < len({name for name, _ in truth}):
            raise Wrong(f"每一行的名字都是 `{rows[0][0]}`：闭包读的是循环变量，钩子运行时它已经是最后一个值（延迟绑定）。"
                        f"注册时用默认参数 `name=name` 绑定名字。",
                        f"every row is named `{rows[0][0]}`: the closure reads the loop variable, which holds its "
                        f"last value by the time the hooks run (late binding). Bind it with a default argument "
                        f"`name=name` when registering.")
        strangers = sorted({name for name, _ in rows} - child_names)
        if strangers:
            raise Wrong(f"在模型 {label} 上出现了不是顶层子模块的名字 {strangers}；只对 `model.named_children()` 注册"
                        f"（`named_modules()` 还包括模型本身 `''` 和更深的子模块）。",
                        f"on the model {label} your rows name {strangers}, which are not top-level children; "
                        f"register only on `model.named_children()` (`named_modules()` also yields the model "
                        f"itself, `''`, and deeper submodules).")
        if len(rows) != len(truth):
            raise Wrong(f"模型 {label} 的一次前向调用了 {len(truth)} 次顶层子模块，你的列表有 {len(rows)} 行。"
                        f"每次**调用**一行，按调用发生的顺序。",
                        f"one forward pass of the model {label} makes {len(truth)} calls of top-level children; "
                        f"your list has {len(rows)} rows. One row per *call*, in the order the calls happen.")
        k = next(i for i, (a, b) in enumerate(zip(rows, truth)) if a != b)
        raise Wrong(f"模型 {label} 的第 {k + 1} 次调用应是 {truth[k]}，你的列表给出 {rows[k]}。",
                    f"on the model {label}, call {k + 1} should be {truth[k]}; your list has {rows[k]}.")


# ---- 05.2 per-layer gradient norms: exploding gradients ---------------------------------------

def _deep_relu(seed: int, depth: int, width: int, d_in: int, scale: float) -> nn.Sequential:
    """Section 5's ReLU MLP (Kaiming init, zero biases) with the hidden weights multiplied by ``scale``."""
    torch.manual_seed(seed)
    layers, fan_in = [], d_in
    for _ in range(depth):
        linear = nn.Linear(fan_in, width)
        nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
        nn.init.zeros_(linear.bias)
        with torch.no_grad():
            linear.weight.mul_(scale)
        layers += [linear, nn.ReLU()]
        fan_in = width
    layers.append(nn.Linear(fan_in, 2))
    return nn.Sequential(*layers)


def _true_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, max_norm: float | None) -> list[float]:
    """Per-Linear gradient norm after one plain backward (no hooks), optionally clipped per parameter."""
    F.cross_entropy(model(x), y).backward()
    norms = []
    for layer in model:
        if isinstance(layer, nn.Linear):
            squares = 0.0
            for p in (layer.weight, layer.bias):
                g = p.grad
                if max_norm is not None:
                    g = g * torch.clamp(max_norm / (g.norm() + 1e-6), max=1.0)
                squares += float(g.norm()) ** 2
            norms.append(squares ** 0.5)
    return norms


def _as_floats(result: Any) -> list[float]:
    if isinstance(result, dict):
        raise Wrong("请返回浮点数列表（每层一个），不是字典；用 `GradientMonitor` 时可以写 "
                    "`[v[0] for v in monitor.norms().values()]`。",
                    "return a list of floats (one per layer), not a dict; with `GradientMonitor` write "
                    "`[v[0] for v in monitor.norms().values()]`.")
    if isinstance(result, torch.Tensor):
        result = result.detach().flatten().tolist()
    try:
        return [float(v.detach()) if isinstance(v, torch.Tensor) else float(v) for v in result]
    except (TypeError, ValueError):
        raise Wrong(f"应返回浮点数列表（每个 `nn.Linear` 一个），收到的是 {type(result).__name__}。",
                    f"return a list of floats (one per `nn.Linear`), not a {type(result).__name__}.") from None


@exercise("05.2",
          hint=("`register_post_accumulate_grad_hook` 在梯度累加进 `.grad` 之后触发，看到的正是优化器将看到的梯度；"
                "`hooklab.GradientMonitor` 替你注册这些钩子，`norms()` 把每层的权重和偏置合成一个范数。"
                "注意：钩子按反向的顺序（从输出到输入）触发，而答案要从输入到输出。",
                "`register_post_accumulate_grad_hook` fires after the gradient was accumulated into `.grad`: "
                "it sees what the optimizer will see. `hooklab.GradientMonitor` registers those hooks for you, "
                "and its `norms()` combines each layer's weight and bias into one norm. Mind the order: hooks "
                "fire in backward order (output to input); the answer goes from input to output."),
          solution='''
def grad_norms(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return [per_step[0] for per_step in monitor.norms().values()]
''')
def grad_norms(answer) -> None:
    require_callable(answer, "grad_norms")
    cases = [  # seed, depth, width, input size, batch, weight scale, clip hooks attached
        (31, 4, 8, 5, 6, 1.0, None),
        (32, 6, 12, 7, 9, 2.0, None),
        (33, 5, 10, 4, 8, 2.0, 1.0),
    ]
    for seed, depth, width, d_in, batch, scale, max_norm in cases:
        torch.manual_seed(seed + 100)
        x, y = torch.randn(batch, d_in), torch.randint(0, 2, (batch,))
        truth = _true_norms(_deep_relu(seed, depth, width, d_in, scale), x, y, max_norm)
        model = _deep_relu(seed, depth, width, d_in, scale)
        clip = clip_grad_norm_hooks(model, max_norm) if max_norm is not None else None
        what_zh = (f"{depth} 个隐藏层、宽 {width}、权重是 Kaiming 的 {scale:g} 倍"
                   + (f"、挂着 `clip_grad_norm_hooks(model, {max_norm:g})`" if clip else "") + " 的网络")
        what_en = (f"a network with {depth} hidden layers of width {width}, weights {scale:g}x the Kaiming scale"
                   + (f", with `clip_grad_norm_hooks(model, {max_norm:g})` attached" if clip else ""))
        try:
            with no_hooks_left(model):
                result = call_answer(answer, model, x.clone(), y.clone())
        finally:
            if clip is not None:
                clip.remove()
        norms = _as_floats(result)
        if len(norms) != len(truth):
            per_param = "（每个参数一个？权重和偏置要合成一个范数）" if len(norms) == 2 * len(truth) else ""
            per_param_en = (" (one per parameter? combine weight and bias into one norm)"
                            if len(norms) == 2 * len(truth) else "")
            raise Wrong(f"{what_zh}有 {len(truth)} 个 `nn.Linear` 层，你返回了 {len(norms)} 个值{per_param}。",
                        f"{what_en} has {len(truth)} `nn.Linear` layers; you returned {len(norms)} values{per_param_en}.")
        if torch.allclose(torch.tensor(norms), torch.tensor(truth), rtol=1e-4, atol=1e-7):
            continue
        if torch.allclose(torch.tensor(norms[::-1]), torch.tensor(truth), rtol=1e-4, atol=1e-7):
            raise Wrong("数值对了，顺序反了：钩子按反向传播的顺序（从输出到输入）触发，答案要按模型里从输入到输出的顺序。",
                        "right numbers, reversed: hooks fire in backward order (output to input), but the "
                        "answer goes in model order, from input to output.")
        k = next(i for i, (a, b) in enumerate(zip(norms, truth)) if abs(a - b) > 1e-4 * abs(b) + 1e-7)
        raise Wrong(f"在{what_zh}上，第 {k + 1} 个 `nn.Linear` 的梯度范数（权重和偏置合起来，即 sqrt(|dW|² + |db|²)）"
                    f"应为 {truth[k]:.4g}，你的函数给出 {norms[k]:.4g}。",
                    f"on {what_en}, the gradient norm of `nn.Linear` number {k + 1} (weight and bias together, "
                    f"sqrt(|dW|^2 + |db|^2)) is {truth[k]:.4g}; your function gave {norms[k]:.4g}.")


# ---- 05.3 Grad-CAM for any class --------------------------------------------------------------

def _small_cnn(seed: int, c1: int, c2: int, classes: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c2, classes))


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


@exercise("05.3",
          hint=("照第 6 节做：`with hooklab.capture(model, layer, grads=True) as store:` 里跑前向，"
                "对**每张图自己的目标类别**的得分求和再反向：`scores.gather(1, target[:, None]).sum().backward()`；"
                "然后 `weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)`，"
                "热图是 `relu((weights * store[layer]).sum(dim=1))`，不放大。",
                "as in section 6: run the forward inside `with hooklab.capture(model, layer, grads=True) as store:` "
                "and backpropagate the sum of *each image's own target* score: "
                "`scores.gather(1, target[:, None]).sum().backward()`; then "
                "`weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)` and the map is "
                "`relu((weights * store[layer]).sum(dim=1))`, not upsampled."),
          solution='''
def grad_cam(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return torch.relu((weights * store[layer]).sum(dim=1))
''')
def grad_cam(answer) -> None:
    require_callable(answer, "grad_cam")
    cases = [  # seed, channels, classes, batch, image size, layer, which target
        (41, (4, 6), 2, 4, 12, 4, "predicted"),
        (42, (4, 8), 2, 5, 16, 4, "not predicted"),
        (43, (3, 5), 3, 6, 10, 3, "mixed"),
    ]
    for seed, (c1, c2), classes, batch, size, index, which in cases:
        model = _small_cnn(seed, c1, c2, classes)
        torch.manual_seed(seed + 100)
        x = torch.randn(batch, 1, size, size)
        with torch.no_grad():
            predicted = model(x).argmax(1)
        if which == "predicted":
            target = predicted
        elif which == "not predicted":
            target = 1 - predicted
        else:
            target = (predicted + torch.arange(batch)) % classes
        truth = _true_cam(model, index, x, target)
        layer = str(index)
        what_zh = {"predicted": "目标是预测类别", "not predicted": "目标是**没有**被预测的类别",
                   "mixed": "每张图的目标类别各不相同"}[which]
        what_en = {"predicted": "targets = the predicted classes", "not predicted": "targets = the classes "
                   "*not* predicted", "mixed": "a different target class per image"}[which]
        where_zh, where_en = f"层 `\"{layer}\"`、{what_zh}", f"layer `\"{layer}\"`, {what_en}"

        with no_hooks_left(model):
            result = call_answer(answer, model, layer, x.clone(), target.clone())
        if not isinstance(result, torch.Tensor):
            raise Wrong(f"应返回一个张量（N×h×w），收到的是 {type(result).__name__}。",
                        f"return a tensor (N x h x w), not a {type(result).__name__}.")
        cam = result.detach()
        if cam.dim() == 4 and cam.shape[1] == 1:
            cam = cam[:, 0]
        if cam.shape != truth.shape:
            upsampled = cam.shape[-2:] == x.shape[-2:] and cam.shape[-2:] != truth.shape[-2:]
            raise Wrong(f"{where_zh}：热图形状应为 {tuple(truth.shape)}（N×h×w，层的分辨率），你的是 {tuple(cam.shape)}"
                        + ("（放大到了输入大小；这里要的是放大之前的热图）" if upsampled else "") + "。",
                        f"{where_en}: the maps should have shape {tuple(truth.shape)} (N x h x w, at the layer's "
                        f"resolution); yours is {tuple(cam.shape)}"
                        + (" (upsampled to the input size; return them before upsampling)" if upsampled else "") + ".")
        if _close(cam.float(), truth):
            continue
        if which != "predicted" and _close(cam.float(), _true_cam(model, index, x, predicted)):
            raise Wrong(f"{where_zh}：你的热图是**预测类别**的热图；要对参数 `target` 给出的类别求梯度。",
                        f"{where_en}: your maps are those of the *predicted* class; differentiate the score "
                        f"of the class given in `target`.")
        if _close(cam.float(), _true_cam(model, index, x, target, relu=False)):
            raise Wrong(f"{where_zh}：你的热图里有负值：加权求和之后还要过一次 ReLU。",
                        f"{where_en}: your maps have negative values: apply a ReLU after the weighted sum.")
        i = int((cam.float() - truth).abs().flatten(1).max(1).values.argmax())
        raise Wrong(f"{where_zh}：第 {i + 1} 张图的热图不对（最大误差 {float((cam[i] - truth[i]).abs().max()):.3g}，"
                    f"正确热图的最大值是 {float(truth[i].max()):.3g}）。检查：每张图只对它自己的目标得分求梯度，"
                    f"权重是梯度在空间上的平均，按通道加权求和后过 ReLU。",
                    f"{where_en}: the map of image {i + 1} is wrong (largest error "
                    f"{float((cam[i] - truth[i]).abs().max()):.3g}; the true map peaks at {float(truth[i].max()):.3g}). "
                    f"Check: each image differentiates only its own target score, the weights are the gradient's "
                    f"spatial mean, and the weighted sum over channels goes through a ReLU.")
