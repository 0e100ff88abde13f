"""accelerate: ``cpu_offload`` / ``dispatch_model`` put an ``AlignDevicesHook`` on each module by replacing its
``forward`` on the instance (``add_hook_to_module``), not with PyTorch's hook dicts; an offloaded module's weights rest
on the ``meta`` device outside that ``forward``, where a user's module hooks run."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

LIBRARY = Library(
    slug="accelerate", name="accelerate", category="distributed and memory",
    entry="accelerate.cpu_offload(model, execution_device='cpu')",
    names=("add_hook_to_module", "remove_hook_from_module", "ModelHook", "AlignDevicesHook", "SequentialHook",
           "CpuOffload", "cpu_offload", "cpu_offload_with_hook", "dispatch_model", "_hf_hook", "_old_forward",
           "weights_map", "PrefixedDataset", "offload_dir", "device_map"),
    sources=("https://github.com/huggingface/accelerate/blob/v1.15.0/src/accelerate/hooks.py",
             "https://github.com/huggingface/accelerate/blob/v1.15.0/src/accelerate/big_modeling.py"),
    words={
        "en": {"summary": "Replaces each module's `forward` on the instance with one that calls its `ModelHook`'s "
                          "`pre_forward` and `post_forward` (moving weights and inputs to the execution device); "
                          "PyTorch's hook dicts stay empty, so the user's module hooks run outside accelerate's "
                          "hook: a forward pre-hook sees the inputs before accelerate moves them. An offloaded module's "
                          "weights rest on the `meta` device and are put in place only inside that `forward`: under "
                          "`cpu_offload`, and under `dispatch_model` for a module offloaded to disk (with an "
                          "accelerator as the main device, a module mapped to `\"cpu\"` is offloaded by the same "
                          "hook, says `big_modeling.py`), your forward pre-hook and forward hook both see `module.weight` on `meta`, with no data (the "
                          "forward hook runs after accelerate has offloaded again). `dispatch_model` with every "
                          "module on one device, none on disk, installs nothing.",
               "remove": "`accelerate.hooks.remove_hook_from_module(model, recurse=True)` puts the class's "
                         "`forward` back (as `_old_forward`) and removes `_hf_hook`. To read an offloaded weight "
                         "from your hook, read accelerate's copy, `module._hf_hook.weights_map[\"weight\"]` (in CPU "
                         "memory, or loaded from `offload_dir`), or read it inside the wrapped `forward` with a "
                         "`ModelHook` of your own added by `add_hook_to_module(module, hook, append=True)`: its "
                         "`pre_forward` runs after accelerate's and sees the weight on the execution device (its "
                         "`post_forward` runs after accelerate has offloaded again, on `meta`).",
               "api": "`ModelHook` with `init_hook`, `pre_forward`, `post_forward`, `detach_hook`; "
                      "`add_hook_to_module(module, hook, append=False)` (with `append=True` several hooks form a "
                      "`SequentialHook`, run in the order added)."},
        "zh": {"summary": "把每个模块实例上的 `forward` 换成一个包装函数，由它调用 `ModelHook` 的 `pre_forward` 和 "
                          "`post_forward`（把权重和输入搬到执行设备上）；PyTorch 的钩子字典仍是空的，所以用户的模块钩子"
                          "在 accelerate 的钩子之外运行：前向前置钩子看到的是 accelerate 搬动之前的输入。被卸载的模块，权重平时放在 "
                          "`meta` 设备上，只在那个替换后的 `forward` 里面才放回原位：在 `cpu_offload` 下，以及在 "
                          "`dispatch_model` 下被卸载到磁盘的模块上（主设备是加速器时，映射到 `\"cpu\"` 的模块也由同一个钩子"
                          "卸载，见 `big_modeling.py`），你的前向前置钩子和前向钩子看到的 "
                          "`module.weight` 都在 `meta` 上，没有数据（前向钩子运行时 accelerate 已经又卸载了一次）。"
                          "所有模块都在同一个设备上、没有放到磁盘的 `dispatch_model` 什么也不装。",
               "remove": "`accelerate.hooks.remove_hook_from_module(model, recurse=True)` 会把类自己的 `forward` "
                         "（存在 `_old_forward` 里）放回去，并删掉 `_hf_hook`。要在自己的钩子里读被卸载的权重，就读 accelerate 的那份："
                         "`module._hf_hook.weights_map[\"weight\"]`（在 CPU 内存里，或从 `offload_dir` 读入）；或者在被"
                         "包装的 `forward` 里面读：用 `add_hook_to_module(module, hook, append=True)` 加一个自己的 "
                         "`ModelHook`，它的 `pre_forward` 在 accelerate 的之后运行，看到的权重在执行设备上（它的 "
                         "`post_forward` 在 accelerate 又卸载之后运行，看到的是 `meta`）。",
               "api": "`ModelHook` 有 `init_hook`、`pre_forward`、`post_forward`、`detach_hook`；"
                      "`add_hook_to_module(module, hook, append=False)`（`append=True` 时多个钩子组成 "
                      "`SequentialHook`，按添加顺序运行）。"},
    },
    surprises=({"fact": "probe.forward_replaced",
                "en": "accelerate's offloading is not a hook in PyTorch's sense: it replaces `forward` on every "
                      "module instance, so `model._forward_hooks` shows nothing while every forward is wrapped.",
                "zh": "accelerate 的卸载并不是 PyTorch 意义上的钩子：它替换了每个模块实例的 `forward`，"
                      "所以 `model._forward_hooks` 里什么也没有，而每次前向都被包了一层。"},
               {"fact": "facts.your_hooks_see_weight_on",
                "en": "Under `cpu_offload`, and under `dispatch_model` for a module offloaded to disk, your forward "
                      "pre-hook and forward hook see `module.weight` on the `meta` device, with no data; "
                      "`module._hf_hook.weights_map[\"weight\"]` holds the real one, and an appended `ModelHook`'s "
                      "`pre_forward` sees it in place.",
                "zh": "在 `cpu_offload` 下，以及在 `dispatch_model` 下被卸载到磁盘的模块上，你的前向前置钩子和前向钩子"
                      "看到的 `module.weight` 都在 `meta` 设备上，没有数据；真正的权重在 "
                      "`module._hf_hook.weights_map[\"weight\"]` 里，追加的 `ModelHook` 的 `pre_forward` 看到的是放回"
                      "原位的权重。"},
               {"fact": "facts.dispatch_model_on_one_device",
                "en": "`dispatch_model` with every module on one device (`device_map={\"\": \"cpu\"}`) installs "
                      "nothing: no `forward` is replaced and no `_hf_hook` is set.",
                "zh": "所有模块都在同一个设备上的 `dispatch_model`（`device_map={\"\": \"cpu\"}`）什么也不装：没有替换"
                      "任何 `forward`，也没有设置 `_hf_hook`。"}),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    from accelerate import cpu_offload
    return cpu_offload(model, execution_device=torch.device("cpu"))


def remove(model: nn.Module) -> nn.Module:
    from accelerate.hooks import remove_hook_from_module
    return remove_hook_from_module(model, recurse=True)


def _seen_by_your_hooks(model: nn.Module, module: nn.Module, wrap) -> dict:
    """The device of ``module.weight`` as a user's forward pre-hook and forward hook see it, once ``wrap`` (accelerate's
    entry point) has run; what ``module._hf_hook.weights_map`` holds; and whether the output stays right."""
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    name = next(n for n, m in model.named_modules() if m is module)
    expected = build()
    expected.load_state_dict(reference)
    seen = {}
    module.register_forward_pre_hook(lambda m, args: seen.__setitem__("forward pre-hook", m.weight.device.type))
    module.register_forward_hook(lambda m, args, out: seen.__setitem__("forward hook", m.weight.device.type))
    wrapped = wrap(model)
    right = torch.allclose(wrapped(*inputs()), expected(*inputs()))
    kept = module._hf_hook.weights_map["weight"]
    return {**seen, "output right": right,
            "weights_map['weight']": {"device": kept.device.type, "equal to the weight": torch.equal(
                kept, reference[f"{name}.weight"])}}


def facts() -> dict:
    import tempfile

    from accelerate import cpu_offload, dispatch_model
    from accelerate.hooks import ModelHook, add_hook_to_module

    cpu = torch.device("cpu")
    torch.manual_seed(0)
    model = build()
    offloaded = _seen_by_your_hooks(model, model[0], lambda m: cpu_offload(m, execution_device=cpu))
    torch.manual_seed(0)
    model = build()
    with tempfile.TemporaryDirectory() as folder:
        on_disk = _seen_by_your_hooks(model, model[2], lambda m: dispatch_model(
            m, device_map={"0": "cpu", "1": "cpu", "2": "disk"}, main_device="cpu", offload_dir=folder))

    class Look(ModelHook):
        def __init__(self, seen):
            self.seen = seen

        def pre_forward(self, module, *args, **kwargs):
            self.seen["pre_forward"] = module.weight.device.type
            return args, kwargs

        def post_forward(self, module, output):
            self.seen["post_forward"] = module.weight.device.type
            return output

    torch.manual_seed(0)
    model, appended = cpu_offload(build(), execution_device=cpu), {}
    add_hook_to_module(model[0], Look(appended), append=True)
    model(*inputs())
    torch.manual_seed(0)
    one = dispatch_model(build(), device_map={"": "cpu"})
    return {"your_hooks_see_weight_on": {"cpu_offload": offloaded, "dispatch_model, a module on disk": on_disk},
            "appended_model_hook_sees_weight_on": appended,
            "dispatch_model_on_one_device": {
                "forward replaced on": [n or "(root)" for n, m in one.named_modules() if "forward" in vars(m)],
                "_hf_hook on": [n or "(root)" for n, m in one.named_modules() if hasattr(m, "_hf_hook")]}}
