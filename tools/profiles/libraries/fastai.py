"""fastai: ``hook_outputs`` / ``Hooks`` put a forward hook (or, with ``grad=True``, a deprecated non-full backward
hook) on each given module; a ``HookCallback`` registers them at ``before_fit`` and removes them at ``after_fit``.
The ``Learner``'s own callback events run around the forward, ``backward`` and ``opt.step``."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/fastai/fastai/blob/2.8.12/fastai/"
LIBRARY = Library(
    slug="fastai", name="fastai", requirement="fastai==2.8.12", category="trackers and trainers",
    entry="fastai.callback.hook.hook_outputs([model[0], model[2]])",
    names=("Hook", "Hooks", "hook_output", "hook_outputs", "HookCallback", "ActivationStats", "Learner",
           "Callback", "before_batch", "after_pred", "after_loss", "before_backward", "after_backward",
           "before_step", "after_step", "after_batch", "before_fit", "after_fit", "CancelBackwardException"),
    sources=(SRC + "callback/hook.py#L16-L76", SRC + "callback/hook.py#L111-L140", SRC + "learner.py#L216-L244"),
    words={
        "en": {"summary": "`hook_outputs(modules)` wraps `register_forward_hook` (a `Hook` per module that stores "
                          "the detached output in `.stored`); it runs after your forward hooks registered before "
                          "it. With `grad=True` it calls the deprecated `register_backward_hook`, which PyTorch "
                          "refuses on a module that already has a full backward hook (and the other way round). "
                          "`HookCallback` subclasses such as `ActivationStats` register their hooks at "
                          "`before_fit` on every module with parameters and remove them at `after_fit`, so they "
                          "also run on validation batches.",
               "remove": "`hooks.remove()`, or use `with hook_outputs(...) as hooks:`; a `HookCallback` removes its "
                         "own at `after_fit` (`remove_end=True`).",
               "api": "Learner events per training batch: `before_batch`, the forward (your forward hooks), "
                      "`after_pred`, `after_loss`, `before_backward`, `backward` (your backward and tensor hooks), "
                      "`after_backward`, `before_step`, `opt.step`, `after_step`, `opt.zero_grad`, `after_batch`. A "
                      "validation batch has only `before_batch`, forward, `after_pred`, `after_loss`, "
                      "`after_batch`. Callbacks run in the order of their `order` attribute."},
        "zh": {"summary": "`hook_outputs(modules)` 包装了 `register_forward_hook`（每个模块一个 `Hook`，把 detach "
                          "后的输出存进 `.stored`），在它之前注册的你的前向钩子先运行。`grad=True` 时它调用已弃用的 "
                          "`register_backward_hook`，而 PyTorch 不允许同一模块上同时有它和完整反向钩子（反过来也一样）。"
                          "`ActivationStats` 等 `HookCallback` 子类在 `before_fit` 时给每个带参数的模块注册钩子，"
                          "在 `after_fit` 时移除，所以验证 batch 上它们也会运行。",
               "remove": "`hooks.remove()`，或写成 `with hook_outputs(...) as hooks:`；`HookCallback` 在 "
                         "`after_fit` 时自己移除（`remove_end=True`）。",
               "api": "每个训练 batch 的 Learner 事件：`before_batch`、前向（你的前向钩子）、`after_pred`、"
                      "`after_loss`、`before_backward`、`backward`（你的反向钩子和张量钩子）、`after_backward`、"
                      "`before_step`、`opt.step`、`after_step`、`opt.zero_grad`、`after_batch`。验证 batch 只有 "
                      "`before_batch`、前向、`after_pred`、`after_loss`、`after_batch`。回调按各自的 `order` "
                      "属性排序运行。"},
    },
    surprises=(
        {"fact": "facts.grad_hooks_beside_full_backward_hook",
         "en": "`hook_outputs(modules, grad=True)` raises `RuntimeError` on a module that has a full backward hook: "
               "fastai registers the deprecated `register_backward_hook`, which cannot share a module with one.",
         "zh": "模块上已有完整反向钩子时，`hook_outputs(modules, grad=True)` 会抛 `RuntimeError`："
               "fastai 用的是已弃用的 `register_backward_hook`，两者不能挂在同一个模块上。"},
        {"fact": "facts.activation_stats_hooks",
         "en": "`ActivationStats` has its forward hooks on the model only between `before_fit` and `after_fit`, "
               "validation batches included.",
         "zh": "`ActivationStats` 的前向钩子只在 `before_fit` 到 `after_fit` 之间挂在模型上，验证 batch 也包括在内。"},
    ),
)
TARGET = "0"
_HOOKS: list = []


def apply(model: nn.Module) -> nn.Module:
    from fastai.callback.hook import hook_outputs
    _HOOKS.append(hook_outputs([model[0], model[2]]))
    return model


def remove(model: nn.Module) -> nn.Module:
    _HOOKS.pop().remove()
    return model


def facts() -> dict:
    import fastai.callback.progress  # noqa: F401 - adds Learner.no_bar
    from fastai.callback.core import Callback, _events
    from fastai.callback.hook import ActivationStats, hook_outputs
    from fastai.data.core import DataLoaders
    from fastai.learner import Learner
    from fastai.optimizer import SGD
    from torch.utils.data import DataLoader, TensorDataset
    events: list[str] = []

    class Logging(Callback):
        def before_batch(self):
            events.append("before_batch")
            stats.append(len(self.learn.model[0]._forward_hooks))
    for event in _events:
        if event != "before_batch":
            setattr(Logging, event, lambda self, _e=event: events.append(_e))
    stats: list[int] = []
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(4, 4, generator=g), torch.randn(4, 2, generator=g))
    dls = DataLoaders(DataLoader(data, batch_size=2), DataLoader(data, batch_size=4))
    model = build()
    layer = model[0]
    layer.register_forward_hook(lambda *a: events.append("module forward hook"))
    layer.register_full_backward_hook(lambda *a: events.append("module backward hook"))
    layer.weight.register_hook(lambda g: events.append("tensor hook (weight)"))
    layer.weight.register_post_accumulate_grad_hook(lambda p: events.append("post_accumulate_grad hook (weight)"))
    learn = Learner(dls, model, loss_func=nn.MSELoss(), opt_func=SGD, cbs=[Logging(), ActivationStats()])
    with learn.no_bar(), learn.no_logging():
        learn.fit(1, 0.1)
    batches = [i for i, e in enumerate(events) if e == "before_batch"]
    ends = [i for i, e in enumerate(events) if e == "after_batch"]
    clean, hooked = build(), build()
    hooks = hook_outputs([clean[0]], grad=True)
    full = clean[0]._is_full_backward_hook
    hooks.remove()
    hooked[0].register_full_backward_hook(lambda *a: None)
    try:
        hook_outputs([hooked[0]], grad=True)
        beside = "runs"
    except RuntimeError:
        beside = "raises RuntimeError"
    return {"training_batch": events[batches[0]:ends[0] + 1],
            "validation_batch": events[batches[-1]:ends[-1] + 1],
            "activation_stats_hooks": {"during fit (each batch)": stats, "after fit": len(model[0]._forward_hooks)},
            "grad_hooks_are_full_backward_hooks": bool(full),
            "grad_hooks_beside_full_backward_hook": beside}
