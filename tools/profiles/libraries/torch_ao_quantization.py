"""torch (eager-mode quantization: ``torch.ao.quantization.prepare`` / ``convert``): ``prepare`` deep-copies the model
and prepends an observer forward hook (``_observer_forward_hook``) to each module with a ``qconfig``; ``convert``
swaps the modules for quantized ones and copies their forward (pre-)hooks over, the observer's excepted."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/ao/quantization/quantize.py"
LIBRARY = Library(
    title='torch.ao.quantization (prepare / convert)', slug="torch_ao_quantization", name="torch", category="quantization and compression",
    entry="model.qconfig = torch.ao.quantization.get_default_qconfig('x86'); torch.ao.quantization.prepare(model)",
    names=("prepare", "convert", "_observer_forward_hook", "_observer_forward_pre_hook", "activation_post_process",
           "swap_module", "QuantStub", "DeQuantStub", "get_default_qconfig", "prepare_qat",
           "_remove_activation_post_process", "HistogramObserver"),
    sources=(f"{SRC}#L150-L168", f"{SRC}#L343-L408", f"{SRC}#L411-L433", f"{SRC}#L744-L808"),
    words={
        "en": {"summary": "PyTorch's own (deprecated, still shipped) eager-mode quantization: `prepare(model)` works "
                          "on a deep copy (your hooks come along into it) and gives each module with a `qconfig` a "
                          "child `activation_post_process` (an observer) called by `_observer_forward_hook`, "
                          "registered with `prepend=True`: it records the module's output before any forward hook of "
                          "yours can change it. `convert` replaces each observed module by its quantized class and "
                          "re-registers the old module's forward pre-hooks and forward hooks on it (not the "
                          "observer's, not backward hooks), so your hooks now see quantized tensors.",
               "remove": "`convert(prepared)` drops the observers and their hooks; before that there is no public "
                         "removal (prepare returns no handles). Use `prepare(model, inplace=True)` to keep one "
                         "model instead of a hooked copy.",
               "api": "No hook API of its own: observers are modules (`activation_post_process`) called from a "
                      "forward hook (a forward pre-hook for modules that observe their input), always first in "
                      "that module's hook dict."},
        "zh": {"summary": "PyTorch 自带的（已标记弃用但仍随包提供）eager 模式量化：`prepare(model)` 在深拷贝上操作"
                          "（你的钩子也跟着拷过去），给每个有 `qconfig` 的模块加一个子模块 `activation_post_process`"
                          "（观察器），由以 `prepend=True` 注册的 `_observer_forward_hook` 调用：它记录的是模块的原始输出，"
                          "你的前向钩子还来不及修改。`convert` 把被观察的模块换成量化类，并把旧模块的前向前置钩子和前向钩子"
                          "重新注册到新模块上（观察器的除外，反向钩子也不带），于是你的钩子从此看到的是量化张量。",
               "remove": "`convert(prepared)` 会去掉观察器和它们的钩子；在此之前没有公开的移除方法（prepare 不返回句柄）。"
                         "想只保留一个模型而不是带钩子的副本，用 `prepare(model, inplace=True)`。",
               "api": "没有自己的钩子 API：观察器是模块（`activation_post_process`），由前向钩子调用（观察输入的模块用"
                      "前向前置钩子），永远排在该模块钩子字典的最前面。"}},
    surprises=(
        {"fact": "facts.prepare_returns_a_copy",
         "en": "`prepare` returns a deep copy: your hooks fire in the prepared model, and a hook you add to the "
               "original afterwards never runs during calibration.",
         "zh": "`prepare` 返回的是深拷贝：你的钩子会在准备好的模型里触发，而之后再往原模型上加的钩子在校准时根本不会运行。"},
        {"fact": "facts.after_convert",
         "en": "After `convert` your forward hook is still there and sees `torch.quint8` outputs; a forward pre-hook "
               "registered `with_kwargs=True` is copied without that flag and breaks the converted model.",
         "zh": "`convert` 之后你的前向钩子仍在，但看到的是 `torch.quint8` 输出；以 `with_kwargs=True` 注册的前向前置钩子"
               "被复制时丢了这个标志，转换后的模型一调用就出错。"},
        {"fact": "probe.survives.checkpoint",
         "en": "Under activation checkpointing the observer hook runs again in the recomputation: each calibration "
               "batch is recorded twice.",
         "zh": "在激活检查点下，观察器钩子在重算时又跑一遍：每个校准批次被记录两次。"}),
)
TARGET = "1"
PROBES = {"deepcopy"}
SKIPPED = {"deepcopy": "the probe compares rows whose text holds the observer's state (never ran / saw data), which a "
                       "step changes; measured as a fact"}


def build() -> nn.Module:
    from torch.ao.quantization import DeQuantStub, QuantStub
    return nn.Sequential(QuantStub(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), DeQuantStub())


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from torch.ao.quantization import get_default_qconfig, prepare
    model.qconfig = get_default_qconfig(torch.backends.quantized.engine)
    return prepare(model)


def _observer_hooks(model: nn.Module) -> int:
    return sum(getattr(fn, "__name__", "") == "_observer_forward_hook" for m in model.modules()
               for fn in m._forward_hooks.values())


def facts() -> dict:
    """The copy ``prepare`` makes; what the observer saw against a user's forward hook that changes the output;
    what ``convert`` keeps of the user's hooks and what they see."""
    import copy

    from torch.ao.quantization import convert
    torch.manual_seed(0)
    model, log = build(), []
    model[1].register_forward_hook(lambda m, a, o: o * 0)  # a user's hook that changes the output
    prepared = apply(model)
    model[1].register_forward_pre_hook(lambda m, a: log.append("added to the original after prepare"))
    prepared(*inputs())
    observers = {"prepared": _observer_hooks(prepared), "deepcopy": _observer_hooks(copy.deepcopy(prepared))}
    observer = prepared[1].activation_post_process
    seen_by_observer = bool(observer.max_val > 0)
    prepared[1]._forward_hooks.clear()
    prepared[1].register_forward_pre_hook(lambda m, a: log.append("yours: forward_pre"))
    prepared[1].register_forward_hook(lambda m, a, o: log.append(f"yours: forward ({o.dtype})"))
    prepared[1].register_full_backward_hook(lambda m, gi, go: None)
    prepared(*inputs())
    converted = convert(prepared)
    log.clear()
    converted(*inputs())
    kept = {kind: len(getattr(converted[1], attr)) for kind, attr in (
        ("forward_pre", "_forward_pre_hooks"), ("forward", "_forward_hooks"), ("backward", "_backward_hooks"))}
    prepared2 = apply(build())
    prepared2[1].register_forward_pre_hook(lambda m, args, kwargs: None, with_kwargs=True)
    prepared2(*inputs())
    try:
        convert(prepared2)(*inputs())
        kwargs_hook = "runs"
    except Exception as exc:  # noqa: BLE001 - the failure is the fact
        kwargs_hook = f"raises {type(exc).__name__}"
    return {"prepare_returns_a_copy": {"is_a_copy": prepared is not model, "hook_added_to_original_fires": bool(
                [x for x in log if "original" in x])},
            "observer_hooks_after_deepcopy": observers,
            "observer_saw_output_before_your_hook_zeroed_it": seen_by_observer,
            "after_convert": {"hooks_kept": kept, "your_hooks_fired": log,
                              "class": type(converted[1]).__module__ + "." + type(converted[1]).__name__,
                              "with_kwargs_pre_hook": kwargs_hook}}
