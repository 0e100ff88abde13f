"""timm: ``create_model(..., features_only=True, feature_cls="hook")`` wraps the model in a ``FeatureHookNet`` whose
``FeatureHooks`` put a forward hook on each feature module to collect its output; the whole model still runs."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/huggingface/pytorch-image-models/blob/v1.0.31/timm/models/"
LIBRARY = Library(
    slug="timm", name="timm", category="model libraries",
    entry="timm.create_model('test_resnet', pretrained=False, features_only=True, feature_cls='hook', "
          "out_indices=(1, 2))",
    names=("create_model", "features_only", "feature_cls", "out_indices", "FeatureHookNet", "FeatureHooks",
           "_collect_output_hook", "get_output", "FeatureListNet", "FeatureDictNet", "FeatureGetterNet",
           "set_grad_checkpointing", "grad_checkpointing", "checkpoint_seq", "reset_classifier", "feature_info"),
    sources=(V + "_features.py#L150-L199", V + "_features.py#L355-L442", V + "_builder.py#L479-L530",
             V + "resnet.py#L655-L661", V + "resnet.py#L775-L789",
             V + "_manipulate.py#L214-L289"),
    words={
        "en": {"summary": "With `feature_cls='hook'` the model is kept whole (as `body`, its classifier reset to "
                          "`Identity` by `reset_classifier(0)`) and `FeatureHooks` registers a forward hook "
                          "(`partial(FeatureHooks._collect_output_hook, id)`) on each module named in `feature_info` "
                          "for the `out_indices`; `forward` runs the whole body, then returns what the hooks "
                          "collected. The layers after the last feature still run, and a user's forward hook on a "
                          "feature module that edits its output changes the returned feature only if it was "
                          "registered before the wrapper was built.",
               "remove": "No removal API: the hooks are the feature extractor (their handles are in "
                         "`net.hooks._handles`). Use the wrapped model (`net.body`) for plain outputs, or build "
                         "the model without `features_only`.",
               "api": "No callback API. `set_grad_checkpointing()` on a ResNet runs the stages' blocks one by one in "
                      "`checkpoint_seq` (hooks on the stage modules stop firing, the blocks' pre-hooks fire again in "
                      "backward); on a `FeatureHookNet` it only checkpoints top-level modules that are neither first "
                      "nor last, so with the default `no_rewrite` (one module, `body`) it checkpoints nothing."},
        "zh": {"summary": "`feature_cls='hook'` 会保留整个模型（作为 `body`，分类头被 `reset_classifier(0)` 换成 "
                          "`Identity`），由 `FeatureHooks` 在 `feature_info` 里对应 `out_indices` 的每个模块上注册前向钩子"
                          "（`partial(FeatureHooks._collect_output_hook, id)`）；`forward` 跑完整个 `body`，再返回这些"
                          "钩子收集到的输出。最后一个特征之后的层也照样运行；用户挂在特征模块上、会修改输出的前向钩子，"
                          "只有在包装之前注册，它的修改才会出现在返回的特征里。",
               "remove": "没有删除接口：这些钩子就是特征提取器本身（句柄在 `net.hooks._handles` 里）。要普通输出就用"
                         "被包装的模型 `net.body`，或者不带 `features_only` 重新构建模型。",
               "api": "没有回调接口。ResNet 的 `set_grad_checkpointing()` 在 `checkpoint_seq` 里逐个运行各 stage 的 "
                      "block（stage 模块上的钩子不再触发，block 的前向前置钩子在反向时再触发一次）；`FeatureHookNet` "
                      "的版本只对既不是第一个也不是最后一个的顶层模块做检查点，默认 `no_rewrite` 下只有一个顶层模块 "
                      "`body`，所以什么都不会被检查点。"},
    },
    surprises=(
        {"fact": "facts.layers_after_last_feature_run",
         "en": "Asking for features 1 and 2 still runs `layer3` and `layer4`: the hook-based extractor runs the "
               "whole model and only reads what its hooks collected.",
         "zh": "只要第 1、2 个特征，`layer3` 和 `layer4` 也照样运行：基于钩子的提取器会跑完整个模型，"
               "只是读取钩子收集到的结果。"},
        {"fact": "facts.set_grad_checkpointing_recompute_fires",
         "en": "On a plain timm ResNet, `set_grad_checkpointing()` runs the blocks of all stages through "
               "`checkpoint_seq(..., flatten=True)`: the stage modules (`layer2`) are never called, so their hooks "
               "never fire, and a pre-hook on a block fires twice. On a `FeatureHookNet` it checkpoints nothing.",
         "zh": "在普通的 timm ResNet 上，`set_grad_checkpointing()` 通过 `checkpoint_seq(..., flatten=True)` "
               "直接逐个运行各 stage 里的 block：stage 模块本身（如 `layer2`）不再被调用，挂在上面的钩子永远不触发，"
               "block 上的前向前置钩子则触发两次。在 `FeatureHookNet` 上它什么都没检查点。"},
        {"fact": "facts.features_returned_with_body_checkpointed",
         "en": "Turning on checkpointing in the wrapped model (`net.body.set_grad_checkpointing()`) makes "
               "`FeatureHookNet` return no features at all: its hooks sit on the stages, which the checkpointed "
               "forward no longer calls.",
         "zh": "在被包装的模型上开启检查点（`net.body.set_grad_checkpointing()`）后，`FeatureHookNet` 一个特征也"
               "返回不了：它的钩子挂在 stage 上，而检查点版本的前向不再调用这些 stage。"},
    ),
)
TARGET = "layer1"


def build() -> nn.Module:
    import timm
    return timm.create_model("test_resnet", pretrained=False)


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)),)


def loss(output) -> torch.Tensor:
    """The features (a list, or a dict from a feature extractor), or the plain model's logits."""
    features = [output] if isinstance(output, torch.Tensor) else output.values() if isinstance(output, dict) else output
    return sum(feature.float().pow(2).mean() for feature in features)


def apply(model: nn.Module) -> nn.Module:
    """What ``create_model(..., features_only=True, feature_cls="hook", out_indices=(1, 2))`` does to the model it
    builds (``_builder.build_model_with_cfg``), on a model the user's hooks are already on."""
    from timm.models._features import FeatureHookNet
    return FeatureHookNet(model, out_indices=(1, 2))


def _count(module: nn.Module, counts: dict[str, int], name: str) -> None:
    counts[name] = 0
    module.register_forward_pre_hook(lambda *_: counts.__setitem__(name, counts[name] + 1))


def facts() -> dict:
    import timm
    created = timm.create_model("test_resnet", pretrained=False, features_only=True, feature_cls="hook",
                                out_indices=(1, 2))
    same = type(created).__name__ == "FeatureHookNet" and sorted(
        n for n, m in created.named_modules() if m._forward_hooks) == ["body.layer1", "body.layer2"]
    counts: dict[str, int] = {}
    _count(created.body.layer4, counts, "layer4")
    created(*inputs())

    def shown(before_wrapping: bool) -> bool:
        plain = build()
        edit = lambda mod, args, out: out + 100.0  # noqa: E731 - a user's hook that edits the output
        if before_wrapping:
            plain.layer1.register_forward_hook(edit)
        net = apply(plain)
        if not before_wrapping:
            plain.layer1.register_forward_hook(edit)
        return bool(net(*inputs())[0].min() > 50)

    fires: dict[str, int] = {}
    for name, model in (("FeatureHookNet", apply(build())), ("plain model", build())):
        model.set_grad_checkpointing(True)
        stage = model.body.layer2 if name == "FeatureHookNet" else model.layer2
        _count(stage, fires, f"{name}: stage layer2")
        _count(stage[0], fires, f"{name}: its block layer2.0")
        out = model(*inputs())
        (loss(out) if isinstance(out, list) else out.pow(2).mean()).backward()
    net = apply(build())
    net.body.set_grad_checkpointing(True)
    features = len(net(*inputs()))
    return {"create_model_puts_the_same_hooks": same, "layers_after_last_feature_run": counts["layer4"] > 0,
            "returned_feature_shows_user_edit": {"hook registered before the wrapper": shown(True),
                                                 "hook registered after it": shown(False)},
            "set_grad_checkpointing_recompute_fires": fires,
            "features_returned_with_body_checkpointed": features}
