"""wandb: ``wandb.watch`` puts a forward hook on the model it is given (parameter histograms) and a tensor hook on
every parameter that requires gradients (gradient histograms); ``log_graph=True`` adds a forward hook on every leaf
module. ``wandb.unwatch`` removes them by the names kept in ``model._wandb_hook_names``."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/wandb/wandb/blob/v0.31.0/wandb/"
LIBRARY = Library(
    slug="wandb", name="wandb", requirement="wandb==0.31.0", category="trackers and trainers",
    entry='wandb.watch(model, log="all", log_freq=1)',
    names=("wandb.watch", "wandb.unwatch", "TorchHistory", "add_log_parameters_hook", "add_log_gradients_hook",
           "_hook_variable_gradient_stats", "TorchGraph", "hook_torch_modules", "_torch_hook_handles",
           "_wandb_hook_names", "_wandb_watch_called", "log_graph", "log_freq"),
    sources=(SRC + "sdk/wandb_watch.py", SRC + "integration/torch/wandb_torch.py#L83-L296",
             SRC + "integration/torch/wandb_torch.py#L365-L427"),
    words={
        "en": {"summary": "`wandb.watch(model, log=\"all\")` registers one forward hook on `model` itself (after "
                          "each forward it logs a histogram of every parameter) and one tensor hook "
                          "(`register_hook`) on each parameter that requires gradients (it logs the gradient's "
                          "histogram). They are ordinary hooks: they run in registration order with yours, and "
                          "`log_freq` only decides whether they log, not whether they run. `log_graph=True` adds a "
                          "forward hook on every leaf module. The hooks call `wandb.run`, so they raise once the run "
                          "is finished: with `log=\"all\"` or `\"parameters\"` the next forward raises, from the "
                          "forward hook (`parameter_log_hook`); with `log=\"gradients\"` (the default) the forward "
                          "runs and the backward raises, from the tensor hooks.",
               "remove": "`wandb.unwatch(model)` removes the hooks named in `model._wandb_hook_names`; "
                         "`wandb.unwatch()` removes every hook of the run. `model._wandb_watch_called` stays set, "
                         "so `wandb.watch(model, log_graph=True)` on the same model raises afterwards.",
               "api": "No callback API: `wandb.watch` and `wandb.log` are calls you make from your loop; the "
                      "handles are in `wandb.run._torch._hook_handles`."},
        "zh": {"summary": "`wandb.watch(model, log=\"all\")` 在 `model` 本身上注册一个前向钩子（每次前向后记录"
                          "所有参数的直方图），并在每个需要梯度的参数上注册一个张量钩子（`register_hook`，记录梯度的"
                          "直方图）。它们就是普通的钩子：和你的钩子一起按注册顺序运行；`log_freq` 只决定是否记录，"
                          "不决定是否运行。`log_graph=True` 还会在每个叶子模块上加一个前向钩子。这些钩子都会调用 "
                          "`wandb.run`，所以 run 结束后它们会报错：`log=\"all\"` 或 `\"parameters\"` 时，下一次前向"
                          "就在前向钩子（`parameter_log_hook`）里报错；`log=\"gradients\"`（默认）时前向照常，"
                          "反向在张量钩子里报错。",
               "remove": "`wandb.unwatch(model)` 按 `model._wandb_hook_names` 里的名字移除钩子；`wandb.unwatch()` "
                         "移除这个 run 的所有钩子。`model._wandb_watch_called` 不会被清掉，所以之后再对同一个模型"
                         "调用 `wandb.watch(model, log_graph=True)` 会报错。",
               "api": "没有回调 API：`wandb.watch`、`wandb.log` 都是你在训练循环里自己调用的函数；"
                      "句柄存在 `wandb.run._torch._hook_handles` 里。"},
    },
    surprises=(
        {"fact": "facts.hooks_after_finish",
         "en": "The hooks outlive the run: after `wandb.finish()` without `unwatch`, with `log=\"all\"` it is the "
               "next forward that raises, from wandb's forward hook `parameter_log_hook`; with `log=\"gradients\"` "
               "(the default) the forward runs and the backward raises, from its tensor hooks; with "
               "`log=\"parameters\"` the forward raises and the backward runs.",
         "zh": "钩子比 run 活得久：没有 `unwatch` 就 `wandb.finish()` 之后，`log=\"all\"` 时先报错的是下一次前向，"
               "错误来自 wandb 的前向钩子 `parameter_log_hook`；`log=\"gradients\"`（默认）时前向照常，反向在它的"
               "张量钩子里报错；`log=\"parameters\"` 时前向报错，反向照常。"},
        {"fact": "facts.rewatch_after_unwatch",
         "en": "After `wandb.unwatch(model)`, watching the same model again with `log_graph=True` raises "
               "`ValueError`: `_wandb_watch_called` is never reset.",
         "zh": "`wandb.unwatch(model)` 之后，再用 `log_graph=True` 监视同一个模型会抛 `ValueError`："
               "`_wandb_watch_called` 从不重置。"},
        {"fact": "probe.survives.deepcopy",
         "en": "`copy.deepcopy` keeps wandb's forward hook (it still logs to the same run) but not the tensor "
               "hooks on parameters.",
         "zh": "`copy.deepcopy` 会保留 wandb 的前向钩子（仍然记到同一个 run），但参数上的张量钩子不会保留。"},
    ),
)
TARGET = "0"


def _run():
    """The offline run the hooks log to, in a temporary directory removed at exit (after ``wandb.finish``); silent
    whatever the environment says (``WANDB_SILENT`` is read when wandb sets itself up, at the first ``wandb.init``),
    so that a program prints only what it shows, as it is stored."""
    os.environ["WANDB_SILENT"] = "true"
    import wandb
    if wandb.run is None:
        folder = tempfile.mkdtemp(prefix="wandb-profile-")
        os.environ["WANDB_DIR"] = folder
        atexit.register(shutil.rmtree, folder, True)
        atexit.register(wandb.finish)  # runs first (atexit is last in, first out)
        wandb.init(mode="offline", dir=folder, project="hooklab-profile")
    return wandb.run


def apply(model: nn.Module) -> nn.Module:
    import wandb
    _run()
    wandb.watch(model, log="all", log_freq=1)
    return model


def remove(model: nn.Module) -> nn.Module:
    import wandb
    wandb.unwatch(model)
    return model


def _attempt(step) -> str:
    """``runs``, or what it raises and wandb's function it raises from (its outermost named frame in wandb)."""
    import traceback
    try:
        step()
        return "runs"
    except Exception as exc:  # noqa: BLE001 - the finding
        frames = [f.name for f in traceback.extract_tb(exc.__traceback__)
                  if "site-packages/wandb/" in f.filename.replace("\\", "/") and f.name != "<lambda>"]
        return f"raises {type(exc).__name__}" + (f" in {frames[0]}" if frames else "")


def _after_finish(log: str) -> dict[str, str]:
    """A model watched with ``log``, one step, ``wandb.finish()`` without ``unwatch``: what the next forward and
    backward do (the backward from a forward run without wandb's forward hook, where the forward raised)."""
    import wandb
    _run()
    model = build()
    wandb.watch(model, log=log, log_freq=1)
    model(*inputs()).sum().backward()
    wandb.finish()
    model.zero_grad()
    out: list = []
    forward = _attempt(lambda: out.append(model(*inputs())))
    if not out:
        kept = dict(model._forward_hooks)
        model._forward_hooks.clear()
        out.append(model(*inputs()))
        model._forward_hooks.update(kept)
    return {"forward": forward, "backward": _attempt(lambda: out[0].sum().backward())}


def facts() -> dict:
    import wandb
    _run()
    log: list[str] = []
    model = build()
    model.register_forward_hook(lambda *a: log.append("yours, before watch: forward (model)"))
    model[0].weight.register_hook(lambda g: log.append("yours, before watch: tensor (0.weight)"))
    wandb.watch(model, log="all", log_freq=1)
    model.register_forward_hook(lambda *a: log.append("yours, after watch: forward (model)"))
    model[0].weight.register_hook(lambda g: log.append("yours, after watch: tensor (0.weight)"))
    handles = wandb.run._torch._hook_handles
    for handle in handles.values():  # wrap wandb's hooks on the model and on 0.weight to log when they run
        d = handle.hooks_dict_ref()
        label = {id(model._forward_hooks): "wandb: forward (model)",
                 id(model[0].weight._backward_hooks): "wandb: tensor (0.weight)"}.get(id(d))
        if label is not None:
            d[handle.id] = (lambda f, text: lambda *a: (log.append(text), f(*a))[1])(d[handle.id], label)
    hooks = {"kinds": sorted({name.split("/")[0] for name in handles}), "count": len(handles)}
    model(*inputs()).pow(2).mean().backward()
    wandb.unwatch(model)
    graphed = build()
    wandb.watch(graphed, log_graph=True)
    graph_hooks = {name: len(m._forward_hooks) for name, m in graphed.named_modules() if name}
    wandb.unwatch(graphed)
    try:
        wandb.watch(graphed, log_graph=True)
        again = "runs"
    except ValueError:
        again = "raises ValueError"
    wandb.unwatch()
    wandb.finish()
    after_finish = {log: _after_finish(log) for log in ("all", "gradients", "parameters")}
    return {"order": log, "handles": hooks, "log_graph_forward_hooks": graph_hooks, "rewatch_after_unwatch": again,
            "hooks_after_finish": after_finish}
