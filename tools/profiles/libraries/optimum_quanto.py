"""optimum-quanto: ``quantize`` replaces each ``nn.Linear`` by a new ``QLinear`` (the user's module hooks stay on the
old object, which no longer runs), ``freeze`` then replaces its weight by a quantized tensor; with ``activations``
set, each ``QLinear`` registers its own forward pre-hook and forward hook that quantize its input and output."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/huggingface/optimum-quanto/blob/v0.2.7/optimum/quanto/"
LIBRARY = Library(
    slug="optimum_quanto", name="optimum-quanto", import_name="optimum.quanto",
    category="quantization and compression", requirement="optimum-quanto==0.2.7",
    entry="optimum.quanto.quantize(model, weights=qint8); optimum.quanto.freeze(model)",
    names=("quantize", "freeze", "requantize", "qint8", "QLinear", "QModuleMixin", "quantize_module", "from_module",
           "qweight", "quantize_input", "quantize_output", "_quantize_hooks", "disable_output_quantization",
           "WeightQBytesTensor", "ActivationQBytesTensor", "Calibration"),
    sources=(V + "quantize.py#L37-L98", V + "quantize.py#L143-L146", V + "nn/qmodule.py#L131-L135",
             V + "nn/qmodule.py#L209-L232", V + "nn/qmodule.py#L282-L306", V + "nn/qlinear.py#L26-L50"),
    words={
        "en": {"summary": "`quantize(model, weights=qint8)` swaps every supported module for a new `QLinear` / "
                          "`QConv2d` / ... built on the meta device; it takes over the weight and bias "
                          "`Parameter`s and the old module is left with `weight = None`. Nothing from the old "
                          "module's hook dicts is carried over, so the user's module hooks no longer run, while a "
                          "tensor hook on the weight keeps firing until `freeze(model)` replaces the weight by a "
                          "`WeightQBytesTensor` parameter. With `activations=qint8`, each `QLinear` registers "
                          "`quantize_input` (forward pre-hook) and `quantize_output` (forward hook) in PyTorch's "
                          "hook dicts, so hooks registered on it later see quantized activations. A frozen model "
                          "cannot be deep-copied (`WeightQBytesTensor` has no `clone()` that keeps its type).",
               "remove": "No unquantize: load the float model again. `qmodule.disable_output_quantization()` "
                         "removes the output hook; the hooks' handles are in `qmodule._quantize_hooks`. Register "
                         "your hooks again on the new modules (`model.get_submodule(name)`) after `quantize`.",
               "api": "No callback API. On a `QLinear` with activations, `quantize_input` and `quantize_output` "
                      "are registered in `__init__`, so they run before any user hook registered on the new "
                      "module; the weight is quantized inside `forward` (`qweight`)."},
        "zh": {"summary": "`quantize(model, weights=qint8)` 把每个支持的模块换成在 meta 设备上新建的 `QLinear` / "
                          "`QConv2d` 等；新模块接管原来的 weight 和 bias `Parameter`，旧模块只剩 `weight = None`。"
                          "旧模块钩子字典里的东西一样也不会带过去，所以用户的模块钩子不再运行；而权重上的张量钩子"
                          "还会触发，直到 `freeze(model)` 把权重换成 `WeightQBytesTensor` 参数。设置了 "
                          "`activations=qint8` 时，每个 `QLinear` 会在 PyTorch 的钩子字典里注册 `quantize_input`"
                          "（前向前置钩子）和 `quantize_output`（前向钩子），之后注册在它上面的钩子看到的是量化后的激活。"
                          "冻结后的模型无法 `copy.deepcopy`（`WeightQBytesTensor` 没有保持自身类型的 `clone()`）。",
               "remove": "没有反量化：重新加载浮点模型。`qmodule.disable_output_quantization()` 删掉输出钩子；这些钩子"
                         "的句柄在 `qmodule._quantize_hooks` 里。`quantize` 之后要在新模块（`model.get_submodule(name)`）"
                         "上重新注册自己的钩子。",
               "api": "没有回调接口。带激活量化的 `QLinear` 在 `__init__` 里就注册了 `quantize_input` 和 "
                      "`quantize_output`，所以它们排在用户之后注册到新模块上的任何钩子之前；权重在 `forward` 里"
                      "（`qweight`）量化。"},
    },
    surprises=(
        {"fact": "facts.hooks_on_old_module_fire",
         "en": "After `quantize`, hooks on the original `nn.Linear` never fire again: the model now holds a new "
               "`QLinear`, and quanto copies no hooks to it.",
         "zh": "`quantize` 之后，原来 `nn.Linear` 上的钩子再也不触发：模型里已是一个新的 `QLinear`，"
               "quanto 不会把钩子拷过去。"},
        {"fact": "facts.weight_tensor_hook_fires",
         "en": "A gradient hook on the weight survives `quantize` (the `QLinear` reuses the same `Parameter`) but "
               "not `freeze`, which puts a new quantized parameter in its place.",
         "zh": "权重上的梯度钩子能熬过 `quantize`（`QLinear` 沿用同一个 `Parameter`），却熬不过 `freeze`："
               "它会换上一个新的量化参数。"},
        {"fact": "facts.with_activations",
         "en": "With `activations=qint8` a user's forward pre-hook on a `QLinear` sees an `ActivationQBytesTensor`, "
               "not the float input: quanto's own `quantize_input` pre-hook ran first.",
         "zh": "设置 `activations=qint8` 后，用户挂在 `QLinear` 上的前向前置钩子看到的是 `ActivationQBytesTensor`，"
               "而不是浮点输入：quanto 自己的 `quantize_input` 前置钩子先运行了。"},
    ),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 8, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module, **activations) -> nn.Module:
    from optimum.quanto import freeze, qint8, quantize
    quantize(model, weights=qint8, **activations)
    freeze(model)
    return model


def facts() -> dict:
    from optimum.quanto import freeze, qint8, quantize
    torch.manual_seed(0)
    model = build()
    old = model[0]
    log: list[str] = []
    old.register_forward_hook(lambda *_: log.append("module forward"))
    old.weight.register_hook(lambda grad: log.append("tensor hook"))
    quantize(model, weights=qint8)
    model(*inputs()).pow(2).mean().backward()
    before_freeze = log.count("tensor hook")
    freeze(model)
    model(*inputs()).pow(2).mean().backward()
    replaced = {"new class": type(model[0]).__name__, "same object": model[0] is old,
                "old module's weight is None": old.weight is None}

    model = build()
    quantize(model, weights=qint8, activations=qint8)
    order: list[str] = []
    seen: dict[str, str] = {}
    qlinear = model[0]
    qlinear.register_forward_pre_hook(lambda m, a: seen.setdefault("input", type(a[0]).__name__) and None)
    qlinear.register_forward_hook(lambda m, a, out: seen.setdefault("output", type(out).__name__) and None)
    for fn in list(qlinear._forward_pre_hooks.values()) + list(qlinear._forward_hooks.values()):
        order.append(getattr(fn, "__name__", "yours"))
    freeze(model)
    model(*inputs())
    return {"module_replaced": replaced, "hooks_on_old_module_fire": log.count("module forward"),
            "weight_tensor_hook_fires": {"after quantize": before_freeze,
                                         "after freeze": log.count("tensor hook") - before_freeze},
            "with_activations": {"hooks on the QLinear in order": order, "user's pre-hook sees": seen["input"],
                                 "user's forward hook sees": seen["output"]}}
