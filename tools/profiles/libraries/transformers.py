"""transformers: ``gradient_checkpointing_enable`` puts a forward hook on the input embeddings
(``enable_input_require_grads``) and checkpoints each decoder layer's ``forward``; the first call that asks for
``output_hidden_states`` / ``output_attentions`` puts ``output_capturing_hook`` forward hooks on the layers for good."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/huggingface/transformers/blob/v5.23.0/src/transformers/"
LIBRARY = Library(
    slug="transformers", name="transformers", category="model libraries",
    entry="model.gradient_checkpointing_enable(); model(input_ids, output_hidden_states=True, output_attentions=True)",
    names=("gradient_checkpointing_enable", "activation_checkpointing_enable", "enable_input_require_grads",
           "disable_input_require_grads", "make_inputs_require_grads", "_require_grads_hooks",
           "GradientCheckpointingLayer", "output_capturing_hook", "capture_outputs", "OutputRecorder",
           "_can_record_outputs", "_output_capturing_hooks_installed", "output_hidden_states", "output_attentions"),
    sources=(V + "modeling_utils.py#L2137-L2192", V + "modeling_utils.py#L3142-L3189",
             V + "modeling_layers.py#L82-L123", V + "utils/output_capturing.py#L120-L153",
             V + "utils/output_capturing.py#L198-L245", V + "utils/output_capturing.py#L353-L364"),
    words={
        "en": {"summary": "`gradient_checkpointing_enable()` (in 5.x a deprecated alias of "
                          "`activation_checkpointing_enable()`) registers `make_inputs_require_grads`, a forward "
                          "hook on the input embeddings, and wraps each decoder layer class's `forward` in "
                          "`checkpoint`: the layer's own module hooks stay outside the checkpoint and run once, its "
                          "submodules' hooks run again when backward recomputes the layer, except those of the "
                          "submodules that finish after the layer has saved its last tensor for backward: torch's "
                          "default early stop ends the recomputation there (in a Llama layer, `mlp` and "
                          "`mlp.down_proj` fire once); under `torch.utils.checkpoint.set_checkpoint_early_stop(False)` "
                          "they run again too. The first call with "
                          "`output_hidden_states` or `output_attentions` registers `output_capturing_hook` forward "
                          "hooks on the decoder layers and attention modules; they stay for good and record only "
                          "while a call asks for outputs.",
               "remove": "`model.disable_input_require_grads()` removes the embedding hooks it kept handles of "
                         "(a second `enable_input_require_grads()` forgets the first handles); "
                         "`gradient_checkpointing_disable()` turns checkpointing off. The output capturing hooks "
                         "have no removal API: build the model again, or pop them from `_forward_hooks`.",
               "api": "No callback API of its own on the model: transformers uses PyTorch forward hooks. "
                      "`output_capturing_hook` runs in registration order with the user's forward hooks on the "
                      "same layer, so `hidden_states` shows a user's edit of a layer's output only when the user's "
                      "hook was registered before the first capturing call. `Trainer` callbacks are separate "
                      "(`TrainerCallback`)."},
        "zh": {"summary": "`gradient_checkpointing_enable()`（5.x 里它已是 `activation_checkpointing_enable()` 的弃用别名）"
                          "在输入嵌入层上注册前向钩子 `make_inputs_require_grads`，并把每个解码层类的 `forward` 包进 "
                          "`checkpoint`：解码层自身的模块钩子留在检查点之外，只运行一次；它的子模块的钩子会在反向重算"
                          "该层时再运行一次，但在该层为反向保存完最后一个张量之后才结束的子模块除外：torch 默认的提前停止"
                          "在那里结束重算（Llama 的解码层里，`mlp` 和 `mlp.down_proj` 只触发一次）；在 "
                          "`torch.utils.checkpoint.set_checkpoint_early_stop(False)` 下它们也会再运行。第一次带 `output_hidden_states` 或 `output_attentions` 的调用会在解码层和"
                          "注意力模块上注册前向钩子 `output_capturing_hook`，之后一直留着，只在调用要求输出时才记录。",
               "remove": "`model.disable_input_require_grads()` 删掉它保留了句柄的嵌入层钩子（再调一次 "
                         "`enable_input_require_grads()` 会丢掉前一次的句柄）；`gradient_checkpointing_disable()` "
                         "关掉检查点。输出捕获钩子没有删除接口：重新构建模型，或者从 `_forward_hooks` 里手动弹出。",
               "api": "模型上没有自己的回调接口，用的就是 PyTorch 的前向钩子。`output_capturing_hook` 和用户注册在同一层"
                      "上的前向钩子按注册先后运行：只有用户的钩子注册在第一次捕获调用之前，`hidden_states` 里才看得到"
                      "用户对该层输出的修改。`Trainer` 的回调（`TrainerCallback`）是另一套机制。"},
    },
    surprises=(
        {"fact": "facts.recompute_fires",
         "en": "Under gradient checkpointing a hook on a decoder layer fires once, but a hook on its `self_attn` "
               "fires again in backward: transformers checkpoints the layer's `forward`, not its `__call__`. A hook on "
               "its `mlp` fires once all the same: the recomputation stops once the layer's last tensor for backward "
               "is saved again (torch's default early stop), before `mlp` finishes.",
         "zh": "开启梯度检查点后，解码层上的钩子只触发一次，而它的 `self_attn` 上的钩子会在反向时再触发一次："
               "transformers 检查点的是层的 `forward`，而不是 `__call__`。可它的 `mlp` 上的钩子还是只触发一次：该层"
               "为反向保存的最后一个张量一旦重新存好，重算就停下（torch 默认的提前停止），那时 `mlp` 还没有结束。"},
        {"fact": "facts.recompute_fires_without_early_stop",
         "en": "Under `torch.utils.checkpoint.set_checkpoint_early_stop(False)` the recomputation runs the whole "
               "layer again, and the hooks on `mlp` and `mlp.down_proj` fire twice too.",
         "zh": "在 `torch.utils.checkpoint.set_checkpoint_early_stop(False)` 下，重算会把整层再跑一遍，`mlp` 和 "
               "`mlp.down_proj` 上的钩子也触发两次。"},
        {"fact": "facts.hidden_states_show_user_edit",
         "en": "`output_hidden_states` records a layer's output from its own forward hook, so a user's hook that "
               "edits the output shows up there only if it was registered before the first capturing call.",
         "zh": "`output_hidden_states` 是用层上的前向钩子记录输出的：用户修改输出的钩子只有在第一次捕获调用之前"
               "注册，它的修改才会出现在 `hidden_states` 里。"},
        {"fact": "facts.embedding_hooks_left_after_enable_twice_then_disable",
         "en": "Calling `enable_input_require_grads()` twice leaves two hooks on the embeddings, and "
               "`disable_input_require_grads()` then removes only the second.",
         "zh": "`enable_input_require_grads()` 调两次会在嵌入层上留下两个钩子，之后 `disable_input_require_grads()` "
               "只删得掉第二个。"},
    ),
)
TARGET = "model.layers.0"


def build() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    return LlamaForCausalLM(config).train()


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.tensor([[1, 2, 3, 4, 5]]),)


def loss(output) -> torch.Tensor:
    return output.logits.float().pow(2).mean()


def apply(model: nn.Module) -> nn.Module:
    model.gradient_checkpointing_enable()
    model(*inputs(), output_hidden_states=True, output_attentions=True)
    return model


def remove(model: nn.Module) -> nn.Module:
    model.disable_input_require_grads()
    model.gradient_checkpointing_disable()
    return model


def _counter(module: nn.Module, counts: dict[str, int], name: str):
    counts[name] = 0
    return module.register_forward_hook(lambda *_: counts.__setitem__(name, counts[name] + 1))


def _recompute_counts(model: nn.Module, early_stop: bool) -> dict[str, int]:
    """How often forward hooks on the first decoder layer and its submodules fire over one forward and backward."""
    from torch.utils.checkpoint import set_checkpoint_early_stop
    layer = model.model.layers[0]
    counts: dict[str, int] = {}
    handles = [_counter(module, counts, name) for name, module in (
        ("decoder layer", layer), ("its self_attn", layer.self_attn), ("its mlp", layer.mlp),
        ("its mlp.up_proj", layer.mlp.up_proj), ("its mlp.down_proj", layer.mlp.down_proj))]
    with set_checkpoint_early_stop(early_stop):
        loss(model(*inputs())).backward()
    for h in handles:
        h.remove()
    return counts


def facts() -> dict:
    model = apply(build())
    layer = model.model.layers[0]
    counts = _recompute_counts(model, early_stop=True)
    counts_without_early_stop = _recompute_counts(model, early_stop=False)

    def shown(before_first_capture: bool) -> bool:
        torch.manual_seed(0)
        fresh = build().eval()
        edit = lambda mod, args, out: out + 100.0  # noqa: E731 - a user's hook that edits the output
        if before_first_capture:
            fresh.model.layers[0].register_forward_hook(edit)
        fresh(*inputs(), output_hidden_states=True)
        if not before_first_capture:
            fresh.model.layers[0].register_forward_hook(edit)
        out = fresh(*inputs(), output_hidden_states=True)
        return bool(out.hidden_states[1].abs().min() > 50)

    twice = build()
    twice.enable_input_require_grads()
    twice.enable_input_require_grads()
    twice.disable_input_require_grads()
    capture = [fn.__name__ for fn in layer._forward_hooks.values()]
    return {"recompute_fires": counts, "recompute_fires_without_early_stop": counts_without_early_stop,
            "hidden_states_show_user_edit": {"hook registered before the first capturing call": shown(True),
                                             "hook registered after it": shown(False)},
            "embedding_hooks_left_after_enable_twice_then_disable": len(twice.model.embed_tokens._forward_hooks),
            "capturing_hooks_stay_after_call": capture.count("output_capturing_hook")}
