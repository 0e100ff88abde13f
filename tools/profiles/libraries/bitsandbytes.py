"""bitsandbytes: its layers (``Linear8bitLt``, ``Linear4bit``) replace ``nn.Linear`` (the user's hooks stay on the
old module), hold their weight as a quantized ``Parameter`` subclass that is quantized by ``.to(device)`` and
takes no gradient hook, and ``Linear8bitLt`` registers a ``load_state_dict`` pre-hook."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/bitsandbytes-foundation/bitsandbytes/blob/0.50.2/bitsandbytes/nn/modules.py"
LIBRARY = Library(
    slug="bitsandbytes", name="bitsandbytes", category="quantization and compression",
    requirement="bitsandbytes==0.50.2",
    entry="swap each nn.Linear for bnb.nn.Linear8bitLt(..., has_fp16_weights=False), load_state_dict(...), "
          "then model.to(device) (quantization happens on .to)",
    names=("Linear8bitLt", "Linear4bit", "LinearNF4", "LinearFP4", "Int8Params", "Params4bit", "has_fp16_weights",
           "maybe_rearrange_weight", "_quantize", "quant_state", "SCB", "weight_format", "MatmulLtState",
           "Embedding8bit", "Embedding4bit", "StableEmbedding"),
    sources=(V + "#L213-L217", V + "#L381-L444", V + "#L593-L637", V + "#L719-L809", V + "#L812-L830",
             V + "#L1092-L1093", V + "#L1180-L1194"),
    words={
        "en": {"summary": "bitsandbytes registers no forward or backward hook. Its layers are new modules, so "
                          "swapping `nn.Linear` for `Linear8bitLt` / `Linear4bit` leaves the user's hooks on the "
                          "old object. The weight becomes an `Int8Params` / `Params4bit` subclass with "
                          "`requires_grad=False` that is quantized in place the first time it is moved with "
                          "`.to(device)` (also to the CPU): a hook reading `module.weight` sees `int8` values, or "
                          "for 4 bit a packed `uint8` column, never the float weight. `Linear8bitLt` registers "
                          "`maybe_rearrange_weight` as a `load_state_dict` pre-hook and both layers add their "
                          "quantization state to `state_dict`.",
               "remove": "No hooks to remove; the quantization is not undone (`bnb.functional` "
                         "`dequantize_4bit` / the `SCB` scales give float values back). Register your hooks on the "
                         "new layers after swapping them in.",
               "api": "No hook or callback API on the model. The quantized matmul (`bnb.matmul`, "
                      "`bnb.matmul_4bit`) runs inside the layer's `forward`, between the user's forward "
                      "pre-hooks and forward hooks; gradients flow to the input (backward hooks fire), not to the "
                      "frozen weight."},
        "zh": {"summary": "bitsandbytes 不注册任何前向或反向钩子。它的层是新模块，所以把 `nn.Linear` 换成 "
                          "`Linear8bitLt` / `Linear4bit` 之后，用户的钩子留在旧对象上。权重变成 `requires_grad=False` "
                          "的 `Int8Params` / `Params4bit` 子类，第一次 `.to(device)`（包括移到 CPU）时就地量化："
                          "读 `module.weight` 的钩子看到的是 `int8` 数值，4 bit 时是打包成一列的 `uint8`，"
                          "再也看不到浮点权重。`Linear8bitLt` 会把 `maybe_rearrange_weight` 注册为 `load_state_dict` "
                          "前置钩子，两种层都会把量化状态写进 `state_dict`。",
               "remove": "没有钩子需要删除；量化不能撤销（用 `bnb.functional` 的 `dequantize_4bit` 或 `SCB` 缩放"
                         "可以还原浮点值）。换上新层之后，在新层上重新注册钩子。",
               "api": "模型上没有钩子或回调接口。量化矩阵乘（`bnb.matmul`、`bnb.matmul_4bit`）在层的 `forward` 里"
                      "运行，位于用户的前向前置钩子和前向钩子之间；梯度会流向输入（反向钩子会触发），"
                      "不会流向被冻结的权重。"},
    },
    surprises=(
        {"fact": "facts.quantized_by_to",
         "en": "The weight is quantized by `.to()`, not when the layer is built or loaded: until then a hook "
               "sees the float weight, after `model.to('cpu')` it sees `int8`.",
         "zh": "权重是在 `.to()` 时量化的，而不是构建或加载时：在那之前钩子看到的是浮点权重，"
               "`model.to('cpu')` 之后看到的就是 `int8`。"},
        {"fact": "facts.weight_seen_by_a_hook",
         "en": "A hook that reads `module.weight` of a `Linear4bit` gets a packed `uint8` tensor of shape "
               "`[16, 1]` for a 4x8 layer, not the `[4, 8]` matrix.",
         "zh": "读取 `Linear4bit` 的 `module.weight` 的钩子，对一个 4x8 的层拿到的是形状为 `[16, 1]` 的打包 "
               "`uint8` 张量，而不是 `[4, 8]` 的矩阵。"},
        {"fact": "facts.float_state_dict_into_quantized",
         "en": "Loading a float state dict into the quantized model raises nothing and reports all keys matched, "
               "but `copy_` truncates the float weights into the `int8` parameter: the outputs are wrong.",
         "zh": "把浮点的 state dict 加载进量化后的模型不会报错，还报告所有键都匹配，但 `copy_` 把浮点权重截断进了 "
               "`int8` 参数：输出已经不对了。"},
    ),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 8, generator=torch.Generator().manual_seed(0)),)


def _swap(model: nn.Module, make) -> nn.Module:
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            layer = make(child.in_features, child.out_features, child.bias is not None)
            layer.load_state_dict(child.state_dict())
            setattr(model, name, layer)
    return model


def apply(model: nn.Module) -> nn.Module:
    import bitsandbytes as bnb
    return _swap(model, lambda i, o, b: bnb.nn.Linear8bitLt(i, o, b, has_fp16_weights=False)).to("cpu")


def facts() -> dict:
    import bitsandbytes as bnb
    torch.manual_seed(0)
    model = _swap(build(), lambda i, o, b: bnb.nn.Linear8bitLt(i, o, b, has_fp16_weights=False))
    before_to = str(model[0].weight.dtype).removeprefix("torch.")
    model.to("cpu")
    after_to = str(model[0].weight.dtype).removeprefix("torch.")
    layer = model[0]
    log: list[str] = []
    layer.register_forward_hook(lambda *_: log.append("forward"))
    layer.register_full_backward_hook(lambda *_: log.append("backward"))
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    model(x).pow(2).mean().backward()
    fires = {k: log.count(k) for k in ("forward", "backward")}
    try:
        layer.weight.register_hook(lambda grad: None)
        weight_hook = "registered"
    except RuntimeError as exc:
        weight_hook = f"raises {type(exc).__name__}"

    torch.manual_seed(1)
    floating = build()
    problems = model.load_state_dict(floating.state_dict())
    loaded = {"all keys matched": not (problems.missing_keys or problems.unexpected_keys),
              "weight dtype after": str(model[0].weight.dtype).removeprefix("torch."),
              "output matches the float model": bool(torch.allclose(model(x), floating(x), atol=0.1))}

    seen: dict[str, dict] = {}
    for name, make in (("Linear8bitLt", lambda: bnb.nn.Linear8bitLt(8, 4, has_fp16_weights=False)),
                       ("Linear4bit", lambda: bnb.nn.Linear4bit(8, 4, compute_dtype=torch.float32))):
        quantized = make()
        quantized.load_state_dict(nn.Linear(8, 4).state_dict())
        quantized = quantized.to("cpu").train()  # train mode: no CPU repacking that depends on the processor
        quantized.register_forward_pre_hook(lambda m, a, n=name: seen.setdefault(n, {
            "class": type(m.weight).__name__, "dtype": str(m.weight.dtype).removeprefix("torch."),
            "shape": list(m.weight.shape)}) and None)
        quantized(torch.randn(2, 8))
    return {"quantized_by_to": {"after load_state_dict": before_to, "after .to('cpu')": after_to},
            "weight_seen_by_a_hook": seen, "module_hooks_fire": fires,
            "hook_on_weight": weight_hook, "float_state_dict_into_quantized": loaded,
            "weight_requires_grad": layer.weight.requires_grad,
            "load_state_dict_pre_hooks": sorted(getattr(h, "hook", h).__name__
                                                for h in layer._load_state_dict_pre_hooks.values())}
