"""peft: ``get_peft_model`` with LoRA replaces each target ``nn.Linear`` by a ``lora.Linear`` that keeps the original
as ``base_layer`` (the user's hooks stay on it and see the output without the adapter), copies ``modules_to_save``
with their hooks, and on a transformers model calls ``enable_input_require_grads`` again."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/huggingface/peft/blob/v0.21.2/src/peft/"
LIBRARY = Library(
    slug="peft", name="peft", category="model libraries",
    entry="peft.get_peft_model(model, LoraConfig(r=2, target_modules=['q_proj', 'v_proj']))",
    names=("get_peft_model", "PeftModel", "LoraConfig", "LoraModel", "LoraLayer", "BaseTunerLayer", "base_layer",
           "get_base_layer", "merge_and_unload", "unload", "disable_adapter", "ModulesToSaveWrapper",
           "modules_to_save", "original_module", "make_inputs_require_grad", "prepare_model_for_gradient_checkpointing",
           "_enable_peft_forward_hooks"),
    sources=(V + "peft_model.py#L184-L185", V + "peft_model.py#L728-L742", V + "tuners/lora/model.py#L470-L473",
             V + "tuners/lora/layer.py#L1074-L1115", V + "utils/other.py#L632-L653",
             V + "tuners/tuners_utils.py#L679-L786"),
    words={
        "en": {"summary": "PEFT registers no hook of its own on the layers for plain LoRA: it swaps modules. Each "
                          "target `nn.Linear` becomes a `lora.Linear` whose `base_layer` is the original module, "
                          "hooks included, so a user's hook there still fires but sees the output without the "
                          "adapter's `lora_B(lora_A(x)) * scaling`; a hook on the new layer sees the sum. A module in "
                          "`modules_to_save` is deep-copied, hook dicts and all, and the copy is what runs. On a "
                          "transformers model with gradient checkpointing, `get_peft_model` calls "
                          "`enable_input_require_grads()` again (one more forward hook on the input embeddings).",
               "remove": "`peft_model.unload()` or `merge_and_unload()` put the original modules back, with their "
                         "hooks (`merge_and_unload` folds the adapter into the weight, so those hooks then see it). "
                         "A hook copied into `modules_to_save` is not reached by the handle you kept: remove it from "
                         "the copy's `_forward_hooks`, or unload.",
               "api": "No callback API for users. Internally `_enable_peft_forward_hooks` registers forward "
                      "pre-hooks (with kwargs) on every LoRA layer for the length of one call when `adapter_names` "
                      "or aLoRA offsets are passed, and removes them after; they run after the user's pre-hooks "
                      "registered earlier."},
        "zh": {"summary": "普通 LoRA 下 PEFT 并不在层上注册钩子，而是替换模块：每个目标 `nn.Linear` 变成一个 "
                          "`lora.Linear`，原模块（连同它的钩子）成为其 `base_layer`。用户挂在原模块上的钩子照样触发，"
                          "但看到的是不含适配器 `lora_B(lora_A(x)) * scaling` 的输出；挂在新层上的钩子才看到相加之后的"
                          "结果。`modules_to_save` 里的模块会被连同钩子字典一起深拷贝，实际运行的是拷贝。对开启了梯度检查点"
                          "的 transformers 模型，`get_peft_model` 会再调一次 `enable_input_require_grads()`，"
                          "输入嵌入层上多出一个前向钩子。",
               "remove": "`peft_model.unload()` 或 `merge_and_unload()` 会把原模块连同钩子放回去（`merge_and_unload` "
                         "把适配器合并进权重，所以这些钩子之后看得到它）。被拷进 `modules_to_save` 的钩子，用户手里的句柄"
                         "删不掉：要从拷贝的 `_forward_hooks` 里删，或者直接 unload。",
               "api": "没有给用户的回调接口。内部的 `_enable_peft_forward_hooks` 在传入 `adapter_names` 或 aLoRA "
                      "偏移时，只在这一次调用期间给每个 LoRA 层注册带 kwargs 的前向前置钩子，调用结束就删掉；"
                      "它们排在用户先注册的前置钩子之后运行。"},
    },
    surprises=(
        {"fact": "facts.hook_on_replaced_linear",
         "en": "A hook put on a `nn.Linear` before `get_peft_model` still fires, but it sees the frozen layer's "
               "output without the LoRA update: the layer became `base_layer` inside `lora.Linear`.",
         "zh": "在 `get_peft_model` 之前挂在 `nn.Linear` 上的钩子依然触发，但看到的是不含 LoRA 增量的冻结层输出："
               "这个层已经变成了 `lora.Linear` 里的 `base_layer`。"},
        {"fact": "facts.modules_to_save_hook_after_handle_remove",
         "en": "A hook on a module listed in `modules_to_save` is copied with it: it fires from the copy (with the "
               "copy as `module`), and still fires after `handle.remove()`, which only reaches the original.",
         "zh": "`modules_to_save` 里的模块连钩子一起被拷贝：钩子从拷贝上触发（参数 `module` 是拷贝），"
               "`handle.remove()` 之后仍然触发，因为句柄只管得到原模块。"},
        {"fact": "probe.order.backward",
         "en": "The user's backward hooks on the original `Linear` of the first layer never fire after "
               "`get_peft_model`: its weight is frozen and nothing before it trains, so no gradient flows through "
               "`base_layer`; only hooks on the `lora.Linear` see one.",
         "zh": "`get_peft_model` 之后，第一层原来那个 `Linear` 上用户的反向钩子再也不触发：它的权重被冻结，"
               "它之前也没有可训练的部分，没有梯度流经 `base_layer`；只有挂在 `lora.Linear` 上的钩子看得到梯度。"},
    ),
)
TARGET = "model.layers.0.self_attn.q_proj"


def build() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    return LlamaForCausalLM(config)


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.tensor([[1, 2, 3, 4]]),)


def loss(output) -> torch.Tensor:
    return output.logits.float().pow(2).mean()


def apply(model: nn.Module, **config) -> nn.Module:
    from peft import LoraConfig, get_peft_model
    return get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                                            **config))


def remove(model: nn.Module) -> nn.Module:
    return model.unload()


def facts() -> dict:
    torch.manual_seed(0)
    model = build()
    linear = model.model.layers[0].self_attn.q_proj
    seen: dict[str, torch.Tensor] = {}
    linear.register_forward_hook(lambda m, a, out: seen.__setitem__("old Linear", out.detach()))
    peft_model = apply(model)
    lora = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    handle = lora.register_forward_hook(lambda m, a, out: seen.__setitem__("lora.Linear", out.detach()))
    peft_model(*inputs())
    on_replaced = {"fires": "old Linear" in seen, "is base_layer": lora.base_layer is linear,
                   "sees the adapter's part": bool(torch.allclose(seen["old Linear"], seen["lora.Linear"]))}
    handle.remove()
    seen.pop("old Linear")
    merged = peft_model.merge_and_unload()
    merged(*inputs())
    on_replaced["after merge_and_unload: back in the model"] = merged.model.layers[0].self_attn.q_proj is linear
    on_replaced["after merge_and_unload: sees the merged adapter"] = bool(
        torch.allclose(seen["old Linear"], seen["lora.Linear"], atol=1e-6))

    model = build()
    calls: list[nn.Module] = []
    original = model.lm_head
    handle = original.register_forward_hook(lambda m, a, out: calls.append(m))
    peft_model = apply(model, modules_to_save=["lm_head"])
    peft_model(*inputs())
    copied = {"fires": len(calls), "module passed is the original": bool(calls) and calls[-1] is original}
    handle.remove()
    calls.clear()
    peft_model(*inputs())
    copied["fires after handle.remove()"] = len(calls)

    model = build()
    model.gradient_checkpointing_enable()
    peft_model = apply(model)
    embed = model.model.embed_tokens
    hooks = {"after get_peft_model": len(embed._forward_hooks)}
    model.disable_input_require_grads()
    hooks["after disable_input_require_grads"] = len(embed._forward_hooks)
    return {"hook_on_replaced_linear": on_replaced, "modules_to_save_hook_after_handle_remove": copied,
            "embedding_hooks_after_checkpointing_then_get_peft_model": hooks}
