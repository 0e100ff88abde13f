"""pyvene: ``IntervenableModel`` registers getter and setter forward hooks (``with_kwargs=True``) on the chosen
components for one call and removes them after; before and after every call it also pops *every* forward hook and
forward pre-hook from every submodule of the wrapped model, the user's and other libraries' included."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/stanfordnlp/pyvene/blob/v0.1.8/pyvene/models/"
LIBRARY = Library(
    slug="pyvene", name="pyvene", requirement="pyvene==0.1.8", category="interpretability and attribution",
    entry="IntervenableModel(config, model)(base, [source], unit_locations={'sources->base': 0})",
    names=("IntervenableModel", "IntervenableConfig", "RepresentationConfig", "VanillaIntervention",
           "CollectIntervention", "remove_forward_hooks", "_cleanup_states", "_intervention_getter",
           "_intervention_setter", "HandlerList", "get_module_hook", "unit_locations"),
    sources=(_SRC + "modeling_utils.py#L77-L96", _SRC + "modeling_utils.py#L147-L200",
             _SRC + "intervenable_base.py#L251-L254", _SRC + "intervenable_base.py#L347-L355",
             _SRC + "intervenable_base.py#L1137-L1158", _SRC + "intervenable_base.py#L1386-L1452",
             _SRC + "intervenable_base.py#L1529-L1690", _SRC + "intervenable_base.py#L1865-L2028"),
    words={
        "en": {"summary": "Each component of the config (`block_output` of layer 0, or a module path such as "
                          "`\"mlp.h[0].output\"`) maps to a module and `register_forward_hook` or "
                          "`register_forward_pre_hook`. One call of the wrapper runs the sources with getter "
                          "hooks that store activations, then the base with setter hooks that write the "
                          "intervened values, and removes those handles. Around that, `_cleanup_states()` calls "
                          "`remove_forward_hooks(self.model)` at the start of every call and again in its "
                          "`finally`, popping every key of `_forward_hooks` and `_forward_pre_hooks` on every "
                          "submodule. Backward hooks (full backward hooks and full backward pre-hooks) are left alone. Building the wrapper also freezes the model "
                          "(`disable_model_gradients()`: `eval()` and `requires_grad=False` on every parameter).",
               "remove": "The wrapper keeps nothing on the model between calls. What it takes away does not "
                         "come back: re-register your forward hooks (and other libraries' ones, such as "
                         "`torch.nn.utils.prune`'s) after each call, or use a global "
                         "`register_module_forward_hook`, which it does not touch. `wrapper.enable_model_gradients()` "
                         "undoes the freezing.",
               "api": "Interventions (`VanillaIntervention`, `CollectIntervention`, trainable ones) run inside "
                      "pyvene's own hooks; `intervention_additional_kwargs` reach them. A user's module "
                      "forward hook cannot run alongside them on the wrapped model: it is removed before the "
                      "intervened forward starts, so it never fires during the call."},
        "zh": {"summary": "配置里的每个组件（第 0 层的 `block_output`，或 `\"mlp.h[0].output\"` 这样的模块路径）"
                          "对应一个模块和 `register_forward_hook` 或 `register_forward_pre_hook`。包装器调用一次时，"
                          "先用读取钩子（getter）跑各个 source，把激活值存下来，再用写入钩子（setter）跑 base，写入"
                          "干预后的值，然后移除这些句柄。在此之外，`_cleanup_states()` 在每次调用开始时以及 "
                          "`finally` 里都会调用 `remove_forward_hooks(self.model)`，把每个子模块 `_forward_hooks` "
                          "和 `_forward_pre_hooks` 里的键全部弹出。反向钩子（完整反向钩子和完整反向前置钩子）不受影响。构造包装器时还会冻结模型"
                          "（`disable_model_gradients()`：切到 `eval()`，并把每个参数设为 `requires_grad=False`）。",
               "remove": "两次调用之间包装器不在模型上留任何东西。它删掉的东西也不会回来：每次调用后都要重新注册你的"
                         "前向钩子（以及其他库的，比如 `torch.nn.utils.prune` 的），或改用全局的 "
                         "`register_module_forward_hook`，它不会碰那个。`wrapper.enable_model_gradients()` 可以解除冻结。",
               "api": "干预（`VanillaIntervention`、`CollectIntervention` 以及可训练的干预）在 pyvene 自己的钩子里"
                      "运行，`intervention_additional_kwargs` 会传给它们。在被包装的模型上，用户的模块前向钩子无法"
                      "与它们同时运行：干预前向开始之前它就被移除了，所以整个调用期间它一次也不会触发。"},
    },
    surprises=(
        {"fact": "facts.user_hooks_left_after_call",
         "en": "One call of `IntervenableModel` deletes every forward hook and forward pre-hook on the wrapped "
               "model, including the user's (which never fire during the call); only the full backward hook and "
               "the full backward pre-hook survive.",
         "zh": "调用一次 `IntervenableModel` 就会删掉被包装模型上所有的前向钩子和前向前置钩子，包括用户的（它们在"
               "调用期间一次也不会触发）；只有完整反向钩子和完整反向前置钩子留了下来。"},
        {"fact": "facts.prune_mask_after_call",
         "en": "It also removes other libraries' hooks: a layer pruned with `torch.nn.utils.prune` loses the "
               "forward pre-hook that applies its mask, while its `weight_mask` buffer stays, so the mask silently "
               "stops being applied: `weight` is no longer recomputed from `weight_orig * weight_mask`, and a change "
               "of the mask or of `weight_orig` (an optimizer step) no longer reaches the forward.",
         "zh": "其他库的钩子也一并被删：用 `torch.nn.utils.prune` 剪枝过的层会失去负责套用掩码的前向前置钩子，"
               "而它的 `weight_mask` 缓冲区还在，于是掩码悄无声息地不再生效：`weight` 不再由 "
               "`weight_orig * weight_mask` 重新算出，掩码或 `weight_orig` 的改动（优化器的一步）都到不了前向。"},
        {"fact": "facts.parameters_requiring_grad_after_wrapping",
         "en": "Wrapping a model in `IntervenableModel` puts it in `eval()` and sets `requires_grad=False` on all "
               "its parameters: a backward through the model afterwards reaches no parameter.",
         "zh": "把模型包进 `IntervenableModel` 会把它切到 `eval()`，并把所有参数设为 `requires_grad=False`："
               "之后对模型做反向，梯度到不了任何参数。"},
    ),
)
TARGET = "mlp.h.0"
PROBES = {"remove"}
SKIPPED = {"remove": "pyvene keeps no hook between calls, so there is nothing of its own to remove"}


def build() -> nn.Module:
    from pyvene.models.mlp.modelings_mlp import MLPConfig, MLPForClassification
    config = MLPConfig(include_emb=True, vocab_size=11, max_position_embeddings=4, h_dim=8, n_layer=2,
                       num_classes=3, pdrop=0.0)
    return MLPForClassification(config)


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.tensor([[1], [2], [3]]),)


def _wrapped(model: nn.Module):
    import pyvene as pv
    config = pv.IntervenableConfig(
        representations=[pv.RepresentationConfig(layer=0, component="block_output", unit="pos",
                                                 max_number_of_units=1)],
        intervention_types=pv.VanillaIntervention)
    return pv.IntervenableModel(config, model)


def _intervene(wrapper) -> None:
    wrapper({"input_ids": inputs()[0]}, [{"input_ids": torch.tensor([[4], [5], [6]])}],
            unit_locations={"sources->base": 0})


def apply(model: nn.Module) -> nn.Module:
    _intervene(_wrapped(model))
    return model


def _mask_applied(layer: nn.Module) -> dict:
    """Whether a pruned ``layer`` keeps its ``weight_mask`` buffer, and whether its forward still follows a change of
    ``weight_orig`` (doubled), then of the mask (all zeros), as prune's forward pre-hook makes it do."""
    x = torch.randn(3, layer.in_features, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = layer(x)
        layer.weight_orig.mul_(2.0)
        doubled = layer(x)
        layer.weight_mask.zero_()
        zeroed = layer(x)
    return {"weight_mask buffer kept": "weight_mask" in dict(layer.named_buffers()),
            "a forward follows a change of weight_orig": not torch.allclose(doubled, before),
            "a forward follows a change of weight_mask": not torch.allclose(zeroed, doubled)}


def _pruned_plain() -> nn.Module:
    """The control: the same layer, pruned the same way, never given to pyvene."""
    from torch.nn.utils import prune
    torch.manual_seed(0)
    layer = build().score
    prune.l1_unstructured(layer, "weight", amount=0.5)
    return layer


def facts() -> dict:
    from torch.nn.utils import prune
    model = build()
    fired: list[str] = []
    block = model.get_submodule(TARGET)
    block.register_forward_pre_hook(lambda m, a: fired.append("forward_pre"))
    block.register_forward_hook(lambda m, a, o: fired.append("forward"))
    block.register_full_backward_hook(lambda m, gi, go: None)
    block.register_full_backward_pre_hook(lambda m, go: None)
    prune.l1_unstructured(model.score, "weight", amount=0.5)
    wrapper = _wrapped(model)
    frozen = {"training_after_wrapping": model.training,
              "parameters_requiring_grad_after_wrapping": sum(p.requires_grad for p in model.parameters())}
    model.mlp.h[1].register_forward_hook(lambda m, a, o: fired.append("registered after wrapping"))
    _intervene(wrapper)
    out = {"user_hook_calls_during_call": len(fired),
           "user_hooks_left_after_call": {"forward_pre": len(block._forward_pre_hooks),
                                          "forward": len(block._forward_hooks),
                                          "backward": len(block._backward_hooks),
                                          "backward_pre": len(block._backward_pre_hooks)},
           "prune_forward_pre_hook_left": len(model.score._forward_pre_hooks),
           "prune_mask_after_call": {"pyvene's wrapped model": _mask_applied(model.score),
                                     "the same layer pruned, not wrapped": _mask_applied(_pruned_plain())},
           "pyvene_hooks_left_after_call": sum(len(m._forward_hooks) + len(m._forward_pre_hooks)
                                               for m in model.modules()),
           "wrapper_state_dict_extra_keys": len(wrapper.state_dict()) - len(model.state_dict()), **frozen}
    return out
