"""captum: an attribution method puts forward hooks on the layer it attributes to only while ``attribute`` runs, after
the user's hooks, and takes them off in a ``finally``; ``GuidedBackprop`` rewrites ReLU gradients without any module
backward hook (forward hooks that hang tensor hooks on the ReLU's input and output)."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/pytorch/captum/blob/v0.9.0/captum/"
LIBRARY = Library(
    slug="captum", name="captum", category="interpretability and attribution",
    entry="LayerIntegratedGradients(model, model[0]).attribute(x, target=0, n_steps=4)",
    names=("LayerIntegratedGradients", "LayerGradCam", "GuidedBackprop", "Deconvolution", "DeepLift",
           "_forward_layer_eval", "_forward_layer_distributed_eval", "_register_backward_hook",
           "attribute_to_layer_input", "n_steps", "internal_batch_size"),
    sources=(_SRC + "_utils/gradient.py#L257-L361",
             _SRC + "attr/_core/layer/layer_integrated_gradients.py#L130-L233", _SRC + "_utils/common.py#L861-L911",
             _SRC + "attr/_core/guided_backprop_deconvnet.py#L44-L115"),
    words={
        "en": {"summary": "Layer methods register a forward hook on the chosen layer (a forward pre-hook with "
                          "`attribute_to_layer_input=True`) for each forward they run and remove it in `finally`: "
                          "nothing is left on the model afterwards. One `LayerIntegratedGradients.attribute` runs "
                          "the model three times: two `no_grad` passes that read the layer's output for the inputs "
                          "and the baselines, then one batched pass in which captum's hook returns the "
                          "interpolated layer values instead of the layer's own output. `GuidedBackprop` and "
                          "`Deconvolution` put a forward pre-hook and a forward hook on every `nn.ReLU`; those "
                          "hang tensor hooks on the ReLU's input and output that clamp the gradient.",
               "remove": "Nothing to remove after the call. To keep a user's hook out of the attribution, remove "
                         "it before `attribute` or check `torch.is_grad_enabled()` in it; a functional "
                         "`F.relu` is invisible to `GuidedBackprop` (it only hooks `nn.ReLU` modules).",
               "api": "No hook API of its own: captum's hooks are registered at call time, so they run after "
                      "every forward hook the user registered earlier on that layer. A user's forward hook sees "
                      "the layer's real output; the rest of the model gets captum's replacement, and an edit the "
                      "user's hook makes is what captum records and attributes."},
        "zh": {"summary": "层级方法在每次内部前向之前给目标层注册一个前向钩子（`attribute_to_layer_input=True` 时是"
                          "前向前置钩子），在 `finally` 里移除，调用结束后模型上什么也不留。一次 "
                          "`LayerIntegratedGradients.attribute` 会把模型跑三遍：两遍 `no_grad`，分别读取输入和"
                          "基线在该层的输出；最后一遍把插值步骤拼成一个批次，captum 的钩子用插值后的层值替换该层"
                          "真正的输出。`GuidedBackprop` 和 `Deconvolution` 给每个 `nn.ReLU` 挂一个前向前置钩子和"
                          "一个前向钩子，再由它们在 ReLU 的输入和输出张量上挂张量钩子来截断梯度。",
               "remove": "调用结束后无需移除。若不想让自己的钩子参与归因，就在 `attribute` 之前移除它，或在钩子里"
                         "检查 `torch.is_grad_enabled()`；函数式的 `F.relu` 不受 `GuidedBackprop` 影响（它只钩 "
                         "`nn.ReLU` 模块）。",
               "api": "captum 没有自己的钩子 API：它的钩子在调用时才注册，所以排在用户先前注册在该层的所有前向钩子"
                      "之后。用户的前向钩子看到的是该层真实的输出，模型后面的部分拿到的是 captum 替换后的值；用户钩子"
                      "对输出所做的修改会被 captum 记录下来，并据此计算归因。"},
    },
    surprises=(
        {"fact": "facts.lig_user_forward_calls",
         "en": "A user's forward hook on the layer runs three times in one `LayerIntegratedGradients.attribute` "
               "call, twice under `no_grad`.",
         "zh": "一次 `LayerIntegratedGradients.attribute` 调用中，用户挂在该层上的前向钩子会运行三次，"
               "其中两次处于 `no_grad` 之下。"},
        {"fact": "facts.lig_next_layer_gets_what_user_saw",
         "en": "In the gradient pass the user's forward hook sees the layer's own output, but the next layer "
               "receives captum's interpolated values: what a hook logs is not what the model ran on.",
         "zh": "在求梯度的那一遍里，用户的前向钩子看到的是该层自己的输出，下一层拿到的却是 captum 的插值："
               "钩子记录下来的并不是模型实际用到的值。"},
        {"fact": "facts.gbp_relu_captum_hook_kinds",
         "en": "`GuidedBackprop` warns that it sets backward hooks on ReLUs, but the hooks it registers are a "
               "forward pre-hook and a forward hook per `nn.ReLU`: `module._backward_hooks` stays empty.",
         "zh": "`GuidedBackprop` 的警告说它在 ReLU 上设置了反向钩子，但它实际注册的是每个 `nn.ReLU` 上的一个前向"
               "前置钩子和一个前向钩子：`module._backward_hooks` 始终为空。"},
    ),
)
TARGET = "0"
PROBES = {"deepcopy", "compile", "checkpoint", "accumulate"}
SKIPPED = {p: "captum leaves no hook on the model after `attribute` returns: nothing to carry into a copy, a "
              "compiled or checkpointed forward, or a second backward" for p in PROBES}


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from captum.attr import LayerIntegratedGradients
    LayerIntegratedGradients(model, model[0]).attribute(*inputs(), target=0, n_steps=4)
    return model


def facts() -> dict:
    from captum.attr import GuidedBackprop, LayerIntegratedGradients

    from hooklab.systems import hook_owner
    model, (x,) = build(), inputs()
    calls: list[tuple[bool, torch.Tensor]] = []
    received: list[torch.Tensor] = []
    h1 = model[0].register_forward_hook(lambda m, a, out: calls.append((torch.is_grad_enabled(), out.detach())))
    h2 = model[1].register_forward_pre_hook(lambda m, a: received.append(a[0].detach()))
    LayerIntegratedGradients(model, model[0]).attribute(x, target=0, n_steps=4)
    h1.remove()
    out = {"lig_user_forward_calls": len(calls), "lig_user_forward_grad_enabled": [g for g, _ in calls],
           "lig_next_layer_gets_what_user_saw": [torch.equal(o, r) for (_, o), r in zip(calls, received)]}
    h2.remove()
    zero = model[0].register_forward_hook(lambda m, a, o: o * 0)
    attributions = LayerIntegratedGradients(model, model[0]).attribute(x, target=0, n_steps=4)
    zero.remove()
    out["lig_attributes_user_edit"] = bool((attributions == 0).all())
    seen: dict[str, object] = {}
    fired: list[str] = []

    def during(module, args):
        kinds = {"forward_pre": module._forward_pre_hooks, "forward": module._forward_hooks,
                 "backward": module._backward_hooks, "backward_pre": module._backward_pre_hooks}
        seen["kinds"] = sorted(k for k, d in kinds.items() for fn in d.values() if hook_owner(fn) == "captum")
    model[1].register_forward_pre_hook(during)
    model[1].register_full_backward_hook(lambda m, gi, go: fired.append("user full backward on ReLU"))
    GuidedBackprop(model).attribute(x.clone().requires_grad_(), target=0)
    out["gbp_relu_captum_hook_kinds"] = seen["kinds"]
    out["gbp_user_full_backward_on_relu_fires"] = fired == ["user full backward on ReLU"]
    out["gbp_captum_hooks_left"] = sum(hook_owner(fn) == "captum" for d in (model[1]._forward_pre_hooks,
                                       model[1]._forward_hooks) for fn in d.values())
    return out
