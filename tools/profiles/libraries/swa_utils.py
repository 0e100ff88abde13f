"""torch (``torch.optim.swa_utils.AveragedModel``): registers no hook, but deep-copies the model, and with it every hook
on it: the user's hooks fire in the averaged copy too, as copies that ``handle.remove()`` on the original does not
reach."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/optim/swa_utils.py"
LIBRARY = Library(
    title='AveragedModel (torch.optim.swa_utils)', slug="swa_utils", name="torch", category="measurement",
    entry="torch.optim.swa_utils.AveragedModel(model)",
    names=("AveragedModel", "update_parameters", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_ema_avg_fn",
           "n_averaged", "use_buffers"),
    sources=(f"{SRC}#L266-L292", f"{SRC}#L294-L368", f"{SRC}#L372-L427"),
    words={
        "en": {"summary": "PyTorch's own `AveragedModel` (SWA / EMA) keeps `copy.deepcopy(model)` as `.module` and "
                          "an `n_averaged` buffer. It registers nothing, but the deep copy carries every hook the "
                          "model had at that moment: your hooks fire again whenever the averaged model runs "
                          "(evaluation, `update_bn`). A hook object (an instance with `__call__`) or a bound method is "
                          "duplicated with its state, so the copy's calls go to the duplicate; a plain function or "
                          "closure is not copied (`deepcopy` keeps functions as they are), so the list it appends to "
                          "fills from both models. Hooks you add to the model later are not in the copy. `update_parameters` copies "
                          "parameter values only and runs no hooks.",
               "remove": "Nothing of its own to remove. Take your hooks off before building it (or remove them from "
                         "`swa_model.module`'s modules afterwards): a handle from the original model only removes "
                         "the original's hook.",
               "api": "No hook API: `avg_fn` / `multi_avg_fn` (e.g. `get_ema_multi_avg_fn(0.999)`) decide the "
                      "averaging in `update_parameters(model)`; `update_bn(loader, swa_model)` runs the copy's "
                      "forward over the loader (with its hooks) to recompute BatchNorm statistics."},
        "zh": {"summary": "PyTorch 自带的 `AveragedModel`（SWA / EMA）把 `copy.deepcopy(model)` 存为 `.module`，再加一个 "
                          "`n_averaged` 缓冲区。它自己不注册任何钩子，但深拷贝会带走模型当时身上的所有钩子：只要平均模型"
                          "运行（评估、`update_bn`），你的钩子就会再触发一遍。钩子对象（带 `__call__` 的实例）或绑定方法会连同状态"
                          "被复制一份，副本的调用都记到那一份上；普通函数或闭包不会被复制（`deepcopy` 原样保留函数），"
                          "所以它追加的列表会同时收到两个模型的调用。之后再加到原模型上的钩子不会出现在副本里。`update_parameters` 只复制参数值，不运行任何钩子。",
               "remove": "它自己没有东西要去掉。要么在创建它之前取下你的钩子，要么之后到 `swa_model.module` 的模块上去删："
                         "原模型拿到的句柄只能删掉原模型上的那个钩子。",
               "api": "没有钩子 API：`avg_fn` / `multi_avg_fn`（如 `get_ema_multi_avg_fn(0.999)`）决定 "
                      "`update_parameters(model)` 怎样平均；`update_bn(loader, swa_model)` 在数据上跑副本的前向（连同"
                      "它的钩子）来重算 BatchNorm 统计量。"}},
    surprises=(
        {"fact": "facts.copied_hooks",
         "en": "Your hooks fire in the averaged copy, and `handle.remove()` on the original model does not stop "
               "them there.",
         "zh": "你的钩子会在平均模型的副本里触发，而在原模型上调用 `handle.remove()` 并不能让副本里的停下来。"},
        {"fact": "facts.stateful_hook",
         "en": "A hook object with state (an instance with `__call__`, or a bound method of one) is deep-copied: "
               "the averaged model writes into its own copy, and the one you hold stays empty. A plain function or "
               "closure is not copied: the list it appends to, the one you hold, fills from the averaged model too.",
         "zh": "带状态的钩子对象（带 `__call__` 的实例，或它的绑定方法）会被深拷贝：平均模型写进的是它自己的那份，"
               "你手里那份一直是空的。普通函数或闭包不会被复制：它追加的列表，也就是你手里的那个，同样会收到平均模型"
               "的调用。"}),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from torch.optim.swa_utils import AveragedModel
    return AveragedModel(model)


class _Recorder:
    """A stateful forward hook: counts its calls (called itself, or through its bound method ``record``)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, module, args, output) -> None:
        self.calls += 1

    def record(self, module, args, output) -> None:
        self.calls += 1


def facts() -> dict:
    """Where the user's hooks fire once the model is averaged: a closure, a removed one, a stateful object, one
    added later; during ``update_parameters`` and ``update_bn``."""
    from torch.optim.swa_utils import update_bn
    torch.manual_seed(0)
    model, log, recorder, holder, closure_calls = build(), [], _Recorder(), _Recorder(), []
    model[0].register_forward_hook(lambda m, a, o: log.append("closure hook"))

    def closure(module, args, output):  # a plain function over a list of the caller's
        closure_calls.append(module)

    model[0].register_forward_hook(closure)
    model[0].register_forward_hook(holder.record)
    removed = model[0].register_forward_hook(lambda m, a, o: log.append("hook removed from the original"))
    model[0].register_forward_hook(recorder)
    swa = apply(model)
    removed.remove()
    model[0].register_forward_hook(lambda m, a, o: log.append("hook added to the original later"))
    swa(*inputs())
    averaged_forward = sorted(set(log))
    log.clear()
    swa.update_parameters(model)
    during_update = list(log)
    loader = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    update_bn(loader, swa)
    bn_calls = log.count("closure hook")
    hooks = list(swa.module[0]._forward_hooks.values())
    copy_recorder = next(h for h in hooks if isinstance(h, _Recorder))
    copy_method = next(h for h in hooks if getattr(h, "__func__", None) is _Recorder.record)
    copy_closure = next(h for h in hooks if getattr(h, "__name__", "") == "closure")
    return {"copied_hooks": {"fire in the averaged model": averaged_forward},
            "stateful_hook": {"calls on yours": recorder.calls, "calls on the copy": copy_recorder.calls,
                              "same object": copy_recorder is recorder,
                              "bound method: calls on yours": holder.calls,
                              "bound method: calls on the copy": copy_method.__self__.calls,
                              "plain function: same object": copy_closure is closure,
                              "plain function: your list's entries from the copy's module":
                                  sum(m is swa.module[0] for m in closure_calls)},
            "update_parameters_hook_calls": len(during_update), "update_bn_hook_calls_for_2_batches": bn_calls}
