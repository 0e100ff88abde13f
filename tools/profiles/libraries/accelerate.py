"""accelerate: ``cpu_offload`` / ``dispatch_model`` put an ``AlignDevicesHook`` on each module by replacing its
``forward`` on the instance (``add_hook_to_module``), not with PyTorch's hook dicts."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

LIBRARY = Library(
    slug="accelerate", name="accelerate", category="distributed and memory",
    entry="accelerate.cpu_offload(model, execution_device='cpu')",
    names=("add_hook_to_module", "remove_hook_from_module", "ModelHook", "AlignDevicesHook", "SequentialHook",
           "CpuOffload", "cpu_offload", "cpu_offload_with_hook", "dispatch_model", "_hf_hook", "_old_forward"),
    sources=("https://github.com/huggingface/accelerate/blob/v1.15.0/src/accelerate/hooks.py",),
    words={
        "en": {"summary": "Replaces each module's `forward` on the instance with one that calls its `ModelHook`'s "
                          "`pre_forward` and `post_forward` (moving weights and inputs to the execution device); "
                          "PyTorch's hook dicts stay empty, so the user's module hooks run outside accelerate's "
                          "hook: a forward pre-hook sees the inputs before accelerate moves them.",
               "remove": "`accelerate.hooks.remove_hook_from_module(model, recurse=True)` puts the class's "
                         "`forward` back (as `_old_forward`) and removes `_hf_hook`.",
               "api": "`ModelHook` with `init_hook`, `pre_forward`, `post_forward`, `detach_hook`; "
                      "`add_hook_to_module(module, hook, append=False)` (with `append=True` several hooks form a "
                      "`SequentialHook`, run in the order added)."},
        "zh": {"summary": "把每个模块实例上的 `forward` 换成一个包装函数，由它调用 `ModelHook` 的 `pre_forward` 和 "
                          "`post_forward`（把权重和输入搬到执行设备上）；PyTorch 的钩子字典仍是空的，所以用户的模块钩子"
                          "在 accelerate 的钩子之外运行：前向前置钩子看到的是 accelerate 搬动之前的输入。",
               "remove": "`accelerate.hooks.remove_hook_from_module(model, recurse=True)` 会把类自己的 `forward` "
                         "（存在 `_old_forward` 里）放回去，并删掉 `_hf_hook`。",
               "api": "`ModelHook` 有 `init_hook`、`pre_forward`、`post_forward`、`detach_hook`；"
                      "`add_hook_to_module(module, hook, append=False)`（`append=True` 时多个钩子组成 "
                      "`SequentialHook`，按添加顺序运行）。"},
    },
    surprises=({"fact": "probe.forward_replaced",
                "en": "accelerate's offloading is not a hook in PyTorch's sense: it replaces `forward` on every "
                      "module instance, so `model._forward_hooks` shows nothing while every forward is wrapped.",
                "zh": "accelerate 的卸载并不是 PyTorch 意义上的钩子：它替换了每个模块实例的 `forward`，"
                      "所以 `model._forward_hooks` 里什么也没有，而每次前向都被包了一层。"},),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    from accelerate import cpu_offload
    return cpu_offload(model, execution_device=torch.device("cpu"))


def remove(model: nn.Module) -> nn.Module:
    from accelerate.hooks import remove_hook_from_module
    return remove_hook_from_module(model, recurse=True)
