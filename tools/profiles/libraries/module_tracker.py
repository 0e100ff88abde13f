"""torch (``torch.utils.module_tracker.ModuleTracker``): for the ``with`` block, a global forward pre-hook and forward hook
that keep ``parents`` (the modules running now), plus multi-grad hooks on each module's inputs and outputs for the
backward; all removed on exit."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/utils/module_tracker.py"
LIBRARY = Library(
    title='ModuleTracker', slug="module_tracker", name="torch", category="measurement",
    entry="with torch.utils.module_tracker.ModuleTracker() as tracker: loss = model(x).sum(); loss.backward()",
    names=("ModuleTracker", "parents", "is_bw", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_multi_grad_hook", "_fw_pre_hook", "_fw_post_hook"),
    sources=(f"{SRC}#L25-L39", f"{SRC}#L101-L148", f"{SRC}#L150-L160"),
    words={
        "en": {"summary": "PyTorch's own `ModuleTracker` registers, for its `with` block only, a global forward "
                          "pre-hook and a global forward hook on every module (`register_module_forward_pre_hook`, "
                          "`register_module_forward_hook`); they add and remove the module's name in "
                          "`tracker.parents`, and put multi-grad hooks on the module's inputs and outputs to do the "
                          "same in backward. Global hooks run before a module's own, so inside your forward hook the "
                          "module has already left `parents`.",
               "remove": "Leave the `with` block: `__exit__` removes both global hooks and every multi-grad hook. "
                         "A backward run after the block is not tracked.",
               "api": "No callbacks: read `tracker.parents` (names like `Sequential.0`, always with `Global`) and "
                      "`tracker.is_bw` from code running inside the block (an op override, a dispatch mode, your "
                      "own hooks)."},
        "zh": {"summary": "PyTorch 自带的 `ModuleTracker` 只在 `with` 块内，为所有模块注册一个全局前向前置钩子和一个全局前向"
                          "钩子（`register_module_forward_pre_hook`、`register_module_forward_hook`）：它们在 "
                          "`tracker.parents` 里加入、删除模块名，并在模块的输入和输出上挂多梯度钩子，让反向也这样记录。"
                          "全局模块钩子先于模块自己的钩子运行，所以在你的前向钩子里，这个模块已经离开了 `parents`。",
               "remove": "离开 `with` 块即可：`__exit__` 会删掉两个全局模块钩子和所有多梯度钩子。块外执行的反向不会被跟踪。",
               "api": "没有回调：在块内运行的代码（算子替换、dispatch mode、你自己的钩子）里读取 `tracker.parents`"
                      "（形如 `Sequential.0` 的名字，总含有 `Global`）和 `tracker.is_bw`。"}},
    surprises=(
        {"fact": "facts.parents_seen_by_your_hooks",
         "en": "In your forward hook the module is no longer in `tracker.parents`, and in your backward pre-hook it "
               "is not in it yet: anything that reads `parents` from those hooks sees only the parent module.",
         "zh": "在你的前向钩子里，这个模块已不在 `tracker.parents` 中；在你的反向前置钩子里，它还没进去：在这些钩子里"
               "读取 `parents` 的代码只看得到父模块。"},),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    from torch.utils.module_tracker import ModuleTracker
    with ModuleTracker():
        model(*inputs()).pow(2).mean().backward()
    return model


def facts() -> dict:
    """What ``parents`` / ``is_bw`` say inside the user's four module hooks on the last layer, and the global hooks
    left after the block."""
    from torch.nn.modules import module as module_globals
    from torch.utils.module_tracker import ModuleTracker
    torch.manual_seed(0)
    model, seen, tracker = build(), {}, ModuleTracker()

    def keep(label):
        return lambda *args: seen.__setitem__(label, {"parents": sorted(tracker.parents), "is_bw": tracker.is_bw})

    model[2].register_forward_pre_hook(keep("forward_pre"))
    model[2].register_forward_hook(keep("forward"))
    model[2].register_full_backward_pre_hook(keep("backward_pre"))
    model[2].register_full_backward_hook(keep("backward"))
    with tracker:
        model(*inputs()).sum().backward()
    left = len(module_globals._global_forward_pre_hooks) + len(module_globals._global_forward_hooks)
    return {"parents_seen_by_your_hooks": seen, "global_hooks_left_after_the_block": left}
