"""torch (``torch.profiler.profile``): records ops at the dispatcher and autograd engine level; it adds no hook of any
kind to the model (measured: module, parameter, global and saved-tensor hooks). With ``with_stack=True`` it installs a C
profile function (``sys.setprofile``) instead, which is how it sees ``nn.Module`` calls."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch"
LIBRARY = Library(
    title='torch.profiler', slug="torch_profiler", name="torch", category="measurement",
    entry="with torch.profiler.profile(record_shapes=True, with_modules=True): model(x).sum().backward()",
    names=("torch.profiler.profile", "record_shapes", "with_modules", "with_stack", "record_function",
           "key_averages", "export_chrome_trace", "ProfilerActivity", "schedule", "on_trace_ready"),
    sources=(f"{SRC}/profiler/profiler.py#L295-L307", f"{SRC}/autograd/profiler.py#L269-L276",
             f"{SRC}/autograd/profiler.py#L383-L396"),
    words={
        "en": {"summary": "PyTorch's own profiler records events in the dispatcher (every aten op), the autograd "
                          "engine (every backward node) and `record_function` ranges: no module hook, parameter "
                          "hook, global hook or saved-tensor hook appears while it runs (measured), so it changes no "
                          "hook order. `with_modules=True` is deprecated and does nothing for eager models (no "
                          "module events). `with_stack=True` records `nn.Module: Linear_0`-style events and your "
                          "hook functions by name, through a C profile function set with the interpreter's "
                          "profiling API, which takes the place of a `sys.setprofile` function you had.",
               "remove": "Nothing stays on the model: leaving the `with` block (or `prof.stop()`) ends it. With "
                         "`with_stack=True`, set your own `sys.setprofile` function again afterwards.",
               "api": "No hooks: `record_function('name')` marks ranges; `schedule(...)` with "
                      "`on_trace_ready=` calls you back at the end of each active cycle (driven by `prof.step()`), "
                      "outside the model's hooks."},
        "zh": {"summary": "PyTorch 自带的性能分析器在调度器（每个 aten 算子）、autograd 引擎（每个反向节点）和 "
                          "`record_function` 区间里记录事件：它运行期间模型上不出现任何模块钩子、参数钩子、全局模块钩子或 "
                          "saved-tensor 钩子（已测量），因此不改变任何钩子的顺序。`with_modules=True` 已弃用，对 eager "
                          "模型不起作用（没有模块事件）。`with_stack=True` 会记录 `nn.Module: Linear_0` 这样的事件，也能"
                          "按名字记录你的钩子函数，靠的是通过解释器 profiling 接口设置的 C 级 profile 函数，它会顶替你原来"
                          "用 `sys.setprofile` 设的函数。",
               "remove": "模型上什么也不留：离开 `with` 块（或调用 `prof.stop()`）就结束。用了 `with_stack=True` 的话，"
                         "之后要重新设置你自己的 `sys.setprofile` 函数。",
               "api": "没有钩子：用 `record_function('name')` 标记区间；`schedule(...)` 配合 `on_trace_ready=` 在每个"
                      "活动周期结束时回调（由 `prof.step()` 推动），与模型的钩子无关。"}},
    surprises=(
        {"fact": "facts.module_events",
         "en": "`with_modules=True` gives no module information for an ordinary (eager) model; `with_stack=True` "
               "does.",
         "zh": "对普通（eager）模型，`with_modules=True` 得不到任何模块信息；要用 `with_stack=True`。"},
        {"fact": "facts.your_sys_setprofile_function",
         "en": "With `with_stack=True` a `sys.setprofile` function that was active (a profiler, a tracing tool) is "
               "switched off during the block and is not set back afterwards.",
         "zh": "用 `with_stack=True` 时，原本生效的 `sys.setprofile` 函数（性能分析器、跟踪工具）在块内被停掉，结束后"
               "也不会恢复。"}),
)
TARGET = "0"
_LAST: dict = {}
OPTIONS = {"record_shapes, with_modules": {"record_shapes": True, "with_modules": True},
           "with_stack": {"with_stack": True}}


def apply(model: nn.Module, **options) -> nn.Module:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], **(options or OPTIONS["record_shapes, with_modules"])) as prof:
        model(*inputs()).pow(2).mean().backward()
    _LAST["profile"] = prof  # read by facts()
    return model


def _not_user(model: nn.Module) -> int:
    from ..probe import records
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    active = top is not None and top(False) is not None
    return len([r for r in records(model) if "_user_" not in r["what"]]) + int(active)


def facts() -> dict:
    """For each option set: library hooks seen from the user's forward pre-hook, module events, whether the user's
    hook is named in the trace, and what happens to a ``sys.setprofile`` function set before."""
    import sys
    out: dict = {"hooks_while_profiling": {}, "module_events": {}, "your_hook_named_in_trace": {},
                 "your_sys_setprofile_function": {}}
    for label, options in OPTIONS.items():
        torch.manual_seed(0)
        model, seen = build(), {}

        def _user_named_hook(module, args, model=model, seen=seen):
            seen.update(hooks=_not_user(model), profile_function=sys.getprofile() is _nothing)

        model[0].register_forward_pre_hook(_user_named_hook)
        sys.setprofile(_nothing)
        try:
            apply(model, **options)
            names = {e.name for e in _LAST.pop("profile").events()}
            after = sys.getprofile() is _nothing
        finally:
            sys.setprofile(None)
        out["hooks_while_profiling"][label] = seen["hooks"]
        out["module_events"][label] = sorted(n for n in names if n.startswith("nn.Module:"))
        out["your_hook_named_in_trace"][label] = any(n.endswith("_user_named_hook") for n in names)
        out["your_sys_setprofile_function"][label] = {"during": seen["profile_function"], "after": after}
    return out


def _nothing(frame, event, arg) -> None:
    """A user's ``sys.setprofile`` function that does nothing."""
