"""torch (``torch.distributed._tools.mem_tracker.MemTracker``): a dispatch mode that attributes memory to modules; inside
its ``with`` block it adds global module hooks (``ModTracker``), a gradient hook and a post-accumulate-grad hook on
every parameter, global optimizer-step hooks, and replaces ``torch.UntypedStorage.resize_``; all undone on exit."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/distributed/_tools"
LIBRARY = Library(
    title='MemTracker', slug="mem_tracker", name="torch", category="distributed and memory",
    entry="tracker = MemTracker(); tracker.track_external(model, optimizer); with tracker: train_step()",
    names=("MemTracker", "track_external", "reset_mod_stats", "get_tracker_snapshot", "display_snapshot",
           "display_modulewise_snapshots", "ModTracker", "register_user_hooks", "_track_module_params_and_buffers",
           "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook", "UntypedStorage.resize_"),
    sources=(f"{SRC}/mem_tracker.py#L483-L500", f"{SRC}/mem_tracker.py#L573-L611",
             f"{SRC}/mem_tracker.py#L754-L786", f"{SRC}/mem_tracker.py#L881-L912",
             f"{SRC}/mod_tracker.py#L250-L259"),
    words={
        "en": {"summary": "PyTorch's own (private, `torch.distributed._tools`) `MemTracker` is a `TorchDispatchMode` "
                          "that runs on the CPU too. Inside its `with` block it registers a global forward pre-hook "
                          "and a global forward hook (`always_call=True`) through `ModTracker`, a `register_hook` "
                          "and a `register_post_accumulate_grad_hook` on every parameter of each module as the "
                          "module first runs, global optimizer step pre/post hooks, and monkey-patches "
                          "`torch.UntypedStorage.resize_`. No saved-tensor hooks. Its parameter hooks come after "
                          "yours that were already there.",
               "remove": "Leaving the `with` block removes all of it (checked: nothing left on the parameters, the "
                         "global dicts or `resize_`). Enter it again only after `tracker.reset_mod_stats()`.",
               "api": "No callbacks for users: `track_external(model, optimizer)` before the block, then "
                      "`get_tracker_snapshot('peak')`, `display_snapshot('peak')` and "
                      "`display_modulewise_snapshots()` after it."},
        "zh": {"summary": "PyTorch 自带的（私有模块 `torch.distributed._tools`）`MemTracker` 是一个 `TorchDispatchMode`，"
                          "在 CPU 上也能用。在它的 `with` 块里，它通过 `ModTracker` 注册一个全局前向前置钩子和一个全局前向"
                          "钩子（`always_call=True`），在每个模块第一次运行时给它的每个参数挂 `register_hook` 和 "
                          "`register_post_accumulate_grad_hook`，注册全局的优化器 step 前后钩子，并替换 "
                          "`torch.UntypedStorage.resize_`。不用 saved-tensor 钩子。它的参数钩子排在你已有的钩子之后。",
               "remove": "离开 `with` 块就全部撤掉（已验证：参数上、全局字典里、`resize_` 都恢复原样）。再次进入之前要先"
                         "调用 `tracker.reset_mod_stats()`。",
               "api": "没有面向用户的回调：块之前调用 `track_external(model, optimizer)`，块之后用 "
                      "`get_tracker_snapshot('peak')`、`display_snapshot('peak')`、`display_modulewise_snapshots()` "
                      "查看。"}},
    surprises=(
        {"fact": "facts.during_the_block",
         "en": "Besides hooks, `MemTracker` replaces `torch.UntypedStorage.resize_` for the whole process while "
               "its block runs: any other code that resizes storages goes through it.",
         "zh": "除了钩子，`MemTracker` 在块运行期间还替换了整个进程的 `torch.UntypedStorage.resize_`：别的代码调整存储"
               "大小时也会经过它。"},
        {"fact": "facts.second_block_without_reset",
         "en": "Entering the same tracker for a second step raises unless `reset_mod_stats()` is called first.",
         "zh": "同一个 tracker 第二次进入（第二个训练步）会报错，除非先调用 `reset_mod_stats()`。"}),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    from torch.distributed._tools.mem_tracker import MemTracker
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        model(*inputs()).pow(2).mean().backward()
    return model


def _state(model: nn.Module, resize) -> dict:
    from torch.nn.modules import module as module_globals
    from torch.optim import optimizer as optimizer_globals
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return {"global module hooks": len(module_globals._global_forward_pre_hooks) + len(
                module_globals._global_forward_hooks),
            "parameter hooks": sum(len(p._backward_hooks or {}) + len(p._post_accumulate_grad_hooks or {})
                                   for p in model.parameters()),
            "global optimizer hooks": len(optimizer_globals._global_optimizer_pre_hooks) + len(
                optimizer_globals._global_optimizer_post_hooks),
            "UntypedStorage.resize_ replaced": torch.UntypedStorage.resize_ is not resize,
            "saved-tensor hooks active": None if top is None else top(False) is not None}


def facts() -> dict:
    """What is in place inside one training step under the tracker (seen from the user's forward pre-hook) and after
    it; a second block without ``reset_mod_stats``."""
    from torch.distributed._tools.mem_tracker import MemTracker
    torch.manual_seed(0)
    model, seen, resize = build(), {}, torch.UntypedStorage.resize_
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = model[0].register_forward_pre_hook(lambda m, a: seen.update(during=_state(model, resize)))
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        model(*inputs()).sum().backward()
        optimizer.step()
    handle.remove()
    after = _state(model, resize)
    try:
        with tracker:
            model(*inputs()).sum().backward()
        again = "runs"
    except Exception as exc:  # noqa: BLE001 - the refusal is the fact
        again = f"raises {type(exc).__name__}"
    return {"during_the_block": seen["during"], "after_the_block": after, "second_block_without_reset": again}
