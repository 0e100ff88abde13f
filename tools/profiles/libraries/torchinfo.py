"""torchinfo: ``summary(model, input_data=...)`` registers a forward pre-hook and a forward hook on every module, runs
one forward in ``eval`` mode under ``no_grad`` and removes the hooks in ``finally``; what it leaves behind is the
training mode it restores and a module-level cache that holds the model."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/TylerYep/torchinfo/blob/v1.8.0/torchinfo/torchinfo.py"
LIBRARY = Library(
    slug="torchinfo", name="torchinfo", category="measurement",
    entry="torchinfo.summary(model, input_data=x, verbose=0)",
    names=("summary", "forward_pass", "apply_hooks", "construct_pre_hook", "construct_hook", "LayerInfo",
           "ModelStatistics", "_cached_forward_pass", "cache_forward_pass", "mode"),
    sources=(_SRC + "#L49", _SRC + "#L260-L319", _SRC + "#L568-L669"),
    words={
        "en": {"summary": "For the length of one call, every module gets a forward pre-hook (which creates its "
                          "`LayerInfo`) and a forward hook (which records input and output sizes); one forward "
                          "runs with the model switched to `eval()` (the default `mode`) under `torch.no_grad()`, "
                          "and the hooks are removed in `finally`. The user's hooks run in that forward, in eval "
                          "mode and without gradients.",
               "remove": "Nothing stays registered. Afterwards `model.train(saved)` is called on the root, which "
                         "resets every submodule to the root's mode: put back a submodule you had in `eval()` "
                         "yourself. The summary is kept in `torchinfo.torchinfo._cached_forward_pass` (keyed by "
                         "the model's class name) with references to the modules, even when "
                         "`cache_forward_pass=False`: clear that dict to let the model be freed.",
               "api": "No hook API of its own. Its hooks are registered when `summary` is called, so on each "
                      "module they run after the user's forward pre-hooks and forward hooks registered earlier; "
                      "a user's hook that changes the output changes the sizes torchinfo reports."},
        "zh": {"summary": "在一次调用期间，每个模块都会挂上一个前向前置钩子（创建它的 `LayerInfo`）和一个前向钩子"
                          "（记录输入输出的形状）；随后在 `torch.no_grad()` 下跑一遍前向，模型先被切到 `eval()`"
                          "（`mode` 的默认值），钩子在 `finally` 里移除。用户的钩子也会在这遍前向中运行，此时处于 "
                          "eval 模式且没有梯度。",
               "remove": "调用结束后没有钩子留下。但它最后对根模块调用 `model.train(saved)`，会把所有子模块都改成根"
                         "模块的模式：你自己设成 `eval()` 的子模块需要重新设置。汇总结果保存在 "
                         "`torchinfo.torchinfo._cached_forward_pass` 里（以模型的类名为键），引用着各个模块，"
                         "即使 `cache_forward_pass=False` 也是如此：要让模型能被回收，得清空这个字典。",
               "api": "torchinfo 没有自己的钩子 API。它的钩子在调用 `summary` 时才注册，所以在每个模块上都排在"
                      "用户先前注册的前向前置钩子和前向钩子之后；用户钩子若修改了输出，torchinfo 报告的形状也随之改变。"},
    },
    surprises=(
        {"fact": "facts.submodule_eval_kept",
         "en": "`summary` does not restore each module's mode: a `Dropout` you had put in `eval()` inside a "
               "training model is back in training mode after the call.",
         "zh": "`summary` 不会逐个恢复模块的模式：在训练模式的模型里被你单独设成 `eval()` 的 `Dropout`，"
               "调用之后又回到了训练模式。"},
        {"fact": "facts.model_alive_after_summary",
         "en": "The model stays alive after `summary` returns and the last reference is dropped: a module-level "
               "cache keyed by class name holds its `LayerInfo`s, even with `cache_forward_pass=False`.",
         "zh": "`summary` 返回、最后一个引用也删掉之后，模型仍未被回收：一个以类名为键的模块级缓存保存着它的 "
               "`LayerInfo`，即使 `cache_forward_pass=False`。"},
        {"fact": "facts.user_forward_hook_grad_enabled",
         "en": "The user's hooks do run during `summary`, but under `no_grad` and in eval mode: a hook that "
               "registers tensor hooks or counts training steps misbehaves there.",
         "zh": "`summary` 期间用户的钩子确实会运行，但处在 `no_grad` 和 eval 模式下：在钩子里注册张量钩子或统计"
               "训练步数的代码会在这里出错或计错。"},
    ),
)
TARGET = "0"
PROBES = {"deepcopy", "compile", "checkpoint", "accumulate"}
SKIPPED = {p: "torchinfo removes its hooks before `summary` returns: nothing of it runs in a copy, a compiled or "
              "checkpointed forward, or a second backward" for p in PROBES}


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from torchinfo import summary
    summary(model, input_data=list(inputs()), verbose=0)
    return model


def facts() -> dict:
    import gc
    import weakref

    import torchinfo.torchinfo as ti
    from torchinfo import summary

    from hooklab.systems import hook_owner
    model = build().train()
    model[1].eval()
    seen: list[dict] = []

    def _user_forward(module, args, output):
        seen.append({"grad": torch.is_grad_enabled(), "training": module.training,
                     "order": ["yours" if fn is _user_forward else hook_owner(fn)
                               for fn in module._forward_hooks.values()]})
    handle = model[0].register_forward_hook(_user_forward)
    summary(model, input_data=list(inputs()), verbose=0)
    handle.remove()
    out = {"user_forward_hook_calls": len(seen), "user_forward_hook_grad_enabled": seen[0]["grad"],
           "user_forward_hook_sees_training": seen[0]["training"], "forward_hook_order": seen[0]["order"],
           "hooks_left": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()),
           "root_training_restored": model.training, "submodule_eval_kept": not model[1].training}
    ref = weakref.ref(model)
    del model
    gc.collect()
    out["model_alive_after_summary"] = ref() is not None
    ti._cached_forward_pass.clear()
    gc.collect()
    out["freed_after_clearing_cache"] = ref() is None
    return out
