"""torch (``torch.utils.flop_counter.FlopCounterMode``): a dispatch mode that counts FLOPs, attributed to modules by a
``ModuleTracker`` whose global forward pre-hook / forward hook and multi-grad hooks exist only inside the ``with``
block."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/utils"
LIBRARY = Library(
    title='FlopCounterMode', slug="flop_counter", name="torch", category="measurement",
    entry="with torch.utils.flop_counter.FlopCounterMode(display=False) as counter: model(x).sum().backward()",
    names=("FlopCounterMode", "get_flop_counts", "get_total_flops", "get_table", "ModuleTracker", "mod_tracker",
           "register_flop_formula", "TorchDispatchMode"),
    sources=(f"{SRC}/flop_counter.py#L1125-L1147", f"{SRC}/module_tracker.py#L128-L160"),
    words={
        "en": {"summary": "PyTorch's own `FlopCounterMode` counts FLOPs in a `TorchDispatchMode` (no hooks for that) "
                          "and attributes them with a `ModuleTracker`: for the `with` block only, a global forward "
                          "pre-hook and a global forward hook on every module, and multi-grad hooks on each module's "
                          "inputs and outputs for backward. Global hooks run before a module's own, so FLOPs of ops in "
                          "your forward pre-hook count for the module, those in your forward hook for its parent.",
               "remove": "Leave the `with` block: the dispatch mode and all the tracker's hooks go; nothing stays on "
                         "the model. Run the backward inside the block too, or it is not counted.",
               "api": "No callbacks: `get_total_flops()`, `get_flop_counts()` (per module name, e.g. "
                      "`Sequential.0`, then per op) and `get_table(depth)` after the block; "
                      "`register_flop_formula` adds a formula for an op."},
        "zh": {"summary": "PyTorch 自带的 `FlopCounterMode` 在一个 `TorchDispatchMode` 里统计 FLOPs（这部分不用钩子），"
                          "再用 `ModuleTracker` 把它们归到模块：仅在 `with` 块内，为所有模块注册一个全局前向前置钩子和一个"
                          "全局前向钩子，并在每个模块的输入、输出上挂多梯度钩子供反向使用。全局模块钩子先于模块自己的钩子"
                          "运行，所以你的前向前置钩子里的运算记在该模块名下，前向钩子里的运算则记在它的父模块名下。",
               "remove": "离开 `with` 块即可：dispatch mode 和 tracker 的钩子全部撤掉，模型上什么也不留。反向也要在块内"
                         "执行，否则不计入。",
               "api": "没有回调：块结束后用 `get_total_flops()`、`get_flop_counts()`（按模块名如 `Sequential.0`，再按"
                      "算子）和 `get_table(depth)` 读取；`register_flop_formula` 为算子添加公式。"}},
    surprises=(
        {"fact": "facts.flops_of_a_matmul_in_your_hook",
         "en": "A matmul in your forward hook is counted for the parent module, not for the module you hooked: the "
               "tracker's global forward hook has already taken the module off its stack.",
         "zh": "你在前向钩子里做的矩阵乘法算在父模块头上，而不是你挂钩的那个模块：tracker 的全局前向钩子此时已把它"
               "移出了栈。"},
        {"fact": "facts.backward_after_the_block",
         "en": "A backward run after the `with` block is not counted at all: the totals hold only the forward.",
         "zh": "在 `with` 块之后执行的反向完全不计：总数里只有前向。"}),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False):
        model(*inputs()).pow(2).mean().backward()
    return model


def _per_module(counter) -> dict[str, int]:
    return {name: int(sum(ops.values())) for name, ops in sorted(counter.get_flop_counts().items())}


def facts() -> dict:
    """Where FLOPs of a matmul done in the user's forward pre-hook / forward hook are counted; the per-module totals
    with the backward inside and after the block; the global hooks left afterwards."""
    from torch.nn.modules import module as module_globals
    from torch.utils.flop_counter import FlopCounterMode
    torch.manual_seed(0)
    square = torch.randn(16, 16)
    attributed = {}
    for kind in ("forward_pre", "forward"):
        model = build()
        register = getattr(model[0], f"register_{kind}_hook")
        handle = register(lambda *args: [square @ square] and None)  # 2 * 16**3 FLOPs, returns None
        with FlopCounterMode(display=False) as counter:
            model(*inputs())
        with_hook = _per_module(counter)
        handle.remove()
        with FlopCounterMode(display=False) as counter:
            model(*inputs())
        attributed[kind] = sorted(k for k, v in with_hook.items() if v != _per_module(counter).get(k))
    model = build()
    with FlopCounterMode(display=False) as inside:
        model(*inputs()).sum().backward()
    with FlopCounterMode(display=False) as before:
        out = model(*inputs())
    out.sum().backward()
    left = len(module_globals._global_forward_pre_hooks) + len(module_globals._global_forward_hooks)
    return {"flops_of_a_matmul_in_your_hook": {f"your {k} hook: counted for": v for k, v in attributed.items()},
            "backward_after_the_block": {"forward and backward inside": _per_module(inside),
                                         "backward after the block": _per_module(before)},
            "global_hooks_left_after_the_block": left}
