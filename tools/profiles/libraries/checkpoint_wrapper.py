"""torch (``checkpoint_wrapper`` / ``apply_activation_checkpointing``): wraps each selected module in a
``CheckpointWrapper`` whose ``forward`` runs it under ``torch.utils.checkpoint``; the wrapper's state-dict hooks strip
the ``_checkpoint_wrapped_module.`` prefix. The inner module's hooks run again when backward recomputes it."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py"
LIBRARY = Library(
    title="checkpoint_wrapper (FSDP's activation checkpointing)", slug="checkpoint_wrapper", name="torch", category="distributed and memory",
    entry="apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, nn.Linear))",
    names=("checkpoint_wrapper", "apply_activation_checkpointing", "CheckpointWrapper", "ActivationWrapper",
           "CheckpointImpl", "NO_REENTRANT", "REENTRANT", "offload_wrapper", "_checkpoint_wrapped_module",
           "_post_state_dict_hook", "_pre_load_state_dict_hook"),
    sources=(f"{SRC}#L25-L69", f"{SRC}#L72-L103", f"{SRC}#L112-L171", f"{SRC}#L239-L313"),
    words={
        "en": {"summary": "PyTorch's own activation-checkpointing wrapper replaces each selected child by a "
                          "`CheckpointWrapper` holding it as `_checkpoint_wrapped_module`; the wrapper's `forward` "
                          "calls `torch.utils.checkpoint` (non-reentrant by default). It registers only a state-dict "
                          "hook and a load-state-dict pre-hook that strip / add the prefix, so `state_dict()` keys "
                          "stay as before. Hooks you registered earlier now sit on the inner module and fire again "
                          "while backward recomputes it: the forward pre-hook every time, the forward hook only with "
                          "the reentrant variant (non-reentrant recomputation stops as soon as the saved tensors are "
                          "rebuilt). Hooks registered on `model[i]` afterwards land on the wrapper and fire once.",
               "remove": "No unwrap function: build the model again, or put `wrapper._checkpoint_wrapped_module` "
                         "back in its parent yourself. The state dict loads into the unwrapped model as is.",
               "api": "No hook API: `checkpoint_impl=CheckpointImpl.REENTRANT` or `NO_REENTRANT`, "
                      "`checkpoint_fn=` to use another checkpoint function, `check_fn=` to choose the modules; "
                      "`offload_wrapper` does the same with CPU offloading of saved tensors."},
        "zh": {"summary": "PyTorch 自带的激活检查点包装器把选中的每个子模块换成 `CheckpointWrapper`，原模块存为 "
                          "`_checkpoint_wrapped_module`；包装器的 `forward` 调用 `torch.utils.checkpoint`（默认非重入）。"
                          "它只注册一个 state-dict 钩子和一个 load-state-dict 前置钩子，用来去掉 / 加上前缀，所以 "
                          "`state_dict()` 的键不变。你之前注册的钩子现在在内层模块上，反向重算时会再触发：前向前置钩子每次"
                          "都会，前向钩子只有重入版本才会（非重入的重算在保存的张量重建完后就提前停止）。之后注册在 "
                          "`model[i]` 上的钩子落在包装器上，只触发一次。",
               "remove": "没有解包函数：重建模型，或者自己把 `wrapper._checkpoint_wrapped_module` 放回父模块。state dict "
                         "可以原样加载进未包装的模型。",
               "api": "没有钩子 API：`checkpoint_impl=CheckpointImpl.REENTRANT` 或 `NO_REENTRANT`，`checkpoint_fn=` "
                      "换用别的检查点函数，`check_fn=` 选择模块；`offload_wrapper` 做同样的包装，但把保存的张量卸载到 "
                      "CPU。"}},
    surprises=(
        {"fact": "facts.your_hook_calls_per_step",
         "en": "A forward pre-hook on the wrapped module runs twice per step (forward and recomputation), its "
               "forward hook once with the default non-reentrant checkpoint but twice with the reentrant one.",
         "zh": "被包装模块上的前向前置钩子每步运行两次（前向和重算），前向钩子在默认的非重入检查点下只运行一次，在"
               "重入版本下则是两次。"},
        {"fact": "facts.names",
         "en": "`state_dict()` keys are unchanged, but `model.named_parameters()` names gain "
               "`_checkpoint_wrapped_module.` (only the wrapper's own `named_parameters()` strips it): optimizer "
               "groups or freezing rules keyed by parameter name stop matching.",
         "zh": "`state_dict()` 的键不变，但 `model.named_parameters()` 的名字多了 `_checkpoint_wrapped_module.`"
               "（只有包装器自己的 `named_parameters()` 会去掉）：按参数名划分的优化器分组或冻结规则不再匹配。"}),
)
TARGET = "0"
PROBES = {"deepcopy"}
SKIPPED = {"deepcopy": "a deep-copied load-state-dict hook (torch's _WrappedHook) loses its name, so the probe reads "
                       "the kept hook as lost; measured as a fact"}


def apply(model: nn.Module, **options) -> nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    wrap = lambda m: checkpoint_wrapper(m, **options)  # noqa: E731 - the default wrapper with these options
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrap, check_fn=lambda m: isinstance(m, nn.Linear))
    return model


def facts() -> dict:
    """Calls of the user's hooks on the inner module (registered before wrapping) and on the wrapper (after) in one
    step, for both checkpoint variants; parameter names and state-dict keys; the wrapper's hooks in a deep copy."""
    import copy
    from collections import Counter

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl
    calls = {}
    for impl in (CheckpointImpl.NO_REENTRANT, CheckpointImpl.REENTRANT):
        torch.manual_seed(0)
        model, log = build(), []

        def hook(module, where, log=log):
            module.register_forward_pre_hook(lambda *a: log.append(f"{where}: forward_pre"))
            module.register_forward_hook(lambda *a: log.append(f"{where}: forward"))
            module.register_full_backward_hook(lambda *a: log.append(f"{where}: backward"))

        hook(model[2], "inner module (hooked before wrapping)")
        apply(model, checkpoint_impl=impl)
        hook(model[2], "wrapper (hooked after)")
        x = inputs()[0].requires_grad_()  # the reentrant variant needs an input that requires grad
        model(x).sum().backward()
        calls[impl.name] = dict(sorted(Counter(log).items()))
    model = build()
    keys = sorted(model.state_dict())
    apply(model)
    twin = copy.deepcopy(model)
    copied = {"state_dict hooks": len(twin[0]._state_dict_hooks),
              "load_state_dict_pre hooks": len(twin[0]._load_state_dict_pre_hooks),
              "state_dict keys": sorted(twin.state_dict()) == keys}
    return {"your_hook_calls_per_step": calls, "deepcopy": copied,
            "names": {"state_dict keys unchanged": sorted(model.state_dict()) == keys,
                      "model.named_parameters()": [n for n, _ in model.named_parameters()][:2],
                      "wrapper.named_parameters()": [n for n, _ in model[0].named_parameters()]}}
