"""torchao: ``quantize_`` keeps each ``nn.Linear`` (and its module hooks) but replaces its ``weight`` by a new
``Parameter`` holding a quantized tensor subclass that does not require gradients: hooks on the old weight tensor
stay behind on a tensor the model no longer uses."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/pytorch/ao/blob/v0.18.0/torchao/quantization/"
LIBRARY = Library(
    slug="torchao", name="torchao", category="quantization and compression",
    entry="torchao.quantization.quantize_(model, Int8WeightOnlyConfig())",
    names=("quantize_", "Int8WeightOnlyConfig", "Int8Tensor", "AOBaseConfig", "filter_fn", "FqnToConfig",
           "_replace_with_custom_fn_if_matches_filter", "register_quantize_module_handler", "TorchAOBaseTensor"),
    sources=(V + "quant_api.py#L122-L165", V + "quant_api.py#L275-L347", V + "quant_api.py#L769-L806"),
    words={
        "en": {"summary": "`quantize_` registers no hook. For each module that `filter_fn` accepts (every "
                          "`nn.Linear` by default) the config's handler sets `module.weight` to a new "
                          "`nn.Parameter(quantized, requires_grad=False)` holding a tensor subclass (`Int8Tensor` "
                          "for int8 weight-only) and sets `extra_repr` on the instance. The module object stays, so "
                          "the user's module hooks stay and fire (backward hooks too, while the output needs a "
                          "gradient: the bias stays trainable); tensor hooks registered on the old weight stay on "
                          "the old tensor and never fire again, and the new weight takes none (it needs no gradient).",
               "remove": "Nothing to remove: quantization is not undone (quantize a fresh copy of the "
                         "full-precision model instead). Re-register weight hooks, if needed, on the new "
                         "parameter (only a tensor that requires gradients takes them).",
               "api": "No hook or callback API; the tensor subclass's `__torch_dispatch__` / `__torch_function__` "
                      "runs inside `F.linear`, i.e. inside the module's `forward`, after the user's forward "
                      "pre-hooks and before its forward hooks."},
        "zh": {"summary": "`quantize_` 不注册任何钩子。对 `filter_fn` 选中的每个模块（默认是所有 `nn.Linear`），"
                          "配置对应的处理函数把 `module.weight` 换成一个新的 `nn.Parameter(quantized, "
                          "requires_grad=False)`，里面装的是张量子类（int8 仅权重量化时是 `Int8Tensor`），并在实例上"
                          "设置 `extra_repr`。模块对象本身不变，所以用户的模块钩子都还在、照常触发（只要输出需要梯度，"
                          "反向钩子也会触发：偏置仍可训练）；而注册在旧权重上的张量钩子留在旧张量上，再也不会触发，新权重也挂不上"
                          "（它不需要梯度）。",
               "remove": "没有可删除的东西：量化不能撤销（要全精度模型就对它的一份新拷贝做量化）。如果需要权重钩子，"
                         "只能在新参数上重新注册（而且只有需要梯度的张量才能注册）。",
               "api": "没有钩子或回调接口；张量子类的 `__torch_dispatch__` / `__torch_function__` 在 `F.linear` "
                      "里面运行，也就是在模块的 `forward` 之内：在用户的前向前置钩子之后、前向钩子之前。"},
    },
    surprises=(
        {"fact": "facts.hooks_on_old_weight_fire",
         "en": "A `register_hook` or `register_post_accumulate_grad_hook` on a `Linear`'s weight is silently "
               "dropped by `quantize_`: the model now holds a new parameter, and the hook stays on the old one.",
         "zh": "`Linear` 权重上的 `register_hook` 或 `register_post_accumulate_grad_hook` 会被 `quantize_` "
               "悄悄丢掉：模型里已经是一个新参数，钩子还留在旧参数上。"},
        {"fact": "facts.hook_on_new_weight",
         "en": "The quantized weight takes no gradient hook at all: it is a `Parameter` with "
               "`requires_grad=False`, and `register_hook` raises.",
         "zh": "量化后的权重根本挂不上梯度钩子：它是 `requires_grad=False` 的 `Parameter`，`register_hook` 直接报错。"},
        {"fact": "probe.survives.loads_fresh_state_dict",
         "en": "A full-precision state dict no longer loads into the quantized model: `load_state_dict` raises "
               "(`copy_` into an `Int8Tensor` expects another quantized tensor).",
         "zh": "全精度的 state dict 再也加载不进量化后的模型：`load_state_dict` 直接报错（往 `Int8Tensor` 里 "
               "`copy_` 要求对方也是量化张量）。"},
    ),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 8, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    quantize_(model, Int8WeightOnlyConfig())
    return model


def facts() -> dict:
    torch.manual_seed(0)
    model = build()
    linear, old = model[0], model[0].weight
    log: list[str] = []
    linear.register_forward_hook(lambda *_: log.append("module forward"))
    linear.register_full_backward_hook(lambda *_: log.append("module backward"))
    old.register_hook(lambda grad: log.append("tensor hook"))
    old.register_post_accumulate_grad_hook(lambda p: log.append("post_accumulate_grad"))
    apply(model)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    model(x).pow(2).mean().backward()
    kept = {"module kept": model[0] is linear, "weight is the old parameter": model[0].weight is old,
            "weight class": type(model[0].weight).__name__,
            "weight data class": type(model[0].weight.data).__name__,
            "weight requires_grad": model[0].weight.requires_grad}
    try:
        model[0].weight.register_hook(lambda grad: None)
        new = "registered"
    except RuntimeError as exc:
        new = f"raises {type(exc).__name__}"
    return {"module_and_weight": kept, "hooks_on_old_weight_fire": {
                "tensor hook": log.count("tensor hook"), "post_accumulate_grad": log.count("post_accumulate_grad")},
            "module_hooks_fire": {"forward": log.count("module forward"), "backward": log.count("module backward")},
            "hook_on_new_weight": new}
